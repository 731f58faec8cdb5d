"""The token axis of a mask the caller passes, read from where the code applies it to a token
stream: `x * mask.unsqueeze(-1)`, `x.masked_fill(~mask[..., None], 0)`, `mask[:, :, None] * x`.

A mask given by the caller has no shape forward shows; where forward or a block multiplies it
into a split stream after adding trailing unit axes, its leading axes line up with the stream's
and its token axis is the stream's."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ..astutil import names_read, walk

_CASTS = ("to", "float", "half", "bfloat16", "bool", "type_as", "type", "int", "long")


def mask_axis_from_uses(
    statements: Iterable[ast.stmt], mask: str, streams: dict[str, tuple[int, int]]
) -> tuple[int, int] | None:
    """(token axis, rank) of `mask` from its first application to a stream: `streams` maps a
    stream's name to (token axis, rank). None when no statement applies it that way, or the
    uses disagree."""
    statements = list(statements)
    aliases = {mask: 0}  # `keep = mask.unsqueeze(-1).to(x.dtype)`: keep adds one axis
    for stmt in statements:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            added = _trailing_axes(stmt.value, mask)
            if isinstance(target, ast.Name) and added is not None and target.id != mask:
                aliases[target.id] = added
    found: set[tuple[int, int]] = set()
    for stmt in statements:
        for node in walk(stmt):
            for expr, partner in _applications(node):
                added = next(
                    (
                        extra + more
                        for alias, extra in aliases.items()
                        if (more := _trailing_axes(expr, alias)) is not None
                    ),
                    None,
                )
                if added is None:
                    continue
                for name in names_read(partner) & set(streams):
                    axis, rank = streams[name]
                    if rank - added > axis:
                        found.add((axis, rank - added))
    return found.pop() if len(found) == 1 else None


def _applications(node: ast.AST) -> list[tuple[ast.expr, ast.expr]]:
    """(mask side, stream side) pairs of an elementwise use: `a * b`, `a.masked_fill(b, v)`,
    `torch.where(b, a, v)`."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return [(node.left, node.right), (node.right, node.left)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "masked_fill" and node.args:
            return [(_without_not(node.args[0]), node.func.value)]
        if node.func.attr == "where" and len(node.args) >= 2:
            return [(_without_not(node.args[0]), a) for a in node.args[1:3]]
    return []


def _without_not(expr: ast.expr) -> ast.expr:
    while isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Invert | ast.Not):
        expr = expr.operand
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "logical_not"
        and not expr.args
    ):
        return _without_not(expr.func.value)
    return expr


def _trailing_axes(expr: ast.expr, mask: str) -> int | None:
    """How many trailing unit axes `expr` adds to the bare name `mask` (`.unsqueeze(-1)`,
    `[..., None]`, `[:, :, None, None]`; casts allowed), or None when it is anything else. A
    bare `mask` adds none."""
    added = 0
    while True:
        if isinstance(expr, ast.Name):
            return added if expr.id == mask else None
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            attr = expr.func.attr
            if attr in _CASTS:
                expr = expr.func.value
                continue
            if attr == "unsqueeze" and len(expr.args) == 1 and _is_int(expr.args[0], -1):
                added += 1
                expr = expr.func.value
                continue
            return None
        if isinstance(expr, ast.Subscript):
            parts = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            nones = 0
            for part in reversed(parts):
                if isinstance(part, ast.Constant) and part.value is None:
                    nones += 1
                else:
                    break
            head = parts[: len(parts) - nones]
            plain = all(
                isinstance(p, ast.Slice) and p.lower is p.upper is p.step is None for p in head
            )
            ellipsis = (
                len(head) == 1 and isinstance(head[0], ast.Constant) and (head[0].value is Ellipsis)
            )
            if not nones or not (plain or ellipsis):
                return None
            if plain and len(head) < 1:
                return None
            added += nones
            expr = expr.value
            continue
        return None


def _is_int(expr: ast.expr, value: int) -> bool:
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        return isinstance(expr.operand, ast.Constant) and expr.operand.value == -value
    return isinstance(expr, ast.Constant) and expr.value == value
