"""Joins along the token axis, between the cached loops, of a split stream with a value that was
not split: `h = torch.cat([ctx, x], dim=1)` after `x` ran its own list split at the first block
while `ctx` ran another list whole. Every rank would join the whole `ctx` to its slice of `x`:
the attention after it sees `ctx` once per rank, and the gathered sequence holds one `ctx` per
rank (a wrong result, or a wrong length). No hook plan places the split on the join itself, so
context parallelism is refused with the statement.
"""

from __future__ import annotations

import ast

from ..astutil import callee_name, int_literal
from ..model import Evidence
from ..parallel_input import ParallelContext
from .flow import ForwardFlow, data_names
from .forward_statements import assigned_names, short_stmt

_JOINS = ("cat", "concat", "concatenate")


def whole_joins(ctx: ParallelContext, flow: ForwardFlow, split: set[str | None]) -> list[Evidence]:
    """`split`: the forward variables split (at the root or where the first block receives them).
    Follows them through forward's assignments; a token-axis join inside the loops' span of a
    value made from them with one that is not refuses."""
    local = {v for v in split if v}
    local |= {source for v in set(local) for source in flow.derived.get(v, ())}  # a root split
    for stmt in flow.statements:
        if not isinstance(stmt, ast.Assign):
            continue
        inside = flow.first_loop_line <= stmt.lineno <= flow.last_loop_end
        join = _token_join(stmt.value) if inside else None
        if join is not None:
            whole = [p for p in join if not data_names(p) & local]
            if whole and len(whole) < len(join):
                return [_refusal(ctx, stmt, whole[0])]
        targets = set(assigned_names(stmt))
        if data_names(stmt.value) & local:
            local |= targets
        else:
            local -= targets
    return []


def _token_join(value: ast.expr) -> list[ast.expr] | None:
    """The parts of `torch.cat([a, b], dim=1)` (or `-2`), the value itself or its first call."""
    if not (isinstance(value, ast.Call) and callee_name(value) in _JOINS and value.args):
        return None
    parts = value.args[0]
    if not isinstance(parts, ast.List | ast.Tuple) or len(parts.elts) < 2:
        return None
    dim = value.args[1] if len(value.args) > 1 else None
    dim = next((k.value for k in value.keywords if k.arg in ("dim", "axis")), dim)
    if int_literal(dim) not in (1, -2):
        return None
    return list(parts.elts)


def _refusal(ctx: ParallelContext, stmt: ast.Assign, whole: ast.expr) -> Evidence:
    return Evidence(
        f"`{short_stmt(stmt)}` (line {stmt.lineno}) joins a split token stream with "
        f"`{ast.unparse(whole)}`, which is not split there: every rank would join all of it to "
        "its own slice, and attention would see it once per rank; context parallelism is not "
        "generated",
        ctx.path,
        stmt.lineno,
    )
