"""Joins along the token axis, between the cached loops, of a split stream with a value that was
not split, and regroups of a split stream there (`region_refusals`).

A join: `h = torch.cat([ctx, x], dim=1)` after `x` ran its own list split at the first block
while `ctx` ran another list whole. Every rank would join the whole `ctx` to its slice of `x`:
the attention after it sees `ctx` once per rank, and the gathered sequence holds one `ctx` per
rank (a wrong result, or a wrong length). No hook plan places the split on the join itself, so
context parallelism is refused with the statement.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from ..astutil import callee_name, int_literal, walk_local
from ..model import Evidence
from ..parallel_input import ParallelContext
from .flow import ForwardFlow, data_names
from .forward_statements import assigned_names, short_stmt
from .token_windows import TokenSeen, window_call

_JOINS = ("cat", "concat", "concatenate")


def region_refusals(
    ctx: ParallelContext, flow: ForwardFlow, split: set[str | None]
) -> list[Evidence]:
    """`split`: the forward variables split (at the root or where the first block receives them),
    followed through forward's assignments. Between the split and the gather (`_region`), a
    token-axis join of a value made from them with one that is not (`_whole_join`), or a reshape
    of one that cuts its tokens into groups (`_regroup`: `x = self.merges[i](x.reshape(b, n //
    2, 2 * d))` between the stages of an hourglass, each rank grouping its own slice), refuses."""
    seeds = {v for v in split if v}
    seeds |= {source for v in set(seeds) for source in flow.derived.get(v, ())}  # a root split
    inside = _region(ctx, flow)
    statements = [s for s in flow.statements if isinstance(s, ast.Assign)]
    return _whole_join(ctx, statements, set(seeds), inside) or _regroup(
        ctx, statements, TokenSeen(tracked=set(seeds)), inside
    )


def _whole_join(
    ctx: ParallelContext,
    statements: list[ast.Assign],
    local: set[str],
    inside: Callable[[int], bool],
) -> list[Evidence]:
    for stmt in statements:
        join = _token_join(stmt.value) if inside(stmt.lineno) else None
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


def _regroup(
    ctx: ParallelContext,
    statements: list[ast.Assign],
    seen: TokenSeen,
    inside: Callable[[int], bool],
) -> list[Evidence]:
    for stmt in statements:
        hit = window_call(stmt.value, seen) if inside(stmt.lineno) else None
        if hit is not None:
            return [
                Evidence(
                    f"`{short_stmt(stmt)}` (line {stmt.lineno}) regroups a split token stream "
                    f"between the blocks (`{ast.unparse(hit)}`): each rank would group its own "
                    "slice; context parallelism is not generated",
                    ctx.path,
                    stmt.lineno,
                )
            ]
        seen.bind(stmt, stmt.value, set(assigned_names(stmt)))
    return []


def _region(ctx: ParallelContext, flow: ForwardFlow) -> Callable[[int], bool]:
    """Whether a line of forward runs between the split and the gather: from the first block
    loop to the end of the last, and inside a loop holding a block loop (the loop over the
    stages of nested lists, whose body runs between one stage and the next)."""
    spans = [(flow.first_loop_line, flow.last_loop_end)]
    block_loops = {id(loop) for b in ctx.block_lists for loop in b.loops}
    if ctx.forward is not None:
        spans += [
            (node.lineno, node.end_lineno or node.lineno)
            for node in walk_local(ctx.forward)
            if isinstance(node, ast.For)
            and id(node) not in block_loops
            and any(id(inner) in block_loops for inner in walk_local(node))
        ]
    return lambda line: any(start <= line <= end for start, end in spans)


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
