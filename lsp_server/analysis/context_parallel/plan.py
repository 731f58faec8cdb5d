"""Choose the context-parallel approach and build the hook plan (cache-dit's vocabulary).

Priority, as cache-dit's integration guide asks: a root split (`""`) when the transformer receives
its sequences as token tensors and nothing before the blocks derives positions from their lengths;
output splits for position-embedding modules that still produce full-length tensors; otherwise a
single split point at the first block (attention's all-to-all keeps the later blocks consistent),
per-block splits for full-length inputs re-passed to every block, and a hybrid (hooks plus one small
method patch) when a position tensor comes from a plain method no hook can reach. Never a rewrite of
`forward`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..astutil import call_name, callee_name, names_read, self_attr, walk
from ..model import Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from .axis_syntax import cat_dim
from .block_binding import (
    block_list_keys,
    block_params,
    bound_args,
    encoder_input,
    is_double_stream,
    names_passed_to_blocks,
    passed_name,
    unread_signature,
    with_expanded_block_calls,
)
from .cut_lengths import whole_lengths_cutting_tokens
from .flow import ForwardFlow, ModuleCall, before_the_blocks
from .forward_statements import POSITION_WORDS, assigned_names
from .gather_placement import (
    gathered_updates,
    place_gathers,
    read_after_loops,
    record_gathers,
    root_record_output,
    split_values_after_gather,
    whole_token_tensors,
)
from .mask_planning import (
    attention_masks_from_lengths,
    mask_reorder_plan,
    split_token_masks,
    whole_token_masks,
)
from .modules import PositionOutputs
from .per_sample_inputs import per_sample_param
from .plan_refusals import (
    lengths_read_in_loop,
    reduced_in_loop,
    regrouped_between_blocks,
    run_order_refusals,
    whole_sizes,
    whole_tokens_in_loop,
)
from .position_splits import per_block_positions, position_splits
from .region_joins import region_refusals
from .result import EACH, LAST, HookPlan, SplitInput
from .root_split import (
    feeds_stream,
    is_position,
    per_token_timestep,
    reaches,
    reworked_positions,
    root_plan,
    root_split_blockers,
)
from .rotary_params import rotary_block_params
from .stage_splits import pre_stages
from .stream_layout import relayout_sequence_first
from .token_mixing import token_choice_refusals
from .token_tables import split_token_tables, tables_in_the_loop_body


@dataclass
class PlanDraft:
    approach: str
    plan: HookPlan
    evidence: list[Evidence]
    patches: list[Evidence]
    split_streams: tuple[str, ...]  # forward variables split as separate token groups
    # Why no plan can be given (a position tensor whose sequence axis is not inferred): the plan
    # is empty and the approach "none"; each becomes a pre-flight warning.
    refusals: list[Evidence] | None = None
    # Per-token masks the plan leaves whole that the blocks skip when they are None and forward
    # may pass as None: the plan stands for that case; each becomes a pre-flight warning.
    cautions: list[Evidence] = field(default_factory=list)


@dataclass(frozen=True)
class _Streams:
    """How the main cached list's blocks receive the token streams."""

    main: ParallelBlockList
    bound: dict[str, ast.expr]  # block parameter -> the expression forward passes
    double: bool  # the blocks return two streams
    stream_params: list[str]
    stream_vars: list[str | None]
    encoder_param: str | None
    encoder_var: str | None


@dataclass(frozen=True)
class _Positions:
    """Position tensors computed before the blocks, and what reads them again."""

    calls: list[ModuleCall]  # position modules whose outputs reach the blocks
    reworked: frozenset[str]  # their outputs forward reworks before the loop (not split there)
    methods: list[tuple[str, int]]  # plain methods computing positions (name, line)
    # what forward reads after the cached loops, and what later cached lists receive
    reread: tuple[frozenset[str], set[str]]


@dataclass
class _Split:
    """What the chosen split point gives: the approach, the streams split as separate token
    groups, the forward variables split, and refusals so far."""

    approach: str
    split_streams: tuple[str, ...]
    split_vars: list[str]
    refusals: list[Evidence]


def build_plan(
    ctx: ParallelContext,
    flow: ForwardFlow,
    cross_attention_cp: bool | None,
    rope_dims: dict[str, PositionOutputs],
) -> PlanDraft:
    """`cross_attention_cp`: whether the block's attention also runs context-parallel for the
    encoder stream (True), only for self-attention (False) or unknown (None). `rope_dims`:
    module attr -> sequence axis and rank of each output of a position-embedding module."""
    cached = list(ctx.cached_lists)
    plan = HookPlan()
    evidence: list[Evidence] = []
    patches: list[Evidence] = []
    if not cached or flow.hidden is None:
        return PlanDraft(
            "none", plan, [Evidence("no cached block list to split", ctx.path, 1)], [], ()
        )
    streams = _read_streams(ctx, flow, cached[0])
    positions = _read_positions(ctx, flow, cached, streams)
    main, bound = streams.main, streams.bound
    root_blockers = root_split_blockers(
        ctx, flow, streams.stream_vars, streams.encoder_var, positions.calls
    )
    if not root_blockers and main.call is not None:
        root_blockers = attention_masks_from_lengths(ctx, flow, main, bound, streams.stream_vars)
    if not root_blockers:
        split = _split_at_root(ctx, flow, plan, evidence, streams, positions, rope_dims)
    else:
        evidence += root_blockers
        split = _split_at_first_block(
            ctx, flow, plan, evidence, patches, streams, positions, rope_dims, cross_attention_cp
        )
    _split_per_token_timestep(flow, plan)
    table_refusals: list[Evidence] = []
    position_refusals: list[Evidence] = []
    if root_blockers:  # under a root split every position forward computes is already local
        at_blocks = _positions_at_blocks(
            ctx, flow, plan, evidence, streams, positions, rope_dims, position_refusals
        )
        patches += _method_patches(ctx, flow, positions.methods, at_blocks)
        if split.approach == "hybrid" and not patches:  # every method's result split at blocks
            split.approach = "single_point"
        sources = {s for v in split.split_vars for s in flow.derived.get(v, {v})}
        found, table_refusals = split_token_tables(
            ctx, flow, main, bound, plan, set(split.split_vars) | sources
        )
        table_refusals += tables_in_the_loop_body(ctx, main, set(split.split_vars) | sources)
        evidence += found
    place_gathers(ctx, flow, plan, evidence, cached, local_lengths=not root_blockers)
    refusals = split.refusals + table_refusals + position_refusals
    refusals += gathered_updates(plan, cached, ctx.path)
    refusals += record_gathers(ctx, plan, cached) + root_record_output(ctx, plan)
    refusals += split_values_after_gather(ctx, flow, plan, cached)
    if root_blockers and main.call is not None:
        refusals += whole_sizes(ctx, flow, plan, main, bound, split.split_vars)
    if root_blockers:
        refusals += whole_lengths_cutting_tokens(ctx, flow, cached, set(split.split_vars))
    refusals += relayout_sequence_first(
        flow, plan, main, bound, streams.stream_params, ctx.path, evidence
    )
    refusals += regrouped_between_blocks(ctx, main)
    refusals += region_refusals(ctx, flow, {*streams.stream_vars, *split.split_streams})
    refusals += run_order_refusals(ctx, cached)
    choices, cautions_before = token_choice_refusals(ctx, cached)  # every list runs split
    refusals += choices
    refusals += lengths_read_in_loop(ctx, main)
    refusals += reduced_in_loop(ctx, main)
    if root_blockers:
        stream = streams.stream_vars[0] if streams.stream_vars else None
        refusals += whole_tokens_in_loop(ctx, main, whole_token_tensors(flow, stream))
    cautions: list[Evidence] = list(cautions_before)
    if main.call is not None:
        evidence += split_token_masks(ctx, flow, plan, main, bound, split.split_vars)
        for kind, why in whole_token_masks(ctx, flow, plan, main, bound, split.split_vars):
            {"split": evidence, "caution": cautions, "refuse": refusals}[kind].append(why)
    if refusals:
        return PlanDraft("none", HookPlan(), evidence + refusals, patches, (), refusals)
    return PlanDraft(
        split.approach, plan, evidence, patches, split.split_streams, cautions=cautions
    )


def _positions_at_blocks(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    evidence: list[Evidence],
    streams: _Streams,
    positions: _Positions,
    rope_dims: dict[str, PositionOutputs],
    refusals: list[Evidence],
) -> set[str]:
    """Under a split at the first block: position tensors split where the blocks receive them
    (`per_block_positions`); a stream joined into the main one (`x = cat([ctx, x], 1)`) is part
    of it, not another stream."""
    split_outputs = {t for c in positions.calls for t in c.targets}
    others = tuple(v for v in (*streams.stream_vars[1:], streams.encoder_var) if v)
    stream = streams.stream_vars[0] if streams.stream_vars else None
    main_sources = flow.derived.get(stream or "", set())
    other_streams = tuple(v for v in others if v not in main_sources)
    return per_block_positions(
        ctx,
        flow,
        streams.main,
        streams.bound,
        plan,
        evidence,
        split_outputs,
        other_streams=other_streams,
        reworked=positions.reworked,
        refusals=refusals,
        joins=len(other_streams) < len(others) or (not others and _joined_stream(flow, stream)),
        modules=rope_dims,
    )


def _joined_stream(flow: ForwardFlow, stream: str | None) -> bool:
    """Forward builds the stream by joining token sequences (`x = torch.cat([ctx, x], dim=1)`):
    a table joined along its rows the same way pairs row i with token i."""
    return stream is not None and any(
        isinstance(stmt, ast.Assign)
        and stream in assigned_names(stmt)
        and isinstance(stmt.value, ast.Call)
        and callee_name(stmt.value) in ("cat", "concat")
        and cat_dim(stmt.value) in (1, -2)
        for stmt in before_the_blocks(flow)
    )


def _method_patches(
    ctx: ParallelContext, flow: ForwardFlow, methods: list[tuple[str, int]], at_blocks: set[str]
) -> list[Evidence]:
    """Plain methods computing positions whose results are not all split where the blocks
    receive them: only a patch of the method (this rank's slice) would make them local."""
    out = []
    for name, line in methods:
        targets = _assigned_from_method(flow, name)
        if targets and targets <= at_blocks:
            continue
        out.append(
            Evidence(
                f"`self.{name}(...)` computes positions in a plain method that "
                "no hook can reach: patch it to return this rank's slice "
                "(offsets from gathered local lengths, not chunk)",
                ctx.path,
                line,
            )
        )
    return out


def _assigned_from_method(flow: ForwardFlow, name: str) -> set[str]:
    """The names forward assigns from `self.<name>(...)` (directly, or unpacked)."""
    out: set[str] = set()
    for stmt in flow.statements:
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Call)
            and self_attr(stmt.value.func) == name
        ):
            for target in stmt.targets:
                out |= {n.id for n in walk(target) if isinstance(n, ast.Name)}
    return out


def _per_sample_second(ctx: ParallelContext, main: ParallelBlockList, params: list[str]) -> bool:
    """The second value the loop unpacks is a per-sample conditioning the block broadcasts over
    its tokens and hands back (`x, c = blk(x, c)`), not a second token stream."""
    found = ctx.resolver.find_method(main.block, "forward")
    return found is not None and len(params) > 1 and per_sample_param(found[0], params[1])


def _read_streams(ctx: ParallelContext, flow: ForwardFlow, main: ParallelBlockList) -> _Streams:
    """The block parameters and forward variables of the streams the main list receives."""
    params = block_params(ctx, main)
    bound = bound_args(main.call, params) if main.call is not None and params else {}
    double = is_double_stream(main) and not _per_sample_second(ctx, main, params)
    stream_params = params[:2] if double else params[:1]
    stream_vars = [passed_name(bound.get(p)) for p in stream_params]
    encoder_param, encoder_var = encoder_input(params, bound, double, flow)
    return _Streams(main, bound, double, stream_params, stream_vars, encoder_param, encoder_var)


def _read_positions(
    ctx: ParallelContext, flow: ForwardFlow, cached: list[ParallelBlockList], streams: _Streams
) -> _Positions:
    """Position modules whose outputs reach the blocks (not embedders of a stream), position
    methods, and the names read again after the cached loops."""
    before_loop = [c for c in flow.module_calls if c.line < flow.first_loop_line]
    block_arg_names = names_passed_to_blocks(cached)
    # what the main list's blocks receive as a rotary table, whatever its name
    rotary = set().union(
        *(
            names_read(streams.bound[p])
            for p in rotary_block_params(ctx, streams.main)
            if p in streams.bound
        )
    )
    position_calls = [
        c
        for c in before_loop
        if reaches(flow, set(c.targets)) & block_arg_names
        and not feeds_stream(c, streams.stream_vars, flow)
        and (is_position(c) or reaches(flow, set(c.targets)) & rotary)
    ]
    # A position tensor the caller may pass, or that forward reorders after the module computed
    # it (`fractal_flatten(x, rope, ...)`), is split where the blocks receive it instead.
    reworked = reworked_positions(flow, position_calls)
    position_calls = [c for c in position_calls if not set(c.targets) & reworked]
    position_methods = [
        (name, line)
        for name, line in flow.method_calls.items()
        if line < flow.first_loop_line and any(w in name.lower() for w in POSITION_WORDS)
    ]
    reread = (read_after_loops(flow, cached), names_passed_to_blocks(cached[1:]))
    return _Positions(position_calls, frozenset(reworked), position_methods, reread)


def _split_at_root(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    evidence: list[Evidence],
    streams: _Streams,
    positions: _Positions,
    rope_dims: dict[str, PositionOutputs],
) -> _Split:
    """The root split, with output splits for position modules still at full length."""
    stream_vars, encoder_var = streams.stream_vars, streams.encoder_var
    approach, unsplit = root_plan(
        ctx, flow, plan, evidence, stream_vars, encoder_var, positions.calls
    )
    split_vars = [v for v in (*stream_vars, encoder_var) if v]
    refusals: list[Evidence] = []
    if unsplit:
        approach = "output_split"
        refusals += position_splits(
            ctx,
            flow,
            plan,
            unsplit,
            rope_dims,
            evidence,
            streams.main,
            streams.bound,
            split_vars,
            *positions.reread,
        )
    split_streams = tuple(v for v in (*stream_vars, encoder_var) if v)
    return _Split(approach, split_streams, split_vars, refusals)


def _split_at_first_block(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    evidence: list[Evidence],
    patches: list[Evidence],
    streams: _Streams,
    positions: _Positions,
    rope_dims: dict[str, PositionOutputs],
    cross_attention_cp: bool | None,
) -> _Split:
    """A single split point at the first block (plus method patches, earlier stages and the
    cross-attention keys), with position tensors split where the blocks receive them."""
    main = streams.main
    if not streams.stream_params:  # the block's signature is not read: no parameter to split
        return _Split("none", (), [], [unread_signature(ctx, main)])
    _split_streams_at(ctx, plan, evidence, streams)
    approach = "hybrid" if positions.methods else "single_point"
    split_streams = tuple(v for v in streams.stream_vars if v) if streams.double else ()
    stage_refusals: list[Evidence] = []
    if pre_stages(ctx, flow, main, plan, evidence, rope_dims, stage_refusals):
        approach = "submodule_hooks"
    split_vars = _split_cross_attention_keys(plan, streams, cross_attention_cp)
    refusals = position_splits(
        ctx,
        flow,
        plan,
        positions.calls,
        rope_dims,
        evidence,
        main,
        streams.bound,
        split_vars,
        *positions.reread,
    )
    return _Split(approach, split_streams, split_vars, stage_refusals + refusals)


def _split_streams_at(
    ctx: ParallelContext, plan: HookPlan, evidence: list[Evidence], streams: _Streams
) -> None:
    """Split the stream(s) where they enter the first block of the main list."""
    main = streams.main
    key = f"{main.attr}.0"
    for param, var in zip(streams.stream_params, streams.stream_vars, strict=False):
        plan.split(
            key,
            param,
            SplitInput(
                1,
                3,
                reason=f"`{var}` enters the first block",
                line=main.call.lineno if main.call else 0,
            ),
        )
    evidence.append(
        Evidence(
            f"split the stream(s) at `{key}`: the blocks' attention "
            "all-to-all keeps later blocks consistent",
            ctx.path,
            main.loops[0].lineno,
        )
    )


def _split_cross_attention_keys(
    plan: HookPlan, streams: _Streams, cross_attention_cp: bool | None
) -> list[str]:
    """Split the encoder input at every block when cross-attention keys run context-parallel;
    returns the forward variables now split."""
    main, encoder_param, encoder_var = streams.main, streams.encoder_param, streams.encoder_var
    if encoder_param and not streams.double and encoder_var and cross_attention_cp:
        plan.split(
            f"{main.attr}.*",
            encoder_param,
            SplitInput(
                1,
                3,
                reason="cross-attention keys run context-parallel too",
                line=main.call.lineno if main.call else 0,
            ),
        )
    split_vars = [v for v in streams.stream_vars if v]
    if encoder_var and any(encoder_param in plan.splits.get(k, {}) for k in block_list_keys(main)):
        split_vars.append(encoder_var)
    return split_vars


def _split_per_token_timestep(flow: ForwardFlow, plan: HookPlan) -> None:
    timestep = per_token_timestep(flow)
    if timestep:
        plan.split(
            "",
            timestep[0],
            SplitInput(
                1,
                2,
                reason="per-token timestep (B, S) when 2-D; skipped when 1-D",
                line=timestep[1],
            ),
        )


__all__ = [
    "EACH",
    "LAST",
    "PlanDraft",
    "build_plan",
    "call_name",
    "mask_reorder_plan",
    "with_expanded_block_calls",
]
