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
from dataclasses import dataclass, field, replace
from typing import Any

from ..astutil import (
    call_name,
    callee_name,
    last_part,
    names_read,
    not_none_guards,
    positional_params,
    self_attr,
    walk_local,
)
from ..model import Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from .flow import ForwardFlow, ModuleCall, data_names, is_sequence_global
from .modules import PositionOutputs, measures_length_of
from .result import EACH, LAST, GatherOutput, HookPlan, SplitInput

_TOKEN_LOCAL_MODULES = ("Linear", "LayerNorm", "RMSNorm", "GroupNorm", "Identity", "Dropout")
_POSITION_WORDS = ("rotary", "rope", "freq", "pos")


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


def _block_params(ctx: ParallelContext, block: ParallelBlockList) -> list[str]:
    found = ctx.resolver.find_method(block.block, "forward")
    return positional_params(found[0]) if found else []


def with_expanded_block_calls(ctx: ParallelContext) -> ParallelContext:
    """Block calls written `block(*block_args)`, where the loop builds `block_args` as a tuple
    literal, read as the call with those arguments."""
    lists = tuple(replace(b, call=_expanded(b)) for b in ctx.block_lists)
    return replace(ctx, block_lists=lists)


def _expanded(block: ParallelBlockList) -> ast.Call | None:
    call = block.call
    if call is None or not any(isinstance(a, ast.Starred) for a in call.args):
        return call
    tuples: dict[str, ast.Tuple] = {}
    for loop in block.loops:
        for node in ast.walk(loop):
            if (
                isinstance(node, ast.Assign)
                and node.lineno < call.lineno
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Tuple | ast.List)
            ):
                tuples[node.targets[0].id] = node.value  # type: ignore[assignment]
    args: list[ast.expr] = []
    for arg in call.args:
        name = (
            arg.value.id
            if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name)
            else None
        )
        if name in tuples:
            args += tuples[name].elts
        else:
            args.append(arg)
    new = ast.Call(func=call.func, args=args, keywords=call.keywords)
    return ast.copy_location(new, call)


def _bound_args(call: ast.Call, params: list[str]) -> dict[str, ast.expr]:
    """Block parameter -> the expression the transformer passes for it."""
    bound: dict[str, ast.expr] = {}
    for i, arg in enumerate(call.args):
        if i < len(params) and not isinstance(arg, ast.Starred):
            bound[params[i]] = arg
    for kw in call.keywords:
        if kw.arg:
            bound[kw.arg] = kw.value
    return bound


def _name(expr: ast.expr | None) -> str | None:
    return expr.id if isinstance(expr, ast.Name) else None


def _is_double_stream(block: ParallelBlockList) -> bool:
    """The transformer unpacks two streams from the block (`e, h = block(h, e, ...)`)."""
    node = _call_assignment(block) if block.call is not None else None
    return (
        node is not None
        and isinstance(node.targets[0], ast.Tuple)
        and len(node.targets[0].elts) >= 2
    )


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
    path = ctx.path
    if not cached or flow.hidden is None:
        return PlanDraft("none", plan, [Evidence("no cached block list to split", path, 1)], [], ())
    main = cached[0]
    params = _block_params(ctx, main)
    bound = _bound_args(main.call, params) if main.call is not None and params else {}
    double = _is_double_stream(main)
    stream_params = params[:2] if double else params[:1]
    stream_vars = [_name(bound.get(p)) for p in stream_params]
    encoder_param, encoder_var = _encoder_input(params, bound, double, flow)

    before_loop = [c for c in flow.module_calls if c.line < flow.first_loop_line]
    block_arg_names = _block_arg_names(cached)
    position_calls = [
        c
        for c in before_loop
        if _reaches(flow, set(c.targets)) & block_arg_names
        and not _feeds_stream(c, stream_vars, flow)
        and _is_position(c)
    ]
    # A position tensor the caller may pass, or that forward reorders after the module computed
    # it (`fractal_flatten(x, rope, ...)`), is split where the blocks receive it instead.
    reworked = _reworked_positions(flow, position_calls)
    position_calls = [c for c in position_calls if not set(c.targets) & reworked]
    position_methods = [
        (name, line)
        for name, line in flow.method_calls.items()
        if line < flow.first_loop_line and any(w in name.lower() for w in _POSITION_WORDS)
    ]
    # what forward reads after the cached loops, and what later cached lists receive
    reread = (_read_after_loops(flow, cached), _block_arg_names(cached[1:]))
    root_blockers = _root_blockers(ctx, flow, stream_vars, encoder_var, position_calls)
    if not root_blockers and main.call is not None:
        root_blockers = _attention_masks_from_lengths(ctx, flow, main, bound, stream_vars)
    refusals: list[Evidence] = []

    if not root_blockers:
        approach, unsplit = _root_plan(
            ctx, flow, plan, evidence, stream_vars, encoder_var, position_calls
        )
        split_vars = [v for v in (*stream_vars, encoder_var) if v]
        if unsplit:
            approach = "output_split"
            refusals += _position_splits(
                ctx,
                flow,
                plan,
                unsplit,
                rope_dims,
                evidence,
                main,
                bound,
                split_vars,
                *reread,
            )
        split_streams = tuple(v for v in (*stream_vars, encoder_var) if v)
    else:
        evidence += root_blockers
        key = f"{main.attr}.0"
        for param, var in zip(stream_params, stream_vars, strict=False):
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
                path,
                main.loops[0].lineno,
            )
        )
        approach = "single_point"
        for name, line in position_methods:
            approach = "hybrid"
            patches.append(
                Evidence(
                    f"`self.{name}(...)` computes positions in a plain method that "
                    "no hook can reach: patch it to return this rank's slice "
                    "(offsets from gathered local lengths, not chunk)",
                    path,
                    line,
                )
            )
        split_streams = tuple(v for v in stream_vars if v) if double else ()
        if _pre_stages(ctx, flow, main, plan, evidence):
            approach = "submodule_hooks"
        if encoder_param and not double and encoder_var and cross_attention_cp:
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
        split_vars = [v for v in stream_vars if v]
        if encoder_var and any(encoder_param in plan.splits.get(k, {}) for k in _block_keys(main)):
            split_vars.append(encoder_var)
        refusals += _position_splits(
            ctx,
            flow,
            plan,
            position_calls,
            rope_dims,
            evidence,
            main,
            bound,
            split_vars,
            *reread,
        )
    timestep = _per_token_timestep(flow)
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
    if root_blockers:  # under a root split every position forward computes is already local
        split_outputs = {t for c in position_calls for t in c.targets}
        _per_block_positions(ctx, flow, main, bound, plan, evidence, split_outputs)
    _gather(ctx, flow, plan, evidence, cached, local_lengths=not root_blockers)
    refusals += _split_values_after_gather(ctx, flow, plan, cached)
    if root_blockers and main.call is not None:
        refusals += _whole_sizes(ctx, flow, plan, main, bound, split_vars)
    refusals += _regrouped_between_blocks(ctx, main)
    cautions: list[Evidence] = []
    if main.call is not None:
        evidence += _split_token_masks(ctx, flow, plan, main, bound, split_vars)
        for optional, why in _whole_token_masks(ctx, flow, plan, main, bound, split_vars):
            (cautions if optional else refusals).append(why)
    if refusals:
        return PlanDraft("none", HookPlan(), evidence + refusals, patches, (), refusals)
    return PlanDraft(approach, plan, evidence, patches, split_streams, cautions=cautions)


def _block_keys(block: ParallelBlockList) -> tuple[str, str]:
    return f"{block.attr}.0", f"{block.attr}.*"


def _encoder_input(
    params: list[str], bound: dict[str, ast.expr], double: bool, flow: ForwardFlow
) -> tuple[str | None, str | None]:
    """The block parameter and forward variable of the encoder (text) stream, if any."""
    if double and len(params) > 1:
        return params[1], _name(bound.get(params[1]))
    for param, expr in bound.items():
        if params and param == params[0]:
            continue
        var = _name(expr)
        if var and any(
            p != flow.hidden and "hidden_states" in p for p in flow.derived.get(var, set())
        ):
            return param, var  # a second token sequence (text) the blocks attend to
    return None, None


def _block_arg_names(blocks: list[ParallelBlockList]) -> set[str]:
    out: set[str] = set()
    for b in blocks:
        if b.call is not None:
            for a in [*b.call.args, *(k.value for k in b.call.keywords)]:
                out |= names_read(a)
    return out


def _reworked_positions(flow: ForwardFlow, calls: list[ModuleCall]) -> set[str]:
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
                    and target in _targets(stmt)
                    and is_sequence_global(stmt.value, {target})
                ):
                    out.add(target)
    return out


def _token_rank(flow: ForwardFlow, name: str) -> int:
    """3 for a token sequence (B, S, C); 2 when forward gives the parameter a feature axis
    before mixing it with the stream (`(ids == k).unsqueeze(-1)`, `mask[..., None]`)."""
    for stmt in flow.statements:
        if stmt.lineno >= flow.first_loop_line:
            break
        for node in ast.walk(stmt):
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


def _reaches(flow: ForwardFlow, names: set[str]) -> set[str]:
    """`names` and the variables forward builds from them before the first block loop by tensor
    methods and packing alone (`cos = cos.to(dtype)`, `rope = (cos, sin)`), not through a
    module or function call."""
    reached = set(names)
    for stmt in flow.statements:
        if stmt.lineno >= flow.first_loop_line:
            break
        if isinstance(stmt, ast.Assign) and data_names(stmt.value) & reached:
            calls = [n for n in ast.walk(stmt.value) if isinstance(n, ast.Call)]
            if any(not isinstance(c.func, ast.Attribute) or self_attr(c.func) for c in calls):
                continue  # a module's or a function's output: something else
            reached |= set(_targets(stmt))
    return reached


def _is_position(call: ModuleCall) -> bool:
    """A positional-embedding module: named so, or producing a variable named so."""
    words = [call.attr, *call.targets]
    return any(w in name.lower() for name in words for w in _POSITION_WORDS)


def _feeds_stream(call: ModuleCall, stream_vars: list[str | None], flow: ForwardFlow) -> bool:
    """Whether a module call is an embedder of a stream (its output becomes a stream variable)."""
    return any(v in call.targets for v in stream_vars if v)


def _root_blockers(
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
    for stmt in flow.statements:
        if stmt.lineno >= flow.first_loop_line:
            break
        if not isinstance(stmt, ast.Assign) or not set(_targets(stmt)) & chain:
            continue
        used = data_names(stmt.value) & chain
        if not used or any(w in t.lower() for t in _targets(stmt) for w in _POSITION_WORDS):
            continue  # position embeddings read the latent's shape; they are not the tokens
        op = is_sequence_global(stmt.value, used)
        if op and op not in ("cat", "concat", "stack", "split", "chunk", "slice"):
            out.append(
                Evidence(
                    f"`{_short(stmt)}` turns the latent into tokens inside forward "
                    "(a root split would cut the latent, not the token sequence)",
                    path,
                    stmt.lineno,
                )
            )
            break
        module = _module_on(stmt.value, used, flow)
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
    out += _masks_marked_by_position(ctx, flow, chain | {hidden})
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
        for name in call.arg_names():
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


def _root_plan(
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
            if src in flow.params and src not in roots and not _is_mask(src):
                roots.append(src)
    # Other token streams the blocks receive (`audio_hidden_states`, `encoder_hidden_states`).
    for name in _block_arg_names(list(ctx.cached_lists)):
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


def _is_mask(name: str) -> bool:
    return "mask" in name


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


def _per_token_timestep(flow: ForwardFlow) -> tuple[str, int] | None:
    """A timestep parameter that forward also accepts per token (`t.ndim == 2`, `t.shape[1]`)."""
    for stmt in flow.statements:
        if stmt.lineno >= flow.first_loop_line:
            break
        text = ast.unparse(stmt.test) if isinstance(stmt, ast.If) else ""
        for param in flow.params:
            if "timestep" not in param:
                continue
            if f"{param}.ndim == 2" in text or f"{param}.dim() == 2" in text:
                return param, stmt.lineno
    return None


def _position_splits(
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
            why = info.how if info is not None else "its forward could not be read"
            refusals.append(
                Evidence(
                    f"`self.{attr}(...)` returns full-length position tensors whose sequence "
                    f"axis could not be inferred ({why}): context parallelism refused rather "
                    "than splitting a guessed axis",
                    path,
                    group[0].line,
                )
            )
            continue
        specs = [
            SplitInput(
                axis if axis is not None else 0,
                ndim,
                split_output=len(group) == 1,
                reason=f"full-length position embedding ({info.how})",
                line=group[0].line,
            )
            for axis, ndim in info.dims
        ]
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
            for index, spec in enumerate(specs):
                plan.split(attr, str(index), spec)
            evidence.append(
                Evidence(
                    f"`self.{attr}(...)` returns full-length position tensors: split its "
                    f"outputs ({info.how})",
                    path,
                    group[0].line,
                )
            )
            continue
        _split_at_blocks(flow, plan, group, specs, evidence, block, bound, split_sources, path)
    return refusals


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
            var = _name(expr)
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


def _per_block_positions(
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
        var = _name(expr)
        if not var or var in split_outputs or not any(w in param.lower() for w in _POSITION_WORDS):
            continue
        if any(param in plan.splits.get(f"{block.attr}{k}", {}) for k in (".0", ".*")):
            continue
        given = var in flow.params  # precomputed by the caller: (S, D) tensors by convention
        plan.split(
            f"{block.attr}.*",
            param,
            SplitInput(
                0 if given else 1,
                2 if given else None,
                reason="position tensor at full length, passed to every block",
                line=line,
            ),
        )
        evidence.append(
            Evidence(
                f"`{param}` reaches every block at full length: split it there", ctx.path, line
            )
        )


def _pre_stages(
    ctx: ParallelContext,
    flow: ForwardFlow,
    main: ParallelBlockList,
    plan: HookPlan,
    evidence: list[Evidence],
) -> bool:
    """Lists that run before the main one on their own token groups (refiners): split at their
    first block, gather after their last one (their output is merged before the main list)."""
    found = False
    main_line = min(loop.lineno for loop in main.loops)
    for block in ctx.block_lists:
        if (
            block is main
            or block.call is None
            or min(loop.lineno for loop in block.loops) >= main_line
        ):
            continue
        params = _block_params(ctx, block)
        if not params:
            continue
        bound = _bound_args(block.call, params)
        var = _name(bound.get(params[0]))
        targets = _call_targets(block)
        if var and var not in targets:
            # split like the main stream; no gather (its outputs stay rank-local): the approach
            # remains a single split point
            _side_branch(ctx, flow, block, params, bound, targets, plan, evidence)
            continue
        if not var:
            continue
        main_params = _block_params(ctx, main)
        main_var = (
            _name(_bound_args(main.call, main_params).get(main_params[0]))
            if (main.call is not None and main_params)
            else None
        )
        if not (flow.derived.get(main_var or "", set()) & flow.derived.get(var, {var})):
            continue  # its output conditions the main blocks (a text encoder), not merged
        guards = _guards_of(ctx, block, flow)
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
        line = block.call.lineno
        plan.split(
            f"{block.attr}.0",
            params[0],
            SplitInput(1, 3, reason=f"`{var}` enters this stage", line=line),
        )
        _per_block_positions(ctx, flow, block, bound, plan, evidence, set())
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
    return found


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
    reads_hidden = any(hidden in flow.derived.get(_name(e) or "", set()) for e in bound.values())
    if not reads_hidden or _guards_of(ctx, block, flow):
        return False
    line = block.call.lineno if block.call is not None else 0
    for param in params:
        var = _name(bound.get(param))
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


def _guards_of(ctx: ParallelContext, block: ParallelBlockList, flow: ForwardFlow) -> set[str]:
    """Optional forward inputs that must be given for the list's loop to run."""
    out: set[str] = set()
    if ctx.forward is None:
        return out
    for node in walk_local(ctx.forward):
        if isinstance(node, ast.If) and any(
            child is loop for stmt in node.body for child in ast.walk(stmt) for loop in block.loops
        ):
            out |= not_none_guards(node.test) & flow.optional
    return out


def _call_assignment(block: ParallelBlockList) -> ast.Assign | None:
    """The assignment that receives the block call (also through `a if c else b`)."""
    for loop in block.loops:
        for node in walk_local(loop):
            if isinstance(node, ast.Assign) and any(n is block.call for n in ast.walk(node.value)):
                return node
    return None


def _call_targets(block: ParallelBlockList) -> list[str]:
    node = _call_assignment(block)
    if node is None:
        return []
    return [n.id for n in ast.walk(node.targets[0]) if isinstance(n, ast.Name)]


def _gather(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    evidence: list[Evidence],
    cached: list[ParallelBlockList],
    local_lengths: bool,
) -> None:
    """Gather on the last token-local module before the output needs the whole sequence; a second
    output stream (an audio head) gets its own gather when it reaches a module of its own."""
    last = max(cached, key=lambda b: max(loop.lineno for loop in b.loops))
    params = _block_params(ctx, last)
    targets = _call_targets(last)
    stream = None
    if last.call is not None and params:
        stream = _name(_bound_args(last.call, params).get(params[0]))
    first = stream or (targets[0] if targets else None)
    others = [t for t in targets if t != first]
    path = ctx.path
    candidate, stop = _gather_point(flow, {first} if first else set(), local_lengths)
    if candidate:
        plan.gather(
            candidate[0],
            GatherOutput(
                1,
                3,
                reason="last token-local module before the output needs the full sequence",
                line=candidate[1],
            ),
        )
        evidence.append(Evidence(f"gather at `{candidate[0]}`", path, candidate[1]))
        for other in others:
            extra, _ = _gather_point(flow, {other}, local_lengths)
            if extra and extra[0] != candidate[0]:
                plan.gather(
                    extra[0], GatherOutput(1, 3, reason=f"output head of `{other}`", line=extra[1])
                )
                evidence.append(Evidence(f"gather `{other}` at `{extra[0]}`", path, extra[1]))
        return
    outputs = max(1, len(targets))
    key = f"{last.attr}.{LAST}"
    plan.gather(
        key,
        GatherOutput(
            1,
            3,
            outputs=outputs,
            reason="the code after the loop needs the full sequence",
            line=stop[1] if stop else 0,
        ),
    )
    evidence.append(
        Evidence(
            f"gather at the last block of `{last.attr}`: "
            f"`{stop[0] if stop else 'output'}` follows the loop",
            path,
            stop[1] if stop else last.loops[-1].lineno,
        )
    )


_REGROUPS = frozenset(
    {"reshape", "view", "permute", "transpose", "flatten", "unflatten", "rearrange", "movedim"}
)


def _regrouped_between_blocks(ctx: ParallelContext, block: ParallelBlockList) -> list[Evidence]:
    """The loop over the cached list regroups the stream between blocks (frames <-> tokens, as
    factorised video transformers do around a temporal block): the split axis is a different
    axis from one block to the next, and the attention after the regroup runs over a sequence
    that is not the split one. A hook plan splits once; refused with the statement."""
    if block.call is None:
        return []
    for loop in block.loops:
        body = [s for s in ast.walk(loop) if isinstance(s, ast.stmt) and s is not loop]
        call_stmt = next(
            (s for s in body if isinstance(s, ast.Assign) and s.value is block.call), None
        )
        if call_stmt is None:
            continue
        streams = {n.id for t in call_stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        for stmt in body:
            if stmt is call_stmt or not isinstance(stmt, ast.Assign):
                continue
            if _mentions_checkpointing(stmt.value):
                continue
            assigned = {n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            regroup = any(
                isinstance(n, ast.Call) and callee_name(n) in _REGROUPS
                for n in ast.walk(stmt.value)
            )
            if assigned & streams and regroup:
                return [
                    Evidence(
                        f"the loop over `{block.attr}` regroups `{sorted(assigned & streams)[0]}` "
                        f"between blocks (line {stmt.lineno}: `{_short(stmt)}`): the split axis "
                        "changes from one block to the next, and attention after the regroup "
                        "runs over a sequence that is not the split one; a hook plan splits "
                        "once, so context parallelism is not generated",
                        ctx.path,
                        stmt.lineno,
                    )
                ]
    return []


def _mentions_checkpointing(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return "gradient_checkpointing" in text


def _last_loop_end(cached: list[ParallelBlockList]) -> int:
    """The last line of the last loop over a cached list."""
    ends = (
        getattr(loop, "end_lineno", loop.lineno) or loop.lineno for b in cached for loop in b.loops
    )
    return max(ends, default=0)


def _read_after_loops(flow: ForwardFlow, cached: list[ParallelBlockList]) -> frozenset[str]:
    """Names `forward` reads after the last loop over a cached list (before any rebinding)."""
    last_loop = _last_loop_end(cached)
    out: set[str] = set()
    rebound: set[str] = set()
    for stmt in flow.statements:
        if stmt.lineno <= last_loop:
            continue
        out |= _own_reads(stmt) - rebound
        rebound |= set(_targets(stmt))
    return frozenset(out)


def _split_values_after_gather(
    ctx: ParallelContext, flow: ForwardFlow, plan: HookPlan, cached: list[ParallelBlockList]
) -> list[Evidence]:
    """A module output split in place (`split_output`) stays this rank's slice for the rest of
    `forward`: a read after the gather (by blocks the plan does not split, by the output head)
    sees local positions next to a whole sequence. No hook can give both: refused."""
    split_modules = {
        key
        for key, inputs in plan.splits.items()
        if any(
            s.split_output
            for spec in inputs.values()
            for s in (spec if isinstance(spec, tuple) else (spec,))
        )
    }
    if not split_modules or not plan.gathers:
        return []
    last_loop = _last_loop_end(cached)
    gather_line = max(
        (last_loop if ".<" in key or not g.line else g.line) for key, g in plan.gathers.items()
    )
    names = {t: c.attr for c in flow.module_calls if c.attr in split_modules for t in c.targets}
    out: list[Evidence] = []
    for stmt in flow.statements:
        if stmt.lineno <= gather_line:
            continue
        for name in sorted(_own_reads(stmt) & set(names)):
            out.append(
                Evidence(
                    f"`{name}` (the output of `self.{names[name]}`) is split in place for the "
                    f"blocks, but `forward` reads it again after the gather (line {stmt.lineno}: "
                    f"`{_short(stmt)}`), where the sequence is whole: no hook plan gives both; "
                    "context parallelism is not generated",
                    ctx.path,
                    stmt.lineno,
                )
            )
            del names[name]
        for target in _targets(stmt):
            names.pop(target, None)  # reassigned: later reads see a new value
        if not names:
            break
    return out


_OTHER_STREAM_WORDS = ("encoder", "text", "txt", "cond", "prompt", "context", "ctx", "caption")
_KEY_MASK_WORDS = ("attention_mask", "attn_mask")


_MASK_BUILDERS = ("zeros", "ones", "full", "empty")


def _split_token_masks(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    split_vars: list[str],
) -> list[Evidence]:
    """A mask forward builds over the split stream's tokens (`torch.zeros(b, x.shape[1])`, then
    filled by position) that the blocks use only for per-token work, never as an attention mask
    (a modulation chosen per token): it is split with the tokens at every block, on the axis
    built from the stream's length. Masks that also reach attention stay whole and are judged by
    `_whole_token_masks`; masks a caller passes have no shape forward shows, so they are not
    split on a guess."""
    if set(plan.splits.get("", {})):
        return []  # under a root split the mask is built from the local length already
    out: list[Evidence] = []
    uses: tuple[dict[str, tuple[int, str, bool]], set[str]] | None = None
    for param, expr in bound.items():
        name = _name(expr)
        if name is None or name in split_vars:
            continue
        if not (_is_mask(param.lower()) or _is_mask(name.lower())):
            continue
        axis = _token_axis(flow, name, split_vars)
        if axis is None:
            continue
        if uses is None:
            uses = _per_token_uses(ctx, block)
        per_token, to_attention = uses
        if param not in per_token or param in to_attention:
            continue
        split_dim, dims = axis
        line, use, _ = per_token[param]
        where = block.call.lineno if block.call else 1
        plan.split(
            f"{block.attr}.*",
            param,
            SplitInput(
                split_dim,
                dims,
                reason=f"`{name}` marks the split stream's tokens; the blocks use it per token",
                line=where,
            ),
        )
        out.append(
            Evidence(
                f"split `{name}` (as `{param}`) with the tokens at every block: forward builds it "
                f"over the split stream's length (axis {split_dim}) and the blocks use it only "
                f"for per-token work (line {line}: `{use}`), never as an attention mask",
                ctx.path,
                where,
            )
        )
    return out


def _token_axis(flow: ForwardFlow, name: str, split_vars: list[str]) -> tuple[int, int] | None:
    """(axis, rank) of a mask forward builds with `torch.zeros/ones/full/empty(...)` whose sizes
    include the split stream's length (`x.shape[1]`, `x.size(1)`): the one axis measured on a
    split stream. None when the mask is built any other way or reassigned whole."""
    value = None
    for stmt in flow.statements:
        if stmt.lineno >= flow.first_loop_line:
            break
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in stmt.targets
        ):
            value = stmt.value  # a rebinding (`mask[:, a:b] = 1` writes into it)
    if not (isinstance(value, ast.Call) and callee_name(value) in _MASK_BUILDERS):
        return None
    sizes = list(value.args)
    if len(sizes) == 1 and isinstance(sizes[0], ast.Tuple | ast.List):
        sizes = list(sizes[0].elts)
    if len(sizes) < 2 or any(isinstance(a, ast.Starred) for a in sizes):
        return None
    measured = [
        i
        for i, size in enumerate(sizes)
        if any(
            isinstance(n, ast.Attribute | ast.Call)
            and (
                (isinstance(n, ast.Attribute) and n.attr == "shape")
                or (isinstance(n, ast.Call) and callee_name(n) == "size")
            )
            and names_read(n) & set(split_vars)
            for n in ast.walk(size)
        )
        and _measures_tokens(size)
    ]
    return (measured[0], len(sizes)) if len(measured) == 1 else None


def _measures_tokens(size: ast.expr) -> bool:
    """`x.shape[1]` / `x.size(1)`: the sequence axis of a (B, S, C) stream."""
    if isinstance(size, ast.Subscript) and isinstance(size.slice, ast.Constant):
        return size.slice.value == 1
    if isinstance(size, ast.Call) and size.args and isinstance(size.args[0], ast.Constant):
        return size.args[0].value == 1
    return False


def _masks_marked_by_position(
    ctx: ParallelContext, flow: ForwardFlow, streams: set[str]
) -> list[Evidence]:
    """A mask built over the stream's length and then written by token position
    (`mask[:, start:end] = 1`): under a root split it would have this rank's length and every
    rank would count positions from 0, marking the wrong tokens."""
    for stmt in flow.statements:
        if stmt.lineno >= flow.first_loop_line:
            break
        if not isinstance(stmt, ast.Assign):
            continue
        for target in stmt.targets:
            if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
                continue
            name = target.value.id
            if not _is_mask(name.lower()) or _token_axis(flow, name, sorted(streams)) is None:
                continue
            return [
                Evidence(
                    f"`{_short(stmt)}` marks tokens of `{name}` by position, a mask built "
                    "over the stream's length: under a root split every rank would count "
                    "positions from 0",
                    ctx.path,
                    stmt.lineno,
                )
            ]
    return []


def _attention_masks_from_lengths(
    ctx: ParallelContext,
    flow: ForwardFlow,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    stream_vars: list[str | None],
) -> list[Evidence]:
    """A mask forward builds from a stream's length (`torch.ones(b, img.shape[1])` joined with
    the text mask) that the blocks hand to attention: a root split would build it from this
    rank's length while the attention's keys span every rank's tokens. A split at the first
    block keeps it whole: a root blocker, not a refusal."""
    streams = {v for v in stream_vars if v}
    uses: tuple[dict[str, tuple[int, str, bool]], set[str]] | None = None
    for param, expr in bound.items():
        name = _name(expr)
        if (
            name is None
            or name in streams
            or not (_is_mask(param.lower()) or _is_mask(name.lower()))
        ):
            continue
        measured = flow.shape_derived.get(name, set()) & streams
        if not measured:
            continue
        if uses is None:
            uses = _per_token_uses(ctx, block)
        if param not in uses[1]:
            continue
        return [
            Evidence(
                f"`{name}` is built from the length of `{sorted(measured)[0]}` and reaches "
                f"attention (as `{param}`): a root split would give it this rank's length, "
                "while the keys span every rank's tokens; split at the first block instead",
                ctx.path,
                block.call.lineno if block.call else 1,
            )
        ]
    return []


def _whole_token_masks(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    split_vars: list[str],
) -> list[tuple[bool, Evidence]]:
    """A mask over the split stream's tokens that the blocks receive whole, and that a block uses
    for per-token work (a modulation chosen per token, a multiply after attention), not only as
    the attention mask: that work sees this rank's tokens next to a mask of every token. As an
    attention mask it is right whole (the keys are whole inside the all-to-all attention); for the
    per-token work it would need this rank's slice. No hook gives both: refused with the reason.
    Masks of the text stream are left alone (the text is whole inside the attention).

    (optional, evidence) pairs: `optional` when the block skips the per-token work for a None
    mask and forward may pass None (a mode the plan still serves; a caution, not a refusal)."""
    planned = set().union(*(set(plan.splits.get(k, {})) for k in _block_keys(block)))
    root = set(plan.splits.get("", {}))
    out: list[tuple[bool, Evidence]] = []
    uses: tuple[dict[str, tuple[int, str, bool]], set[str]] | None = None
    for param, expr in bound.items():
        name = _name(expr)
        if name is None or name in split_vars or param in planned:
            continue
        if not (_is_mask(param.lower()) or _is_mask(name.lower())):
            continue
        if any(w in n.lower() for n in (param, name) for w in _OTHER_STREAM_WORDS):
            continue
        sources = flow.derived.get(name, {name})
        if sources & root:
            continue  # split at the root with the tokens
        measured = flow.shape_derived.get(name, set()) & set(split_vars)
        given = {s for s in sources if s in flow.params and s != flow.hidden}
        if not measured and not given:
            continue
        if uses is None:
            uses = _per_token_uses(ctx, block)
        per_token, to_attention = uses
        where = block.call.lineno if block.call else 1
        if measured and root:
            # under a root split the stream is local before the mask is built: the mask has
            # this rank's length, right for per-token work, wrong for attention over all keys
            if param in to_attention:
                out.append((False, Evidence(
                    f"`{name}` is built from the length of `{sorted(measured)[0]}`, which the "
                    f"root split has made this rank's length, and the blocks pass it (as "
                    f"`{param}`) to attention, whose keys span every rank's tokens; context "
                    "parallelism is not generated",
                    ctx.path,
                    where,
                )))  # fmt: skip
            continue
        if param not in per_token:
            continue
        line, use, guarded = per_token[param]
        optional = guarded and _may_be_none(flow, name)
        why = (
            f"built from the length of `{sorted(measured)[0]}`"
            if measured
            else f"passed in by the caller as `{sorted(given)[0]}`"
        )
        outcome = (
            "the plan holds only while it is None (the blocks skip that work then); "
            "context parallelism fails when it is given"
            if optional
            else "context parallelism is not generated"
        )
        message = (
            f"`{name}` ({why}) covers every token of the split stream, and the blocks use it "
            f"as `{param}` for per-token work (line {line}: `{use}`) besides any attention "
            f"mask: that work needs this rank's slice, an attention mask the whole; {outcome}"
        )
        out.append((optional, Evidence(message, ctx.path, where)))
    return out


def _whole_sizes(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    split_vars: list[str],
) -> list[Evidence]:
    """Sizes forward measured on the whole stream (`(frames, height, width)` of the patchified
    latent) handed to blocks that the plan gives this rank's tokens: a block that reshapes by
    them breaks. Refused (a hook cannot rewrite a size)."""
    planned = set().union(*(set(plan.splits.get(k, {})) for k in _block_keys(block)))
    # the split streams and what they are computed from (`x = embed(latents)`: latents' sizes)
    origins = set(split_vars).union(*(flow.derived.get(v, set()) for v in split_vars))
    out: list[Evidence] = []
    for param, expr in bound.items():
        if param in planned or _name(expr) in split_vars:
            continue
        if not isinstance(expr, ast.Tuple):
            continue
        sized = sorted(
            e.id
            for e in expr.elts
            if isinstance(e, ast.Name)
            and flow.shape_derived.get(e.id, set()) & origins
            and _is_plain_size(flow, e.id)
        )
        if sized:
            out.append(
                Evidence(
                    f"the blocks receive `{_short(expr)}` as `{param}`: sizes measured on the "
                    f"whole `{sorted(flow.shape_derived[sized[0]] & origins)[0]}`, while "
                    "the plan gives them this rank's tokens; context parallelism is not generated",
                    ctx.path,
                    block.call.lineno if block.call else 1,
                )
            )
    return out


_SIZE_CALLS = ("int", "len", "round", "max", "min", "ceil", "floor")


def _is_plain_size(flow: ForwardFlow, name: str) -> bool:
    """A number forward computes from shapes (`t = x.shape[2] // p`), not a tensor built with
    one (`freqs = self.rope(x.shape[1])`)."""
    value = None
    for stmt in flow.statements:
        if stmt.lineno >= flow.first_loop_line:
            break
        if isinstance(stmt, ast.Assign) and name in _targets(stmt):
            value = stmt.value
    if value is None:
        return False
    calls = [n for n in ast.walk(value) if isinstance(n, ast.Call)]
    return all(callee_name(c) in _SIZE_CALLS for c in calls)


def _may_be_none(flow: ForwardFlow, name: str) -> bool:
    """Whether forward may hand the blocks None for `name`: it comes from a parameter that
    defaults to None, or forward assigns None to it somewhere."""
    if name in flow.optional or flow.derived.get(name, set()) & flow.optional:
        return True
    return any(
        isinstance(stmt, ast.Assign)
        and name in _targets(stmt)
        and (
            (isinstance(stmt.value, ast.Constant) and stmt.value.value is None)
            or (
                isinstance(stmt.value, ast.IfExp)
                and any(
                    isinstance(v, ast.Constant) and v.value is None
                    for v in (stmt.value.body, stmt.value.orelse)
                )
            )
        )
        for stmt in flow.statements
    )


def _per_token_uses(
    ctx: ParallelContext, block: ParallelBlockList
) -> tuple[dict[str, tuple[int, str, bool]], set[str]]:
    """Block `forward` parameters (and the masks derived from them alone, such as a pairwise
    `m[:, None] * m[:, :, None]`) used other than as an attention argument: passed to a
    `self.<attn…>(...)` call or as `attention_mask=` / `attn_mask=` (also as such a dict key),
    or tested against None. param -> (line, statement, whether the use sits under
    `if param is not None:`), and the parameters that reach an attention argument."""
    found = ctx.resolver.find_method(block.block, "forward")
    if found is None:
        return {}, set()
    func = found[0]
    params = [a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs]
    allowed: set[int] = set()  # ids of Name nodes in an attention-argument position
    for node in walk_local(func):
        if isinstance(node, ast.Call):
            callee = self_attr(node.func) if isinstance(node.func, ast.Attribute) else None
            to_attention = bool(callee) and any(
                w in str(callee).lower() for w in ("attn", "attention")
            )
            for arg in node.args:
                if to_attention:
                    allowed.update(_mask_expression(arg))
            for kw in node.keywords:
                if "post" not in str(kw.arg) and (
                    to_attention or any(w in str(kw.arg) for w in _KEY_MASK_WORDS)
                ):
                    allowed.update(_mask_expression(kw.value))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=False):
                if isinstance(key, ast.Constant) and any(
                    w in str(key.value) for w in _KEY_MASK_WORDS
                ):
                    allowed.update(_mask_expression(value))
        elif isinstance(node, ast.Compare) and all(
            isinstance(op, ast.Is | ast.IsNot) for op in node.ops
        ):
            allowed.update(id(n) for n in ast.walk(node) if isinstance(n, ast.Name))
    statements = sorted(
        (n for n in walk_local(func) if isinstance(n, ast.stmt) and n is not func),
        key=lambda n: n.lineno,
    )
    guards: dict[str, list[tuple[int, int]]] = {}
    for node in walk_local(func):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name)
            and len(node.test.ops) == 1
            and isinstance(node.test.ops[0], ast.IsNot)
            and isinstance(node.test.comparators[0], ast.Constant)
            and node.test.comparators[0].value is None
            and node.body
        ):
            end = max(getattr(b, "end_lineno", b.lineno) or b.lineno for b in node.body)
            guards.setdefault(node.test.left.id, []).append((node.body[0].lineno, end))
    out: dict[str, tuple[int, str, bool]] = {}
    to_attention: set[str] = set()
    for param in params[1:]:
        tracked = {param}
        for stmt in statements:
            if isinstance(stmt, ast.If | ast.While):
                parts: list[ast.AST] = [stmt.test]
            elif isinstance(stmt, ast.For):
                parts = [stmt.iter]
            elif isinstance(stmt, ast.With | ast.Try | ast.FunctionDef | ast.AsyncFunctionDef):
                parts = []
            else:
                parts = [stmt]
            reads = {
                n
                for part in parts
                for n in ast.walk(part)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in tracked
            }
            used = [n for n in reads if id(n) not in allowed]
            if len(used) < len(reads) and not isinstance(stmt, ast.If | ast.While):
                to_attention.add(param)
            if not used:
                continue
            if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
                called = {
                    n.func.id
                    for n in ast.walk(stmt.value)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                }
                others = data_names(stmt.value) - tracked - called - {"self", "torch", "F", "nn"}
                if not others:  # derived from the mask alone: still a mask
                    tracked |= set(_targets(stmt)) | (
                        {stmt.target.id}
                        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                        else set()
                    )
                    continue
            guarded = any(a <= stmt.lineno <= b for a, b in guards.get(param, ()))
            out.setdefault(param, (stmt.lineno, _short(stmt), guarded))
    return out, to_attention


def _mask_expression(expr: ast.expr) -> set[int]:
    """Ids of the Name nodes of an argument that only reshapes or converts one value
    (`m`, `m[:, None, None, :].bool()`, `m.to(x.dtype)`): arithmetic mixes in other data."""
    if any(isinstance(n, ast.BinOp | ast.Compare | ast.BoolOp) for n in ast.walk(expr)):
        return set()
    meta = {id(n.value) for n in ast.walk(expr) if isinstance(n, ast.Attribute) and n.attr in (
        "dtype", "device", "shape")}  # fmt: skip
    names = [
        n
        for n in ast.walk(expr)
        if isinstance(n, ast.Name) and id(n) not in meta and n.id != "self"
    ]
    return {id(n) for n in names} if len({n.id for n in names}) == 1 else set()


def _own_reads(stmt: ast.stmt) -> set[str]:
    """Names a statement reads itself (a compound statement: its header only; its body
    statements are visited on their own)."""
    if isinstance(stmt, ast.For | ast.AsyncFor):
        return names_read(stmt.iter)
    if isinstance(stmt, ast.If | ast.While):
        return names_read(stmt.test)
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return set().union(*(names_read(i.context_expr) for i in stmt.items))
    if isinstance(stmt, ast.Try | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return set()
    return names_read(stmt)


def _gather_point(
    flow: ForwardFlow, tracked: set[str], local_lengths: bool
) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
    """(module, line) of the last token-local module on `tracked` after the loops, and the first
    op that needs the whole sequence."""
    candidate: tuple[str, int] | None = None
    stop: tuple[str, int] | None = None
    tracked = set(tracked)
    for stmt in flow.statements:
        if stmt.lineno <= flow.last_loop_end or not isinstance(stmt, ast.Assign | ast.Return):
            continue
        value = stmt.value
        if value is None or not data_names(value) & tracked:
            continue
        module = _module_on(value, tracked, flow)
        op = is_sequence_global(value, tracked, local_lengths)
        if module and not op:
            candidate = (module, stmt.lineno)
        elif op:
            stop = (op, stmt.lineno)
            break
        if isinstance(stmt, ast.Assign):
            tracked |= {n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return candidate, stop


def _module_on(value: ast.expr, tracked: set[str], flow: ForwardFlow) -> str | None:
    """The outermost `self.<module>(...)` call applied to a tracked variable."""
    for node in ast.walk(value):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        attr = (
            func.attr
            if isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
            else None
        )
        if (
            attr is None
            and isinstance(func, ast.Subscript)
            and isinstance(func.value, ast.Attribute)
        ):
            attr = func.value.attr
        if attr and attr in flow.constructors and any(data_names(a) & tracked for a in node.args):
            return attr
    return None


def _targets(stmt: ast.stmt) -> list[str]:
    if not isinstance(stmt, ast.Assign):
        return []
    return [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _short(stmt: ast.AST, limit: int = 80) -> str:
    text = ast.unparse(stmt).split("\n")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def mask_reorder_plan(
    ctx: ParallelContext, plan: HookPlan, joint_order: tuple[str, str] | None
) -> dict[str, Any] | None:
    """Where a mask over separately split streams is permuted into all-to-all order: the first
    cached list's blocks, their mask parameter and their two stream parameters split at
    `<list>.0`, in the order the attention joins them (`joint_order`, from the processor). None
    when any of these is not read exactly (the CP part is then refused)."""
    main = ctx.cached_lists[0] if ctx.cached_lists else None
    if joint_order is None or main is None or main.call is None:
        return None
    # only the first list runs on the split sequence (gathered at its last block): later lists
    # get the whole sequence and the mask as forward built it
    if not plan.gathers or any(not k.startswith(f"{main.attr}.") for k in plan.gathers):
        return None
    params = _block_params(ctx, main)
    bound = _bound_args(main.call, params)
    streams = list(plan.splits.get(f"{main.attr}.0", {}))
    if len(streams) != 2 or any(
        k.startswith(f"{main.attr}.")
        and k not in (f"{main.attr}.0", f"{main.attr}.*")
        and ".<" not in k
        for k in plan.splits
    ):
        return None
    kinds = {
        name: ("encoder" if any(w in name.lower() for w in _OTHER_STREAM_WORDS) else "hidden")
        for name in streams
    }
    if sorted(kinds.values()) != ["encoder", "hidden"]:
        return None
    ordered = [next(n for n in streams if kinds[n] == kind) for kind in joint_order]
    masks = [
        p
        for p, expr in bound.items()
        if p in params and (_is_mask(p.lower()) or _is_mask((_name(expr) or "").lower()))
    ]
    if len(masks) != 1:
        return None
    return {"list": main.attr, "mask": masks[0], "streams": ordered, "line": main.call.lineno}


__all__ = ["EACH", "LAST", "PlanDraft", "build_plan", "call_name", "mask_reorder_plan"]
