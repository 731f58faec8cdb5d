"""The root split (`""`): what it splits when forward receives token sequences, and why it would be
wrong (patchified latents, positions or masks from local lengths)."""

from __future__ import annotations

import ast

from ..astutil import (
    last_part,
    names_read,
    self_attr,
    walk,
)
from ..model import Evidence
from ..parallel_input import ParallelContext
from .block_binding import names_passed_to_blocks
from .embedding_methods import method_embedding
from .flow import ForwardFlow, ModuleCall, before_the_blocks, data_names, is_sequence_global
from .forward_statements import POSITION_WORDS, assigned_names, module_on, short_stmt
from .key_masks import is_key_mask
from .listed_inputs import iterated_streams
from .mask_planning import masks_marked_by_position
from .modules import measures_length_of
from .picked_position_ids import picked_position_ids
from .result import HookPlan, SplitInput
from .root_split_drift import (
    caller_tables,
    picked_rows,
    pooled_before_the_blocks,
    scattered_rows,
    sliced_tables,
    tables_from_called_lengths,
)
from .token_expansions import token_expansion
from .token_tables import inline_table
from .whole_tables import whole_tables

_TOKEN_LOCAL_MODULES = ("Linear", "LayerNorm", "RMSNorm", "GroupNorm", "Identity", "Dropout")


def reworked_positions(flow: ForwardFlow, calls: list[ModuleCall]) -> set[str]:
    out: set[str] = set()
    for call in calls:
        for target in call.targets:
            if target in flow.params:
                out.add(target)
                continue
            for stmt in flow.statements:
                if (
                    call.line < stmt.lineno < flow.first_loop_line
                    and isinstance(stmt, ast.Assign)
                    and target in assigned_names(stmt)
                    and is_sequence_global(stmt.value, {target})
                ):
                    out.add(target)
    return out


def _token_rank(flow: ForwardFlow, name: str) -> int:
    """3 for a token sequence (B, S, C); 2 when forward gives the parameter a feature axis
    before mixing it with the stream (`(ids == k).unsqueeze(-1)`, `mask[..., None]`)."""
    for stmt in before_the_blocks(flow):
        for node in walk(stmt):
            target = None
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "unsqueeze"
                and node.args
                and isinstance(node.args[0], ast.UnaryOp)
                and isinstance(node.args[0].op, ast.USub)
            ):
                target = node.func.value
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.slice, ast.Tuple)
                and node.slice.elts
                and isinstance(node.slice.elts[-1], ast.Constant)
                and node.slice.elts[-1].value is None
            ):
                target = node.value
            if target is not None and name in data_names(target):
                return 2
    return 3


def reaches(flow: ForwardFlow, names: set[str]) -> set[str]:
    """`names` and the variables forward builds from them before the first block loop by tensor
    methods and packing alone (`cos = cos.to(dtype)`, `rope = (cos, sin)`), not through a
    module or function call."""
    reached = set(names)
    for stmt in before_the_blocks(flow):
        if isinstance(stmt, ast.Assign) and data_names(stmt.value) & reached:
            calls = [n for n in walk(stmt.value) if isinstance(n, ast.Call)]
            if any(not isinstance(c.func, ast.Attribute) or self_attr(c.func) for c in calls):
                continue  # a module's or a function's output: something else
            reached |= set(assigned_names(stmt))
    return reached


def is_position(call: ModuleCall) -> bool:
    """A positional-embedding module: named so, or producing a variable named so."""
    words = [call.attr, *call.targets]
    return any(w in name.lower() for name in words for w in POSITION_WORDS)


def _local_views(ctx: ParallelContext, flow: ForwardFlow, streams: set[str]) -> list[Evidence]:
    """What forward computes from the stream's length or rows, or hands the blocks whole, that a
    root split would compute from (or pair with) this rank's tokens alone."""
    return [
        *sliced_tables(ctx, flow, streams),
        *whole_tables(ctx, flow, streams),
        *picked_rows(ctx, flow, streams),
        *pooled_before_the_blocks(ctx, flow, streams),
        *masks_marked_by_position(ctx, flow, streams),
        *_tables_from_lengths(ctx, flow, streams),
        *caller_tables(ctx, flow, streams),
        *_expanded_per_token(ctx, flow, streams),
    ]


def feeds_stream(call: ModuleCall, stream_vars: list[str | None], flow: ForwardFlow) -> bool:
    """Whether a module call is an embedder of a stream (its output becomes a stream variable)."""
    return any(v in call.targets for v in stream_vars if v)


def root_split_blockers(
    ctx: ParallelContext,
    flow: ForwardFlow,
    stream_vars: list[str | None],
    encoder_var: str | None,
    position_calls: list[ModuleCall],
) -> list[Evidence]:
    """Why a root split would be wrong: patchified latents or positions from local lengths."""
    path = ctx.path
    hidden = flow.hidden
    out: list[Evidence] = []
    chain = {v for v, srcs in flow.derived.items() if hidden in srcs}
    stream_sources = {hidden}
    if encoder_var:
        stream_sources |= flow.derived.get(encoder_var, set())
    for stmt in before_the_blocks(flow):
        if not isinstance(stmt, ast.Assign) or not set(assigned_names(stmt)) & chain:
            continue
        used = data_names(stmt.value) & chain
        if not used or any(w in t.lower() for t in assigned_names(stmt) for w in POSITION_WORDS):
            continue  # position embeddings read the latent's shape; they are not the tokens
        op = is_sequence_global(stmt.value, used)
        if op and op not in ("cat", "concat", "stack", "split", "chunk", "slice"):
            out.append(
                Evidence(
                    f"`{short_stmt(stmt)}` turns the latent into tokens inside forward "
                    "(a root split would cut the latent, not the token sequence)",
                    path,
                    stmt.lineno,
                )
            )
            break
        module = module_on(stmt.value, used, flow)
        ctor = flow.constructors.get(module or "")
        if ctor and not last_part(ctor).endswith(_TOKEN_LOCAL_MODULES):
            out.append(
                Evidence(
                    f"`self.{module}` ({last_part(ctor)}) embeds the latent into "
                    "tokens inside forward",
                    path,
                    stmt.lineno,
                )
            )
            break
        embedded = method_embedding(ctx, flow, stmt, used)
        if embedded is not None:
            out.append(embedded)
            break
    if not out:
        out += _not_a_token_tensor(ctx, flow, stream_vars, chain | {hidden})
    out += _local_views(ctx, flow, chain | {hidden})
    for call in position_calls:
        streamed = measures_length_of(ctx, call, {n for n in chain | {hidden} if n})
        if streamed:
            out.append(
                Evidence(
                    f"`self.{call.attr}(...)` measures the length of the token stream "
                    f"`{streamed}` it takes: under a root split it would see this rank's tokens "
                    "and count positions from 0 (position drift)",
                    path,
                    call.line,
                )
            )
            continue
        for name in sorted(call.arg_names()):
            for src in sorted(flow.shape_derived.get(name, set())):
                if flow.derived.get(src, {src}) & stream_sources:
                    out.append(
                        Evidence(
                            f"`self.{call.attr}(...)` takes `{name}`, a length read "
                            f"from `{src}`: under a root split it would be the local "
                            "length (position drift)",
                            path,
                            call.line,
                        )
                    )
                    break
    return out


def _not_a_token_tensor(
    ctx: ParallelContext, flow: ForwardFlow, stream_vars: list[str | None], streams: set[str]
) -> list[Evidence]:
    """The first reason the stream input is not one token tensor a root split could cut: a
    latent grid, a list walked sample by sample, rows scattered at sequence-wide indices."""
    return (
        _grid_input(ctx, flow, streams)
        or iterated_streams(ctx, flow, streams)
        or scattered_rows(ctx, flow, {v for v in stream_vars if v} | streams)
    )


def _grid_input(ctx: ParallelContext, flow: ForwardFlow, streams: set[str]) -> list[Evidence]:
    """A latent grid, not a token sequence: forward unpacks more than three sizes from its shape
    (`b, f, h, w, c = x.shape`) or flattens its axis 1 into later ones (`x.flatten(1, 3)`). A
    root split would cut the grid's first axis (frames), not the tokens."""
    for stmt in before_the_blocks(flow):
        unpacked = _shape_unpack(stmt, streams)
        if unpacked is not None and unpacked > 3:
            why = f"unpacks {unpacked} sizes from its shape"
        elif _flattens_axis_one(stmt, streams):
            why = "flattens its axis 1 with later axes into tokens"
        else:
            continue
        return [
            Evidence(
                f"`{short_stmt(stmt)}`: forward {why}, so the input is a latent grid, not a "
                "token sequence (a root split would cut the grid's first axis)",
                ctx.path,
                stmt.lineno,
            )
        ]
    return []


def _shape_unpack(stmt: ast.stmt, streams: set[str]) -> int | None:
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return None
    target, value = stmt.targets[0], stmt.value
    if (
        isinstance(target, ast.Tuple)
        and not any(isinstance(e, ast.Starred) for e in target.elts)
        and isinstance(value, ast.Attribute)
        and value.attr == "shape"
        and isinstance(value.value, ast.Name)
        and value.value.id in streams
    ):
        return len(target.elts)
    return None


def _flattens_axis_one(stmt: ast.stmt, streams: set[str]) -> bool:
    for node in walk(stmt):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "flatten"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in streams
        ):
            continue
        start = node.args[0] if node.args else None
        end = node.args[1] if len(node.args) > 1 else None
        if (
            isinstance(start, ast.Constant)
            and start.value == 1
            and (end is None or (isinstance(end, ast.Constant) and end.value != 1))
        ):
            return True
    return False


def _expanded_per_token(
    ctx: ParallelContext, flow: ForwardFlow, streams: set[str]
) -> list[Evidence]:
    """A value forward expands to one row per token from a count read on the stream and hands to
    the blocks (`c.repeat_interleave(h * w, dim=1)`): under a root split the coarse value (one
    row per frame) is whole while the count is this rank's."""
    for name in sorted(names_passed_to_blocks(list(ctx.cached_lists))):
        expansion = token_expansion(flow, name, streams)
        if expansion is not None:
            return [
                Evidence(
                    f"`{name}` is expanded to one row per token ({expansion.how}) and reaches "
                    "the blocks: a root split would expand whole rows by this rank's count",
                    ctx.path,
                    expansion.line,
                )
            ]
    return []


def _tables_from_lengths(
    ctx: ParallelContext, flow: ForwardFlow, streams: set[str]
) -> list[Evidence]:
    """A per-token table forward builds inline from a length it reads on the stream and hands to
    the blocks (`torch.arange(x.shape[1])`, then angles), or gets from a function or method it
    hands that length (`tables_from_called_lengths`): under a root split the length would be
    this rank's and every rank would count positions from 0."""
    if ctx.forward is None:
        return []
    for name in sorted(names_passed_to_blocks(list(ctx.cached_lists))):
        measured = flow.shape_derived.get(name, set()) & streams
        if measured and not is_key_mask(ctx, name) and inline_table(ctx, name):
            return [
                Evidence(
                    f"`{name}` is built from the length of `{sorted(measured)[0]}` and reaches "
                    "the blocks: under a root split it would count this rank's tokens from 0 "
                    "(position drift)",
                    ctx.path,
                    flow.first_loop_line,
                )
            ]
    return tables_from_called_lengths(ctx, flow, streams)


def root_plan(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    evidence: list[Evidence],
    stream_vars: list[str | None],
    encoder_var: str | None,
    position_calls: list[ModuleCall],
) -> tuple[str, list[ModuleCall]]:
    """The root split; returns the approach and the position calls still at full length."""
    path = ctx.path
    line = ctx.forward.lineno if ctx.forward else 1
    roots: list[str] = []
    for var in (*stream_vars, encoder_var):
        for src in sorted(flow.derived.get(var or "", set())):
            if src in flow.params and src not in roots and not is_key_mask(ctx, src):
                roots.append(src)
    # Other token streams the blocks receive (`audio_hidden_states`, `encoder_hidden_states`).
    for name in names_passed_to_blocks(list(ctx.cached_lists)):
        for src in sorted(flow.derived.get(name, set())):
            if src in flow.params and "hidden_states" in src and src not in roots:
                roots.append(src)
    for name in roots:
        rank = _token_rank(flow, name)
        why = "token sequence entering forward" if rank == 3 else "per-token values (B, S)"
        plan.split("", name, SplitInput(1, rank, reason=why, line=line))
    id_params = _position_id_params(flow, position_calls)
    for name, (dim, ndim) in id_params.items():
        plan.split(
            "", name, SplitInput(dim, ndim, reason="position ids of the split tokens", line=line)
        )
    for ids in picked_position_ids(ctx, flow):
        if ids.param not in id_params and ids.param not in roots:
            why = f"one id per token, picking rows of `{ids.function}`'s table (`{ids.pick}`)"
            plan.split("", ids.param, SplitInput(0, 1, reason=why, line=ids.line))
    evidence.append(
        Evidence(
            "root split: forward receives token sequences and computes nothing "
            "from their lengths before the blocks",
            path,
            line,
        )
    )
    unsplit = []
    for call in position_calls:
        sources = set().union(*(flow.derived.get(n, {n}) for n in call.arg_names()))
        if sources & set(id_params):
            continue  # computed from split ids: already consistent
        unsplit.append(call)
    return "root_split", unsplit


def _position_id_params(
    flow: ForwardFlow, position_calls: list[ModuleCall]
) -> dict[str, tuple[int, int]]:
    """Forward parameters that feed a position module (ids): split with the tokens."""
    out: dict[str, tuple[int, int]] = {}
    for call in position_calls:
        for name in call.arg_names():
            for src in sorted(flow.derived.get(name, set())):
                if src in flow.params and src != flow.hidden and src.lower().endswith("ids"):
                    out[src] = _ids_dims(flow, src)
    return out


def _ids_dims(flow: ForwardFlow, name: str) -> tuple[int, int]:
    """(S, C) ids when forward drops a batch dimension (`if ids.ndim == 3: ids = ids[0]`)."""
    for stmt in flow.statements:
        if (
            isinstance(stmt, ast.If)
            and name in names_read(stmt.test)
            and "ndim" in ast.unparse(stmt.test)
        ):
            for sub in stmt.body:
                if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Subscript):
                    return (0, 2)
    return (1, 3)


def per_token_timestep(flow: ForwardFlow) -> tuple[str, int] | None:
    """A timestep parameter that forward also accepts per token (`t.ndim == 2`, `t.shape[1]`)."""
    for stmt in before_the_blocks(flow):
        text = ast.unparse(stmt.test) if isinstance(stmt, ast.If) else ""
        for param in flow.params:
            if "timestep" not in param:
                continue
            if f"{param}.ndim == 2" in text or f"{param}.dim() == 2" in text:
                return param, stmt.lineno
    return None
