"""What each name unpacked from one of the transformer's own methods, or from a tuple written
out (`a, b = e1, e2`), is made of.

`x, c = self.embed(tokens, timestep)` binds two names from one call: read as a whole, both come
from `tokens` and `timestep`, and a root split would cut the timestep as if it were tokens. When
every `return` of the method is a tuple of as many values as the statement unpacks, each name is
made of what its element reads, through the method's parameters back to the call's arguments
(the method's own assignments followed in order). Anything else is read as a whole, as before.
"""

from __future__ import annotations

import ast

from ..astutil import declared_params, names_read, self_attr, walk_local
from ..parallel_input import ParallelContext
from .called_functions import bound_arguments, callee, module_caller


def unpacked_arguments(ctx: ParallelContext, stmt: ast.stmt) -> dict[str, list[ast.expr]] | None:
    """For `a, b = self.<method>(...)`: each target name -> the call's arguments its element is
    made of; None when the statement is not such an unpacking or the method's returns do not
    say."""
    literal = _tuple_literal(stmt)
    if literal is not None:
        return literal
    if not (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Tuple)
        and isinstance(stmt.value, ast.Call)
        and self_attr(stmt.value.func) is not None
        and ctx.forward is not None
    ):
        return None
    targets = stmt.targets[0].elts
    if not all(isinstance(t, ast.Name) for t in targets):
        return None
    caller = module_caller(ctx, ctx.transformer, ctx.forward)
    found = callee(ctx, caller, stmt.value) if caller is not None else None
    if found is None:
        return None
    elements = _returned_elements(found.func, len(targets))
    if elements is None:
        return None
    arguments = dict(bound_arguments(stmt.value, found.func))
    out: dict[str, list[ast.expr]] = {}
    for target, params in zip(targets, elements, strict=True):
        assert isinstance(target, ast.Name)
        out[target.id] = [arguments[p] for p in sorted(params) if p in arguments]
    return out


def _tuple_literal(stmt: ast.stmt) -> dict[str, list[ast.expr]] | None:
    """`a, b = e1, e2`: each name is made of its own element."""
    if not (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Tuple)
        and isinstance(stmt.value, ast.Tuple)
        and len(stmt.targets[0].elts) == len(stmt.value.elts)
        and all(isinstance(t, ast.Name) for t in stmt.targets[0].elts)
        and not any(isinstance(e, ast.Starred) for e in stmt.value.elts)
    ):
        return None
    return {
        t.id: [e]
        for t, e in zip(stmt.targets[0].elts, stmt.value.elts, strict=True)
        if isinstance(t, ast.Name)
    }


def _returned_elements(func: ast.FunctionDef, count: int) -> list[set[str]] | None:
    """Per returned element, the parameters of `func` it is made of (union over the returns);
    None when a return is not a tuple of `count` values, or when the method binds values in ways
    this straight-line reading does not follow (loops, `with`, nested functions, calls that
    change a value in place: `out.append(v)`, `x.copy_(y)`), so no source is ever missed."""
    if not _straight_line(func):
        return None
    made: dict[str, set[str]] = {p: {p} for p in declared_params(func)}
    elements: list[set[str]] = [set() for _ in range(count)]
    returns = 0
    for node in sorted(
        (n for n in walk_local(func) if isinstance(n, ast.Assign | ast.AugAssign | ast.Return)),
        key=lambda n: (n.lineno, n.col_offset),
    ):
        if isinstance(node, ast.Return):
            value = node.value
            if not (isinstance(value, ast.Tuple) and len(value.elts) == count):
                return None
            returns += 1
            for i, element in enumerate(value.elts):
                elements[i] |= _sources(element, made)
            continue
        if node.value is None:
            continue
        sources = _sources(node.value, made)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            _bind(target, sources, made, in_place=isinstance(node, ast.AugAssign))
    return elements if returns else None


def _bind(target: ast.expr, sources: set[str], made: dict[str, set[str]], in_place: bool) -> None:
    """A name takes the value's sources; a store into a part of a value (`m[idx] = v`,
    `m.x = v`) and an augmented assignment add them to what it had."""
    if isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            _bind(element, sources, made, in_place)
    elif isinstance(target, ast.Starred):
        _bind(target.value, sources, made, in_place)
    elif isinstance(target, ast.Name):
        if in_place:
            made.setdefault(target.id, set()).update(sources)
        else:
            made[target.id] = set(sources)
    elif isinstance(target, ast.Subscript | ast.Attribute):
        base = target.value
        while isinstance(base, ast.Subscript | ast.Attribute):
            base = base.value
        if isinstance(base, ast.Name):
            index = _sources(target.slice, made) if isinstance(target, ast.Subscript) else set()
            made.setdefault(base.id, set()).update(sources | index)


def _sources(expr: ast.expr, made: dict[str, set[str]]) -> set[str]:
    out: set[str] = set()
    for name in names_read(expr):
        out |= made.get(name, set())
    return out


_MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "add", "put", "push"})


def _straight_line(func: ast.FunctionDef) -> bool:
    for node in walk_local(func):
        if node is func:
            continue
        if isinstance(
            node,
            ast.For
            | ast.AsyncFor
            | ast.While
            | ast.With
            | ast.AsyncWith
            | ast.Try
            | ast.FunctionDef
            | ast.AsyncFunctionDef
            | ast.Lambda
            | ast.NamedExpr
            | ast.Global
            | ast.Nonlocal,
        ):
            return False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr in _MUTATORS or (attr.endswith("_") and not attr.endswith("__")):
                return False
    return True
