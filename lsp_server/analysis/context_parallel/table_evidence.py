"""Whether a value forward hands the blocks is a position table, read from how it is built and
how the blocks use it, never from the name the blocks give it (`table`, `angles`, `pe_cache`).

Built: forward gets it (directly, or packed and converted: `rope = (cos, sin)`, `cos.float()`)
from a function or method it hands a length read on the stream the blocks receive, which builds
positions from that length (`called_positions`). Used: the blocks' attention multiplies the
queries by it with its sequence axis read (`position_uses`). Either way it holds one row per
token, so a split at the first block must split it where the blocks receive it; where its axis
is then not read, context parallelism is refused, never split on a guess. Names stay what they
were, a reason to look at a value (and refuse it when neither its build nor its use is read)."""

from __future__ import annotations

import ast

from ..parallel_input import ParallelBlockList, ParallelContext
from .block_binding import block_params, name_of
from .called_positions import length_tables
from .flow import ForwardFlow
from .key_masks import is_key_mask
from .position_uses import used_axes
from .root_split import reaches


def table_evidence(
    ctx: ParallelContext,
    flow: ForwardFlow,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    param: str,
    var: str,
) -> str | None:
    """Why `var`, handed to the blocks of `block` as `param`, is a position table (built from
    the stream's length by a call, or used as one by the blocks' attention); None when neither
    is read."""
    stream = stream_of(ctx, block, bound)
    if stream is None or var == stream or is_key_mask(ctx, param) or is_key_mask(ctx, var):
        return None
    for table in length_tables(ctx, flow, _stream_names(flow, stream)):
        if var in reaches(flow, set(table.targets)):
            return f"from `{table.call}`, handed the length of `{table.stream}`: {table.how}"
    used = used_axes(ctx, block, param)
    if used is not None and used.query_ranks and min(used.query_ranks) >= 4:
        # every use meets queries split into heads (`(B, H, S, D)`, `(B, S, H, D)`), as a
        # position table does inside attention; not the block's `(B, S, C)` stream, which a
        # per-token mask or modulation multiplies as well
        return "the blocks' attention multiplies its queries by it"
    return None


def stream_of(
    ctx: ParallelContext, block: ParallelBlockList, bound: dict[str, ast.expr]
) -> str | None:
    """The forward variable the blocks of `block` receive as their first parameter."""
    params = block_params(ctx, block)
    return name_of(bound.get(params[0])) if params else None


def _stream_names(flow: ForwardFlow, stream: str) -> set[str]:
    """The stream, the inputs it is made from and the locals forward computes from those (the
    names whose lengths are the stream's)."""
    sources = flow.derived.get(stream, {stream}) | {stream}
    return {v for v, srcs in flow.derived.items() if srcs & sources} | sources
