"""What in `forward` would go wrong under a root split although the inputs are token sequences:
the stream assembled by writing rows at sequence-wide indices, a table cut to a length read from
the stream or built by a call handed that length (position drift), a reduction over the tokens
before the blocks."""

from __future__ import annotations

import ast

from ..astutil import names_read, self_attr, walk
from ..model import Evidence
from ..parallel_input import ParallelContext
from .block_binding import block_params, bound_args, name_of, names_passed_to_blocks
from .called_positions import length_tables
from .flow import ForwardFlow, before_the_blocks, data_names
from .forward_statements import assigned_names, short_stmt
from .position_uses import used_axes
from .token_reductions import reduction_in

_ROW_SCATTERS = (
    "index_copy",
    "index_copy_",
    "index_add",
    "index_add_",
    "index_put",
    "index_put_",
    "scatter",
    "scatter_",
    "scatter_add",
    "scatter_add_",
    "masked_scatter",
    "masked_scatter_",
)


def scattered_rows(ctx: ParallelContext, flow: ForwardFlow, streams: set[str]) -> list[Evidence]:
    """The token stream is assembled inside forward by writing rows at sequence-wide indices
    (`buf.index_copy(1, video_indices, video)`, `buf[:, idx] = x`, `scatter`): a root split
    would cut the rows each input brings, not the indices that place them, nor the buffer."""
    for stmt in before_the_blocks(flow):
        if not isinstance(stmt, ast.Assign | ast.Expr):
            continue
        targets = set(assigned_names(stmt)) if isinstance(stmt, ast.Assign) else set()
        scatter = next(
            (
                n
                for n in walk(stmt.value)
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in _ROW_SCATTERS
                and (targets & streams or data_names(n.func.value) & streams)
            ),
            None,
        )
        written = _indexed_write(stmt, streams)
        if scatter is None and written is None:
            continue
        how = f"`{short_stmt(stmt)}`"
        return [
            Evidence(
                f"{how} writes rows of the token stream at sequence-wide indices: a root split "
                "would cut the rows, not the indices that place them (split at the first block)",
                ctx.path,
                stmt.lineno,
            )
        ]
    return []


_ROW_PICKS = ("index_select", "gather", "take_along_dim")


def picked_rows(ctx: ParallelContext, flow: ForwardFlow, streams: set[str]) -> list[Evidence]:
    """Rows of the token stream picked at indices before the blocks, handed to a torch function
    (`torch.take_along_dim(x, order, dim=1)`, `torch.gather(x, 1, idx)`) or by a tensor
    subscript (`x[:, idx]`): the indices number the whole sequence's tokens (a model's fixed
    order), which a root split would apply to this rank's slice. (Methods, `x.gather(...)`,
    already block it as sequence-global work.)"""
    for stmt in before_the_blocks(flow):
        if not isinstance(stmt, ast.Assign):
            continue
        for node in walk(stmt.value):
            picked = (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _ROW_PICKS
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch"
                and bool(node.args)
                and bool(data_names(node.args[0]) & streams)
            ) or _indexed_read(node, streams)
            if picked:
                return [
                    Evidence(
                        f"`{short_stmt(stmt)}` picks rows of the token stream at indices of "
                        "the whole sequence: a root split would apply them to this rank's "
                        "slice (split at the first block)",
                        ctx.path,
                        stmt.lineno,
                    )
                ]
    return []


def _indexed_read(node: ast.AST, streams: set[str]) -> bool:
    """`x[:, idx]`: a stream subscripted on its token axis by a name (a tensor of indices)."""
    if not (
        isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Load)
        and isinstance(node.value, ast.Name)
        and node.value.id in streams
        and isinstance(node.slice, ast.Tuple)
        and len(node.slice.elts) >= 2
    ):
        return False
    first, token = node.slice.elts[:2]
    return isinstance(first, ast.Slice) and first.lower is None and isinstance(token, ast.Name)


def _indexed_write(stmt: ast.stmt, streams: set[str]) -> str | None:
    """`x[:, idx] = rows` where `idx` is a tensor (a name, not a slice or a number)."""
    if not isinstance(stmt, ast.Assign):
        return None
    for target in stmt.targets:
        if not (
            isinstance(target, ast.Subscript)
            and isinstance(target.value, ast.Name)
            and target.value.id in streams
        ):
            continue
        parts = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
        if any(isinstance(p, ast.Name) for p in parts):
            return target.value.id
    return None


def sliced_tables(ctx: ParallelContext, flow: ForwardFlow, streams: set[str]) -> list[Evidence]:
    """A table of the model cut to a length read from the stream before the blocks
    (`x = self.embed(x) + self.pos_embed[:, : x.shape[1]]`): under a root split the length is
    this rank's and every rank would take the first rows (position drift)."""
    for stmt in before_the_blocks(flow):
        for node in walk(stmt):
            if not (isinstance(node, ast.Subscript) and self_attr(node.value) is not None):
                continue
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            cut = [p.upper for p in parts if isinstance(p, ast.Slice) and p.upper is not None]
            if any(_measures(bound, streams, flow) for bound in cut):
                return [
                    Evidence(
                        f"`{short_stmt(stmt)}` cuts `self.{self_attr(node.value)}` to a length "
                        "read from the token stream: under a root split every rank would take "
                        "the first rows (position drift)",
                        ctx.path,
                        stmt.lineno,
                    )
                ]
    return []


def tables_from_called_lengths(
    ctx: ParallelContext, flow: ForwardFlow, streams: set[str]
) -> list[Evidence]:
    """A table forward gets from a function or method it hands a length read on the stream
    (`cos, sin = make_angles(x.shape[1], d)`, `self._angles(n)`), which builds positions from
    that length (`called_positions`), and which reaches the blocks or the stream: under a root
    split the length is this rank's and every rank would count its tokens from 0."""
    receivers = names_passed_to_blocks(list(ctx.cached_lists)) | streams
    for table in length_tables(ctx, flow, streams):
        if not reached_before_the_blocks(flow, set(table.targets)) & receivers:
            continue
        return [
            Evidence(
                f"`{table.call}` is handed the length of `{table.stream}` and {table.how}: "
                "under a root split every rank would count its own tokens from 0 (position "
                "drift)",
                ctx.path,
                table.line,
            )
        ]
    return []


def reached_before_the_blocks(flow: ForwardFlow, names: set[str]) -> set[str]:
    """`names` and every local forward computes from them before the first block loop."""
    reached = set(names)
    for stmt in before_the_blocks(flow):
        if isinstance(stmt, ast.Assign | ast.AugAssign) and data_names(stmt.value) & reached:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            reached |= {n.id for t in targets for n in walk(t) if isinstance(n, ast.Name)}
    return reached


def pooled_before_the_blocks(
    ctx: ParallelContext, flow: ForwardFlow, streams: set[str]
) -> list[Evidence]:
    """A reduction over the tokens before the blocks (`c = c + x.mean(dim=1)`): under a root split
    each rank would pool its own tokens."""
    for stmt in before_the_blocks(flow):
        if not isinstance(stmt, ast.Assign | ast.AugAssign):
            continue
        hit = reduction_in(stmt.value, {s for s in streams if s})
        if hit is not None:
            return [
                Evidence(
                    f"`{short_stmt(stmt)}` reduces over the tokens before the blocks: under a "
                    "root split each rank would pool its own tokens",
                    ctx.path,
                    stmt.lineno,
                )
            ]
    return []


def _measures(expr: ast.expr, streams: set[str], flow: ForwardFlow) -> bool:
    """`x.shape[1]`, `x.size(1)`, `len(x)` of a stream, or a local measured from one."""
    for node in walk(expr):
        measured: ast.expr | None = None
        if isinstance(node, ast.Name) and flow.shape_derived.get(node.id, set()) & streams:
            return True
        if isinstance(node, ast.Attribute) and node.attr == "shape":
            measured = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            measured = node.func.value if node.func.attr == "size" else None
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            measured = node.args[0] if node.func.id == "len" else None
        if measured is not None and names_read(measured) & streams:
            return True
    return False


def caller_tables(ctx: ParallelContext, flow: ForwardFlow, streams: set[str]) -> list[Evidence]:
    """Forward parameters the blocks receive as position tables (read where their attention
    multiplies head-split queries by them, whatever their name): the caller built them for the
    whole sequence, so under a root split every rank would pair its own tokens with the first
    rows. Blocking the root split splits them where the blocks receive them."""
    out: list[Evidence] = []
    for block in ctx.cached_lists[:1]:
        params = block_params(ctx, block)
        if block.call is None or not params:
            continue
        for param, arg in bound_args(block.call, params).items():
            name = name_of(arg)
            if name is None or name not in flow.params or name in streams or param == params[0]:
                continue
            used = used_axes(ctx, block, param)
            if used is None or not used.query_ranks or min(used.query_ranks) < 4:
                continue
            out.append(
                Evidence(
                    f"`{name}` is a position table the caller passes (its axis {used.how}): "
                    "under a root split every rank would pair its own tokens with the table's "
                    "first rows; it is split where the blocks receive it",
                    ctx.path,
                    block.call.lineno,
                )
            )
    return out
