"""Splits of full-length position tensors: a position module's outputs, or where the blocks
receive them."""

from __future__ import annotations

import ast
from dataclasses import replace

from ..astutil import names_read, self_attr, walk
from ..model import Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from .axis_inference import name_axis, return_axes
from .block_binding import block_params, bound_args, name_of
from .flattened_grids import flattened_grid
from .flow import ForwardFlow, ModuleCall
from .forward_statements import POSITION_WORDS
from .mirrored_layout import mirrored_axis
from .modules import PositionOutputs
from .position_uses import used_axes
from .result import HookPlan, SplitInput
from .table_evidence import stream_of, table_evidence


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
            grid = flattened_grid(flow, group, split_vars) if len(group) == 1 else None
            if grid is None:
                refusals.append(_unknown_axis(attr, info, path, group[0].line))
                continue
            spec, how = grid
            _split_at_blocks(
                flow,
                plan,
                group,
                [spec],
                evidence,
                block,
                bound,
                split_sources,
                path,
                per_stream=False,
            )
            evidence.append(Evidence(f"`self.{attr}(...)`: {how}", path, group[0].line))
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
    *,
    later_lists: bool = True,
    other_streams: tuple[str, ...] = (),
    reworked: frozenset[str] = frozenset(),
    refusals: list[Evidence] | None = None,
    joins: bool = False,
    modules: dict[str, PositionOutputs] | None = None,
) -> set[str]:
    """Full-length position tensors handed to every block (from the caller, a method, or reworked
    after a module computed them) are split where each block receives them: the blocks of
    `block` and of the cached lists after it that receive the same value (they run on the split
    streams too; `later_lists=False` for a stage gathered before them). The axis is read from
    how forward (or the method it calls) builds the value, one spec per element of a tuple
    (`(cos, sin)`), unless it is built from the lengths of `other_streams` too (a joint table:
    its rows are not this stream's alone); a caller's precomputed table is `(S, D)` by
    convention; else from where the blocks' attention multiplies the queries by it
    (`position_uses`). An axis read neither way is refused (into `refusals`), never guessed.
    Returns the forward variables whose axis was read (or given). `joins`: the stream is
    itself a join of sequences (`x = cat([ctx, x], 1)`), so a table joined along its
    sequence axis the same way keeps that axis. `modules`: the
    position modules' outputs (`rope_dims`), read through when forward reworks them.
    `reworked`: outputs of position modules forward reworks before the loop (`cos =
    torch.cat([text_rows, cos])`): values made from them are position tensors whatever the
    blocks call them."""
    line = block.call.lineno if block.call else 0
    split: set[str] = set()
    outputs = {a: tuple(ax for ax, _ in o.dims) for a, o in (modules or {}).items()}
    later = [b for b in ctx.cached_lists if b is not block and b.call is not None]
    if not later_lists:
        later = []
    for param, expr in bound.items():
        var = name_of(expr)
        if not var or var in split_outputs or var in (stream_of(ctx, block, bound), *other_streams):
            continue
        if any(param in plan.splits.get(f"{block.attr}{k}", {}) for k in (".0", ".*")):
            continue
        named = any(w in param.lower() for w in POSITION_WORDS)  # a reason to look, no more
        derived = bool(({var} | flow.derived.get(var, set())) & reworked)
        why = None if derived else table_evidence(ctx, flow, block, bound, param, var)
        if not (named or derived or why):
            continue
        found = None  # a caller's table is (S, D) by convention only when its name says so
        if named or var not in flow.params:
            found = _position_axes(ctx, flow, var, line, other_streams, joins, outputs or None)
        if found is None:
            found = _use_axes(ctx, block, param, var, line)
        if found is None:
            found = _mirrored(ctx, flow, block, bound, var, line)
        if found is None:  # neither built nor used where it is read: never guessed
            if refusals is not None and derived and not named:  # from a reworked module output
                refusals.append(_unread_rework(param, var, block, ctx.path, line))
            elif refusals is not None:
                packed = _packed_tuple(ctx.forward, var)
                refusals.append(_unread_axis(param, var, packed, block, ctx.path, line))
            continue
        split.add(var)
        value, how = found
        for target, target_bound in [(block, bound), *_receivers(ctx, later, var)]:
            for name, arg in target_bound.items():
                if name_of(arg) == var:
                    plan.split(f"{target.attr}.*", name, value)
        evidence.append(
            Evidence(
                f"`{param}` reaches every block at full length"
                + (f" ({why})" if why else "")
                + ": split it there"
                + (f" ({how})" if how else ""),
                ctx.path,
                line,
            )
        )
    return split


def _mirrored(
    ctx: ParallelContext,
    flow: ForwardFlow,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    var: str,
    line: int,
) -> tuple[SplitInput, str] | None:
    """The stream's axis for a table forward lays out as it lays out the stream the blocks
    receive first (`mirrored_layout`)."""
    params = block_params(ctx, block)
    stream = name_of(bound.get(params[0])) if params else None
    if stream is None:
        return None
    how = mirrored_axis(ctx, flow, var, stream, 1)
    if how is None:
        return None
    reason = f"position tensor at full length, passed to every block ({how})"
    return SplitInput(1, None, reason=reason, line=line), how


def _use_axes(
    ctx: ParallelContext, block: ParallelBlockList, param: str, var: str, line: int
) -> tuple[SplitInput | tuple[SplitInput, ...], str] | None:
    """The split read from where the queries meet the table (`position_uses`): one spec, or
    one per element of a tuple (as many as forward packs, where it packs one)."""
    used = used_axes(ctx, block, param)
    if used is None:
        return None
    axes, how = used.axes, used.how
    packed = _packed_tuple(ctx.forward, var)
    if packed is not None and len(axes) != len(packed.elts):
        return None
    reason = f"position tensor at full length, passed to every block ({how})"
    specs = tuple(SplitInput(axis, None, reason=reason, line=line) for axis in axes)
    return (specs[0] if len(specs) == 1 and packed is None else specs), how


def _packed_tuple(forward: ast.FunctionDef | None, var: str) -> ast.Tuple | None:
    """`var = (a, b)` in forward: the tuple it packs (its elements' axes read one by one)."""
    if forward is None:
        return None
    values = _values_assigned(forward, var)
    return values[0] if len(values) == 1 and isinstance(values[0], ast.Tuple) else None


def _unread_axis(
    param: str,
    var: str,
    packed: ast.Tuple | None,
    block: ParallelBlockList,
    path: str,
    line: int,
) -> Evidence:
    what = (
        f"a tuple of {len(packed.elts)} position tensors (line {packed.lineno})"
        if packed is not None
        else "a full-length position tensor"
    )
    return Evidence(
        f"`{param}` of the blocks of `{block.attr}` gets `{var}`, {what} whose sequence "
        "axis is read neither from how forward builds it nor from where the blocks' attention "
        "multiplies the queries by it: context parallelism refused rather than splitting a "
        "guessed axis",
        path,
        line,
    )


def _position_axes(
    ctx: ParallelContext,
    flow: ForwardFlow,
    var: str,
    line: int,
    other_streams: tuple[str, ...],
    joins: bool,
    modules: dict[str, tuple[int | None, ...]] | None,
) -> tuple[SplitInput | tuple[SplitInput, ...], str] | None:
    """The split of forward's `var`: a caller's precomputed table is `(S, D)` by convention,
    else read from how forward builds it (`_built_axes`); None where not read."""
    if var in flow.params:  # precomputed by the caller: (S, D) tensors by convention
        reason = "position tensor at full length, passed to every block"
        return SplitInput(0, 2, reason=reason, line=line), ""
    return _built_axes(ctx, flow, var, line, other_streams, joins, modules)


def _unread_rework(
    param: str, var: str, block: ParallelBlockList, path: str, line: int
) -> Evidence:
    return Evidence(
        f"`{param}` of the blocks of `{block.attr}` gets `{var}`, reworked from a position "
        "module's output before the loop; its sequence axis after that is not read: context "
        "parallelism refused rather than splitting a guessed axis",
        path,
        line,
    )


def _built_axes(
    ctx: ParallelContext,
    flow: ForwardFlow,
    var: str,
    line: int,
    other_streams: tuple[str, ...],
    joins: bool = False,
    modules: dict[str, tuple[int | None, ...]] | None = None,
) -> tuple[SplitInput | tuple[SplitInput, ...], str] | None:
    """The split of forward's `var` read from how it is built: one spec, or one per element of
    the tuple a method of the transformer returns (`rope = self.rotary(h, w)` returning
    `(cos, sin)`); None where an axis is not inferred or the value is built from another
    stream's length (`self._rope(ctx.shape[1] + x.shape[1])`)."""
    if ctx.forward is None:
        return None
    others = set().union(*(flow.derived.get(v, set()) | {v} for v in other_streams))
    for value in _values_assigned(ctx.forward, var):
        read = names_read(value)
        if others & set().union(*(flow.derived.get(n, set()) | {n} for n in read)):
            return None
    reason = "position tensor at full length, passed to every block"
    method = _method_assigned(ctx.forward, var)
    owner = ctx.transformer.node
    if method is not None and owner is not None:
        helper = next(
            (f for f in owner.body if isinstance(f, ast.FunctionDef) and f.name == method), None
        )
        axes = return_axes(helper, owner) if helper is not None else []
        if len(axes) > 1:
            read = _tuple_specs(axes, reason, line)
            if read is None:
                return None
            specs, how = read
            return specs, f"`self.{method}(...)` returns {len(specs)} tensors: {how}"
    source = ctx.transformer.source or ctx.source
    functions = source.top_level

    def read(name: str) -> tuple[int | None, str]:
        return name_axis(
            ctx.forward, owner, name, joins=joins, modules=modules, functions=functions
        )

    values = _values_assigned(ctx.forward, var)
    if len(values) == 1 and isinstance(values[0], ast.Tuple):  # `rope = (cos, sin)`
        elements = values[0].elts
        if not elements or not all(isinstance(e, ast.Name) for e in elements):
            return None
        packed = _tuple_specs(
            [read(e.id) for e in elements if isinstance(e, ast.Name)], reason, line
        )
        if packed is None:
            return None
        specs, how = packed
        return specs, f"a tuple of {len(specs)} tensors: {how}"
    axis, how = read(var)
    if axis is None:
        return None
    spec = SplitInput(axis, None, reason=f"{reason} ({how})", line=line)
    return spec, f"on axis {axis} ({how})"


def _tuple_specs(
    axes: list[tuple[int | None, str]], reason: str, line: int
) -> tuple[tuple[SplitInput, ...], str] | None:
    """One spec per element of a tuple whose every axis was read, and how they were read."""
    if any(axis is None for axis, _ in axes):
        return None
    how = "; ".join(dict.fromkeys(h for _, h in axes))
    specs = tuple(
        SplitInput(axis, None, reason=f"{reason} ({h})", line=line)
        for axis, h in axes
        if axis is not None
    )
    return specs, how


def _values_assigned(forward: ast.FunctionDef, var: str) -> list[ast.expr]:
    """The values forward assigns to `var` (one target)."""
    return [
        node.value
        for node in walk(forward)
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id == var
    ]


def _method_assigned(forward: ast.FunctionDef, var: str) -> str | None:
    """`var = self.<method>(...)` in forward (one target): the method's name."""
    for node in walk(forward):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == var
            and isinstance(node.value, ast.Call)
        ):
            return self_attr(node.value.func)
    return None


def _receivers(
    ctx: ParallelContext, lists: list[ParallelBlockList], var: str
) -> list[tuple[ParallelBlockList, dict[str, ast.expr]]]:
    """The lists among `lists` whose block call passes `var`, with their bound arguments."""
    out = []
    for other in lists:
        params = block_params(ctx, other)
        other_bound = bound_args(other.call, params) if other.call is not None else {}
        if any(name_of(arg) == var for arg in other_bound.values()):
            out.append((other, other_bound))
    return out
