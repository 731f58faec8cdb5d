"""Parameters an attention module holds per head (`self.angle = nn.Parameter(torch.randn(heads,
1, d))`, a per-head temperature `torch.ones(1, self.heads, 1, 1)`): sharding the heads gives each
rank a share of the query, key and value heads, while such a parameter keeps every head, so the
two no longer line up (a shape error at the first call, or per-head values paired with the wrong
heads where they broadcast). Read from the module's own `__init__`: a `Parameter` whose data is
built with a size that is the head count, named as the attribute the projections are reshaped
with or the `__init__` parameter stored in it."""

from __future__ import annotations

import ast

from ..astutil import callee_name, self_attr, walk

_BUILDERS = frozenset({"randn", "rand", "zeros", "ones", "empty", "full", "tensor", "arange"})


def per_head_parameter(
    cls: ast.ClassDef, heads_attrs: set[str]
) -> tuple[str, int, str | None] | None:
    """(attribute, line, condition) of the first per-head parameter `cls.__init__` builds; the
    condition is the test of the `if` it is built under (a configuration that has it), None
    when it is always built."""
    init = next(
        (s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
    )
    if init is None or not heads_attrs:
        return None
    names = _stored_as(init, heads_attrs)
    tests = _conditions(init)
    for node in walk(init):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        attr = next((a for t in node.targets if (a := self_attr(t)) is not None), None)
        if attr is None or callee_name(node.value).split(".")[-1] != "Parameter":
            continue
        for call in walk(node.value):
            if not (isinstance(call, ast.Call) and callee_name(call).split(".")[-1] in _BUILDERS):
                continue
            sizes = [s for a in call.args for s in (a.elts if isinstance(a, ast.Tuple) else [a])]
            if any(_is_heads(s, heads_attrs, names) for s in sizes):
                test = tests.get(id(node))
                return attr, node.lineno, " and ".join(test) if test else None
    return None


def _conditions(func: ast.FunctionDef) -> dict[int, list[str]]:
    """For each statement under an `if` of `func`: the tests that must hold (`else` negated)."""
    out: dict[int, list[str]] = {}

    def visit(body: list[ast.stmt], tests: list[str]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If):
                visit(stmt.body, [*tests, ast.unparse(stmt.test)])
                visit(stmt.orelse, [*tests, f"not ({ast.unparse(stmt.test)})"])
            else:
                if tests:
                    out[id(stmt)] = tests
                for child in ast.iter_child_nodes(stmt):
                    if isinstance(child, ast.stmt):
                        visit([child], tests)

    visit(func.body, [])
    return out


def _stored_as(init: ast.FunctionDef, heads_attrs: set[str]) -> set[str]:
    """Local names `__init__` stores in a heads attribute (`self.heads = heads`, also in a tuple
    assignment)."""
    out: set[str] = set()
    for node in walk(init):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = (
                zip(target.elts, node.value.elts, strict=False)
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                else [(target, node.value)]
            )
            for t, v in pairs:
                if self_attr(t) in heads_attrs and isinstance(v, ast.Name):
                    out.add(v.id)
    return out


def _is_heads(size: ast.expr, heads_attrs: set[str], names: set[str]) -> bool:
    return (isinstance(size, ast.Name) and size.id in names) or self_attr(size) in heads_attrs
