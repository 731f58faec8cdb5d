"""Lengths forward measures on a stream before the blocks and hands to blocks that cut their tokens
with them: the joint stream of single-stream blocks split into its image and text parts by the
text length (`q[:, :-txt_len]`, `x[:, :img_len]`). Under a plan that splits at the blocks the
length is the whole stream's while each rank holds its own tokens: the cut falls elsewhere (the
runs stopped on shapes at the first call, or cut silently when the lengths fit). Refused."""

from __future__ import annotations

import ast

from ..astutil import names_read, walk
from ..model import Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from .block_binding import block_params, bound_args, name_of
from .flow import ForwardFlow
from .forward_statements import short_stmt


def _cuts_with(func: ast.FunctionDef, param: str) -> ast.Subscript | None:
    """The first subscript in `func` that slices an axis with a bound read from `param`."""
    for node in walk(func):
        if not isinstance(node, ast.Subscript):
            continue
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for part in parts:
            if isinstance(part, ast.Slice) and any(
                bound is not None and param in names_read(bound)
                for bound in (part.lower, part.upper)
            ):
                return node
    return None


def whole_lengths_cutting_tokens(
    ctx: ParallelContext, flow: ForwardFlow, cached: list[ParallelBlockList], split_vars: set[str]
) -> list[Evidence]:
    """Evidence for each list whose blocks get a length of a split stream, measured before the
    blocks, and slice tokens with it."""
    origins = set(split_vars).union(*(flow.derived.get(v, set()) for v in split_vars))
    out: list[Evidence] = []
    for block in cached:
        found = ctx.resolver.find_method(block.block, "forward")
        params = block_params(ctx, block)
        if block.call is None or found is None or not params:
            continue
        for param, expr in bound_args(block.call, params).items():
            size = name_of(expr)
            measured = sorted(flow.shape_derived.get(size or "", set()) & origins)
            cut = _cuts_with(found[0], param) if measured else None
            if cut is not None:
                out.append(
                    Evidence(
                        f"the blocks of `{block.attr}` get `{size}`, a length measured on the "
                        f"whole `{measured[0]}` before the blocks, as `{param}` and cut their "
                        f"tokens with it (`{short_stmt(cut)}`), while the plan gives them this "
                        "rank's tokens; context parallelism is not generated",
                        ctx.path,
                        block.call.lineno,
                    )
                )
                break
    return out
