"""How the elements of a block list are built: the classes of `self.<list> = nn.ModuleList(...)`
read from a comprehension, a literal (with `+` and `*` unpacking), `list(...)`, a local list
filled by `append`/`extend`, a conditional, a local name standing for a class (`block_cls = A if
flag else B`), or a factory method of the class; and the count the construction shows."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .astutil import call_name, callee_name, self_attr, walk, walk_local


@dataclass
class Element:
    """One way an element of a block list is built: `Outer(Inner(...))` keeps the inner class."""

    class_name: str
    line: int
    inner: list[str] = field(default_factory=list)


def is_module_list_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and callee_name(node) == "ModuleList"


def count_of(generators: list[ast.comprehension]) -> str | None:
    for gen in generators:
        it = gen.iter
        if isinstance(it, ast.Call) and callee_name(it) == "range" and it.args:
            return ast.unparse(it.args[-1] if len(it.args) == 1 else it.args[1])
        return f"len({ast.unparse(it)})"
    return None


class ElementCollector:
    """Collects the element constructors of a ModuleList expression."""

    def __init__(
        self, func: ast.FunctionDef, methods: dict[str, ast.FunctionDef] | None = None
    ) -> None:
        self.func = func
        self.methods = methods or {}
        self.count_expr: str | None = None
        self.built_by = "unknown"
        self._followed: set[str] = set()

    def helper(self, node: ast.AST) -> ast.FunctionDef | None:
        """The class' own method a `self.<method>(...)` call runs (a factory helper), once."""
        if not isinstance(node, ast.Call):
            return None
        name = self_attr(node.func)
        method = self.methods.get(name) if name else None
        if method is None or name in self._followed:
            return None
        self._followed.add(name)  # type: ignore[arg-type]
        return method

    def from_helper(self, method: ast.FunctionDef, depth: int) -> list[Element]:
        """Elements a factory helper returns (`return nn.ModuleList(...)` / `return Block(...)`)."""
        out: list[Element] = []
        sub = ElementCollector(method, self.methods)
        sub._followed = self._followed
        for node in walk_local(method):
            if isinstance(node, ast.Return) and node.value is not None:
                value = node.value
                if is_module_list_call(value):
                    assert isinstance(value, ast.Call)
                    out += sub.from_expr(value.args[0], depth + 1) if value.args else []
                else:
                    out += sub.from_element(value)
        self.count_expr = self.count_expr or sub.count_expr
        if sub.built_by != "unknown":
            self.built_by = sub.built_by
        return out

    def from_expr(self, expr: ast.AST | None, depth: int = 0) -> list[Element]:
        if expr is None or depth > 4:
            return []
        if isinstance(expr, ast.ListComp | ast.GeneratorExp):
            self.built_by = "comprehension"
            self.count_expr = self.count_expr or count_of(expr.generators)
            return self.from_element(expr.elt)
        if isinstance(expr, ast.List | ast.Tuple):
            self.built_by = "literal"
            out: list[Element] = []
            for elt in expr.elts:
                if isinstance(elt, ast.Starred):
                    out += self.from_expr(elt.value, depth + 1)
                else:
                    out += self.from_element(elt)
            if self.count_expr is None:
                self.count_expr = str(len(expr.elts))
            return out
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            return self.from_expr(expr.left, depth + 1) + self.from_expr(expr.right, depth + 1)
        if isinstance(expr, ast.Name):
            return self.from_local(expr.id, depth)
        if isinstance(expr, ast.Call) and callee_name(expr) == "list" and expr.args:
            return self.from_expr(expr.args[0], depth + 1)
        return []

    def from_element(self, elt: ast.AST) -> list[Element]:
        if isinstance(elt, ast.IfExp):
            self.built_by = "conditional"
            return self.from_element(elt.body) + self.from_element(elt.orelse)
        if isinstance(elt, ast.Call):
            method = self.helper(elt)
            if method is not None:  # `self._make_block(i)`
                return self.from_helper(method, 0)
            inner = [call_name(a) for a in elt.args if isinstance(a, ast.Call)]
            classes = self.class_alias(elt)
            if classes:  # `block_cls = A if flag else B` ... `block_cls(...)`
                return [Element(name, elt.lineno, inner) for name in classes]
            return [Element(call_name(elt), elt.lineno, inner)]
        if isinstance(elt, ast.Name):
            return self.from_local(elt.id, 0)
        return []

    def class_alias(self, call: ast.Call) -> list[str]:
        """The classes a local name called as a constructor stands for: the last assignment of
        the name above the call in the same method, a class (`cls = EmberBlock`) or a
        conditional of classes (`A if sandwich_norm else B`: both, as a conditional element)."""
        if not isinstance(call.func, ast.Name):
            return []
        name = call.func.id
        value = None
        for node in walk_local(self.func):
            if (
                isinstance(node, ast.Assign)
                and node.lineno < call.lineno
                and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            ):
                value = node.value
        options = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
        if value is None or not all(isinstance(o, ast.Name | ast.Attribute) for o in options):
            return []
        if len(options) > 1:
            self.built_by = "conditional"
        return [ast.unparse(o) for o in options]

    def from_local(self, name: str, depth: int) -> list[Element]:
        """`blocks = [...]` / `blocks.append(Block(...))` inside the same method."""
        out: list[Element] = []
        for node in walk_local(self.func):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                out += self.from_expr(node.value, depth + 1)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                if isinstance(owner, ast.Name) and owner.id == name and node.args:
                    if node.func.attr == "append":
                        self.built_by = "append"
                        out += self.from_element(node.args[0])
                    elif node.func.attr == "extend":
                        out += self.from_expr(node.args[0], depth + 1)
            elif isinstance(node, ast.For):
                for inner in walk(node):
                    if (
                        isinstance(inner, ast.Call)
                        and isinstance(inner.func, ast.Attribute)
                        and inner.func.attr in ("append", "extend")
                        and isinstance(inner.func.value, ast.Name | ast.Attribute)
                        and ast.unparse(inner.func.value) == name
                    ):
                        self.count_expr = self.count_expr or count_of(
                            [ast.comprehension(target=node.target, iter=node.iter, ifs=[])]
                        )
                        break
        return out
