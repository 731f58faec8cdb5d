"""Block lists that run before the main one: refiner stages (split and gathered around them) and
side branches that carry a stream of their own."""

from __future__ import annotations

import ast

from ..model import Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from .block_binding import block_params, bound_args, call_targets, guards_of, name_of
from .flow import ForwardFlow
from .modules import PositionOutputs
from .position_splits import per_block_positions
from .result import LAST, GatherOutput, HookPlan, SplitInput


def pre_stages(
    ctx: ParallelContext,
    flow: ForwardFlow,
    main: ParallelBlockList,
    plan: HookPlan,
    evidence: list[Evidence],
    rope_dims: dict[str, PositionOutputs] | None = None,
    refusals: list[Evidence] | None = None,
) -> bool:
    """Lists that run before the main one on their own token groups (refiners): split at their
    first block, gather after their last one (their output is merged before the main list).
    `rope_dims`: the position modules' outputs, read through for the tables the stage gets;
    `refusals`: where a table the stage gets cannot be split is told."""
    found = False
    main_line = min(loop.lineno for loop in main.loops)
    for block in ctx.block_lists:
        if (
            block is main
            or block.call is None
            or min(loop.lineno for loop in block.loops) >= main_line
        ):
            continue
        params = block_params(ctx, block)
        if not params:
            continue
        bound = bound_args(block.call, params)
        var = name_of(bound.get(params[0]))
        targets = call_targets(block)
        if var and var not in targets:
            # split like the main stream; no gather (its outputs stay rank-local): the approach
            # remains a single split point
            _side_branch(ctx, flow, block, params, bound, targets, plan, evidence)
            continue
        if not var:
            continue
        main_params = block_params(ctx, main)
        main_var = (
            name_of(bound_args(main.call, main_params).get(main_params[0]))
            if (main.call is not None and main_params)
            else None
        )
        if not (flow.derived.get(main_var or "", set()) & flow.derived.get(var, {var})):
            continue  # its output conditions the main blocks (a text encoder), not merged
        guards = guards_of(ctx, block, flow)
        if guards:
            evidence.append(
                Evidence(
                    f"`{block.attr}` runs only when {', '.join(sorted(guards))} "
                    "is passed; left unsplit (it runs at full length)",
                    ctx.path,
                    block.call.lineno,
                )
            )
            continue
        found = True
        _split_stage(
            ctx, flow, block, main, params[0], var, bound, plan, evidence, rope_dims, refusals
        )
    return found


def _split_stage(
    ctx: ParallelContext,
    flow: ForwardFlow,
    block: ParallelBlockList,
    main: ParallelBlockList,
    param: str,
    var: str,
    bound: dict[str, ast.expr],
    plan: HookPlan,
    evidence: list[Evidence],
    rope_dims: dict[str, PositionOutputs] | None,
    refusals: list[Evidence] | None,
) -> None:
    """A stage on its own tokens: split at its first block (with the position tables it gets),
    gathered after its last."""
    assert block.call is not None
    line = block.call.lineno
    plan.split(
        f"{block.attr}.0", param, SplitInput(1, 3, reason=f"`{var}` enters this stage", line=line)
    )
    per_block_positions(
        ctx,
        flow,
        block,
        bound,
        plan,
        evidence,
        set(),
        later_lists=False,
        modules=rope_dims,
        refusals=refusals,
    )
    plan.gather(
        f"{block.attr}.{LAST}",
        GatherOutput(
            1, 3, reason="merged with other token groups before the main blocks", line=line
        ),
    )
    evidence.append(
        Evidence(
            f"`{block.attr}` runs on its own tokens before `{main.attr}`: "
            "split at its first block and gather after its last",
            ctx.path,
            line,
        )
    )


def _side_branch(
    ctx: ParallelContext,
    flow: ForwardFlow,
    block: ParallelBlockList,
    params: list[str],
    bound: dict[str, ast.expr],
    targets: list[str],
    plan: HookPlan,
    evidence: list[Evidence],
) -> bool:
    """A list that reads the denoised stream but carries a stream of its own (control hints):
    its attention runs context-parallel too, so every sequence it receives must be split — the
    carried one once at its first block, the ones re-passed at full length at every block."""
    hidden = flow.hidden
    reads_hidden = any(hidden in flow.derived.get(name_of(e) or "", set()) for e in bound.values())
    if not reads_hidden or guards_of(ctx, block, flow):
        return False
    line = block.call.lineno if block.call is not None else 0
    for param in params:
        var = name_of(bound.get(param))
        if not var:
            continue
        carried = var in targets
        sequence = carried or any(
            p == hidden or "hidden_states" in p for p in flow.derived.get(var, set())
        )
        if not sequence:
            continue
        key = f"{block.attr}.0" if carried else f"{block.attr}.*"
        plan.split(
            key,
            param,
            SplitInput(
                1,
                3,
                reason="carried by this side branch"
                if carried
                else "full-length sequence re-passed to every block",
                line=line,
            ),
        )
    evidence.append(
        Evidence(
            f"`{block.attr}` reads the denoised stream and runs attention: its "
            "sequences are split too",
            ctx.path,
            line,
        )
    )
    return True
