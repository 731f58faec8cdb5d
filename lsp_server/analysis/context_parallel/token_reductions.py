"""Reductions over the tokens a block sees (`x.mean(dim=1)`, `F.softmax(x, dim=1)`) that flow
back into its token stream: under a token split each rank would reduce over its own tokens."""

from __future__ import annotations

import ast
from collections.abc import Callable

from ..astutil import (
    call_name,
    int_literal,
    per_node,
    walk,
    walk_local,
)


def names(node: ast.AST) -> set[str]:
    """Every name in `node` (a fresh set: callers grow it)."""
    return set(_names(node))


@per_node
def _names(node: ast.AST) -> frozenset[str]:
    return frozenset(n.id for n in walk(node) if isinstance(n, ast.Name))


_REDUCTIONS = (
    "mean",
    "sum",
    "amax",
    "amin",
    "max",
    "min",
    "std",
    "var",
    "logsumexp",
    "norm",
    "prod",
    "cumsum",
    "softmax",
    "log_softmax",
)
# calls after which a value's axis 1 may no longer be the tokens'
LAYOUT = (
    "reshape",
    "view",
    "transpose",
    "permute",
    "flatten",
    "unflatten",
    "movedim",
    "swapaxes",
    "einsum",
    "rearrange",
    "unbind",
    "cat",
    "stack",
    "index_select",
    "gather",
    "scaled_dot_product_attention",
    "matmul",
    "bmm",
)


# finds more reductions in a value, given the names made from the stream (called functions')
Reductions = Callable[[ast.expr, set[str]], ast.Call | None]


def token_reduction(
    body: list[ast.stmt], stream: str | None, also: Reductions | None = None
) -> ast.Call | None:
    """A reduction over axis 1 (or -2) of the batch-first token stream `stream` or a value made
    from it by token-local work (element-wise math, module calls; no reshape or transpose):
    `x.mean(dim=1)`, `torch.sum(h, 1)`, `F.softmax(x, dim=1)`, whose result flows back into the
    stream (an auxiliary loss returned beside it does not count). The first in source order.
    `also`: where else a value reduces over the tokens (a function it calls)."""
    if stream is None:
        return None
    tracked = {stream}
    reduced: dict[str, ast.Call] = {}  # names holding a token reduction -> the reduction
    statements = sorted(
        (n for stmt in body for n in walk_local(stmt) if isinstance(n, ast.stmt)),
        key=lambda n: (n.lineno, n.col_offset),
    )
    for stmt in statements:
        value = stmt.value if isinstance(stmt, ast.Assign | ast.AugAssign | ast.Return) else None
        if value is None:
            continue
        if isinstance(stmt, ast.Return) and isinstance(value, ast.Tuple) and value.elts:
            value = value.elts[0]  # the stream; the rest (an aux loss) is not the tokens
        hit = reduction_in(value, tracked) or (also(value, tracked) if also else None)
        carried = next((reduced[n] for n in sorted(names(value)) if n in reduced), None)
        hit = hit or carried
        targets = (
            {n.id for t in stmt.targets for n in walk(t) if isinstance(n, ast.Name)}
            if isinstance(stmt, ast.Assign)
            else {stmt.target.id}
            if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name)
            else set()
        )
        if hit is not None and (isinstance(stmt, ast.Return) or targets & tracked):
            return hit  # it reaches the stream
        if hit is not None:
            reduced.update(dict.fromkeys(targets, hit))
        elif names(value) & tracked and not _relayouts(value):
            tracked |= targets
    return None


# ops that pair each token with its neighbours along an axis (`torch.roll(x, 1, dims=1)`, a
# token shift; `x.diff(dim=1)`): the position of that axis among the arguments after the input,
# and its keywords
SHIFTS = {"roll": (1, ("dims",)), "diff": (1, ("dim",))}


def reduction_in(value: ast.expr, tracked: set[str]) -> ast.Call | None:
    """A reduction (or a shift, `SHIFTS`) over axis 1 or -2 of a tracked value in `value`."""
    for node in walk(value):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name = node.func.attr
        if name not in _REDUCTIONS and name not in SHIFTS:
            continue
        at, keywords = SHIFTS.get(name, (0, ("dim", "axis")))
        on_torch = isinstance(node.func.value, ast.Name) and node.func.value.id in ("torch", "F")
        if on_torch:
            operand = node.args[0] if node.args else None
            dim_node = node.args[at + 1] if len(node.args) > at + 1 else None
        else:
            operand = node.func.value
            dim_node = node.args[at] if len(node.args) > at else None
        dim_node = next((k.value for k in node.keywords if k.arg in keywords), dim_node)
        if operand is None or dim_node is None or not plain_of(operand, tracked):
            continue
        dims = dim_node.elts if isinstance(dim_node, ast.Tuple | ast.List) else [dim_node]
        if any(int_literal(d) in (1, -2) for d in dims):
            return node
    return None


def plain_of(operand: ast.expr, tracked: set[str]) -> bool:
    """A tracked name, or token-local work on one (no relayout)."""
    return bool(names(operand) & tracked) and not _relayouts(operand)


def _relayouts(value: ast.expr) -> bool:
    return any(
        isinstance(n, ast.Call) and call_name(n).split(".")[-1] in LAYOUT for n in walk(value)
    ) or any(isinstance(n, ast.Subscript) for n in walk(value))
