"""Whether a forward parameter reaches a variable before the blocks, with a tuple assignment
binding each name to its own element.

`x, ctx = self.x_in(tokens), self.c_in(context)` makes `x` of `tokens` only; the forward reading
(`flow.derived`) makes each name of such a statement of everything its right side reads, so the
context was taken for part of the token stream and root-split: the blocks' cross-attention then
read half the context on each rank (0.11 off on 2 gloo ranks). Used as a second opinion on the
root split's inputs: a parameter is split only when both readings say it reaches the stream.
Every other statement is read as making its targets of all it reads (an in-place method call,
`x.add_(c)`, and a subscript store, `x[:, i] = c`, as making the receiver of the value), so this
reading only ever drops what a tuple literal does not bind.
"""

from __future__ import annotations

import ast

from ..astutil import walk
from .flow import ForwardFlow, before_the_blocks, data_names


def source_reaches(flow: ForwardFlow, source: str, target: str) -> bool:
    """Whether `source` (a forward parameter) reaches `target` before the first block loop."""
    made = {source}
    for stmt in before_the_blocks(flow):
        if isinstance(stmt, ast.Assign):
            _assign(stmt, made)
        elif isinstance(stmt, ast.AugAssign | ast.AnnAssign) and stmt.value is not None:
            if data_names(stmt.value) & made:
                made |= _bound(stmt.target)
        elif isinstance(stmt, ast.Expr):
            made |= _updated_in_place(stmt.value, made)
    return target in made


def _assign(stmt: ast.Assign, made: set[str]) -> None:
    for target in stmt.targets:
        value = stmt.value
        if (
            isinstance(target, ast.Tuple | ast.List)
            and isinstance(value, ast.Tuple | ast.List)
            and len(target.elts) == len(value.elts)
            and not any(isinstance(e, ast.Starred) for e in [*target.elts, *value.elts])
        ):
            for part, element in zip(target.elts, value.elts, strict=True):
                _bind(part, element, made)
        else:
            _bind(target, value, made)


def _bind(target: ast.expr, value: ast.expr, made: set[str]) -> None:
    if data_names(value) & made:
        made |= _bound(target)
    else:
        made -= _rebound(target)  # rebound from other values


def _rebound(target: ast.expr) -> set[str]:
    """Names a target rebinds whole (not those it stores into)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Tuple | ast.List):
        return set().union(*(_rebound(e) for e in target.elts))
    return set()


def _bound(target: ast.expr) -> set[str]:
    """Names a target binds; a subscript or attribute store binds the value it stores into."""
    if isinstance(target, ast.Subscript | ast.Attribute | ast.Starred):
        return _bound(target.value)
    return {n.id for n in walk(target) if isinstance(n, ast.Name)}


def _updated_in_place(value: ast.expr, made: set[str]) -> set[str]:
    """Receivers of in-place method calls handed a value made of `made` (`x.add_(c)`)."""
    out: set[str] = set()
    for node in walk(value):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr.endswith("_")
            and any(data_names(a) & made for a in [*node.args, *(k.value for k in node.keywords)])
        ):
            out |= _bound(node.func.value)
    return out
