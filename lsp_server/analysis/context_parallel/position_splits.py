"""Splits of full-length position tensors: a position module's outputs, or where the blocks
receive them."""

from __future__ import annotations

import ast
from dataclasses import replace

from ..model import Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from .axis_inference import name_axis
from .block_binding import name_of
from .flow import ForwardFlow, ModuleCall
from .forward_statements import POSITION_WORDS
from .modules import PositionOutputs
from .result import HookPlan, SplitInput


def position_splits(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    calls: list[ModuleCall],
    rope_dims: dict[str, PositionOutputs],
    evidence: list[Evidence],
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    split_vars: list[str],
    read_after: frozenset[str] = frozenset(),
    other_lists_read: set[str] | None = None,
) -> list[Evidence]:
    """Split full-length position tensors on their sequence axis: the module's outputs when it
    runs once; where the blocks receive them when it runs several times (one call per stream: only
    the outputs of streams that are split), or when `forward` reads the outputs again after the
    cached loops (`read_after`: blocks that run on the whole sequence after the gather, an output
    head) and only the first list receives them — a split in place would hand those readers this
    rank's slice. A tuple-valued input (`(cos, sin)`) gets one spec per element. Returns
    refusals: modules whose sequence axis was not inferred (never guessed)."""
    path = ctx.path
    refusals: list[Evidence] = []
    by_attr: dict[str, list[ModuleCall]] = {}
    for call in calls:
        by_attr.setdefault(call.attr, []).append(call)
    split_sources = set().union(*(flow.derived.get(v, set()) | {v} for v in split_vars))
    for attr, group in by_attr.items():
        info = rope_dims.get(attr)
        if info is None or not info.known:
            refusals.append(_unknown_axis(attr, info, path, group[0].line))
            continue
        specs = _output_specs(info, group)
        later = sorted(set(group[0].targets) & read_after) if len(group) == 1 else []
        if later and not set(group[0].targets) & (other_lists_read or set()):
            whole = [replace(spec, split_output=False) for spec in specs]
            _split_at_blocks(
                flow,
                plan,
                group,
                whole,
                evidence,
                block,
                bound,
                split_sources,
                path,
                per_stream=False,
            )
            evidence.append(
                Evidence(
                    f"`{later[0]}` (the output of `self.{attr}`) is read again after the "
                    f"cached loops, where the sequence is whole: split where the blocks of "
                    f"`{block.attr}` receive it, not in place ({info.how})",
                    path,
                    group[0].line,
                )
            )
            continue
        if len(group) == 1:
            _split_outputs(plan, evidence, attr, specs, info, path, group[0].line)
            continue
        _split_at_blocks(flow, plan, group, specs, evidence, block, bound, split_sources, path)
    return refusals


def _unknown_axis(attr: str, info: PositionOutputs | None, path: str, line: int) -> Evidence:
    why = info.how if info is not None else "its forward could not be read"
    return Evidence(
        f"`self.{attr}(...)` returns full-length position tensors whose sequence "
        f"axis could not be inferred ({why}): context parallelism refused rather "
        "than splitting a guessed axis",
        path,
        line,
    )


def _output_specs(info: PositionOutputs, group: list[ModuleCall]) -> list[SplitInput]:
    """One split spec per output of the position module, on its inferred sequence axis."""
    return [
        SplitInput(
            axis if axis is not None else 0,
            ndim,
            split_output=len(group) == 1,
            reason=f"full-length position embedding ({info.how})",
            line=group[0].line,
        )
        for axis, ndim in info.dims
    ]


def _split_outputs(
    plan: HookPlan,
    evidence: list[Evidence],
    attr: str,
    specs: list[SplitInput],
    info: PositionOutputs,
    path: str,
    line: int,
) -> None:
    """A module run once: split its outputs in place."""
    for index, spec in enumerate(specs):
        plan.split(attr, str(index), spec)
    evidence.append(
        Evidence(
            f"`self.{attr}(...)` returns full-length position tensors: split its "
            f"outputs ({info.how})",
            path,
            line,
        )
    )


def _split_at_blocks(
    flow: ForwardFlow,
    plan: HookPlan,
    group: list[ModuleCall],
    specs: list[SplitInput],
    evidence: list[Evidence],
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    split_sources: set[str],
    path: str,
    *,
    per_stream: bool = True,
) -> None:
    """A position module called once per stream: its outputs are split where each block receives
    them, and only those computed for a stream that is split (a hook on the module would split
    every call). `per_stream=False`: one call whose outputs every block receives."""
    line = block.call.lineno if block.call is not None else 0
    for call in group:
        sources = set().union(*(flow.derived.get(n, set()) | {n} for n in call.arg_names()))
        if per_stream and not sources & split_sources:
            continue
        for param, expr in bound.items():
            var = name_of(expr)
            if var is None or var not in call.targets:
                continue
            if len(call.targets) == 1 and len(specs) > 1:
                value: SplitInput | tuple[SplitInput, ...] = tuple(specs)
            else:
                value = specs[min(call.targets.index(var), len(specs) - 1)]
            plan.split(f"{block.attr}.*", param, value)
            if per_stream:
                evidence.append(
                    Evidence(
                        f"`self.{call.attr}(...)` runs once per stream: `{param}` (from `{var}`) "
                        "is split where every block receives it",
                        path,
                        line,
                    )
                )


def per_block_positions(
    ctx: ParallelContext,
    flow: ForwardFlow,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    plan: HookPlan,
    evidence: list[Evidence],
    split_outputs: set[str],
) -> None:
    """Full-length position tensors handed to every block (from the caller, a method, or reworked
    after a module computed them) are split where each block receives them."""
    line = block.call.lineno if block.call else 0
    for param, expr in bound.items():
        var = name_of(expr)
        if not var or var in split_outputs or not any(w in param.lower() for w in POSITION_WORDS):
            continue
        if any(param in plan.splits.get(f"{block.attr}{k}", {}) for k in (".0", ".*")):
            continue
        given = var in flow.params  # precomputed by the caller: (S, D) tensors by convention
        axis, how = (None, "")
        if not given and ctx.forward is not None:  # built in forward: read how
            axis, how = name_axis(ctx.forward, ctx.transformer.node, var)
        plan.split(
            f"{block.attr}.*",
            param,
            SplitInput(
                axis if axis is not None else (0 if given else 1),
                2 if given else None,
                reason="position tensor at full length, passed to every block"
                + (f" ({how})" if axis is not None else ""),
                line=line,
            ),
        )
        evidence.append(
            Evidence(
                f"`{param}` reaches every block at full length: split it there"
                + (f" on axis {axis} ({how})" if axis is not None else ""),
                ctx.path,
                line,
            )
        )
