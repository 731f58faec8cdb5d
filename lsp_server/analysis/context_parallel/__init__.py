"""Context-parallel plan inference: approach, hook plan, masks, UAA and pre-flight warnings.

`infer_context_parallel(ctx)` returns a `ContextParallelResult` whose `to_json()` is the
`contextParallel` part of the analyze contract. Module keys may use `<list>.<last>` for the last
block of a list (code generation resolves it from the model).
"""

from __future__ import annotations

import ast

from ..model import Diagnostic, Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from .diffusers_plan import compare, read_cp_plan
from .factorised_result import factorised_result
from .factorised_split import factorised_split
from .flow import ForwardFlow, read_flow
from .inline_arguments import with_named_arguments
from .mask_planning import masks_with_stream
from .masks import attention_mask
from .modules import AttentionFacts, declared_position_axes, position_output_dims
from .nested_attention import block_attention_facts, no_attention_read
from .plan import PlanDraft, build_plan, mask_reorder_plan, with_expanded_block_calls
from .preflight import evidence_diagnostics, head_checks
from .result import AttentionMask, ContextParallelResult, HookPlan

__all__ = ["ContextParallelResult", "infer_context_parallel"]


def infer_context_parallel(ctx: ParallelContext) -> ContextParallelResult:
    ctx = with_named_arguments(with_expanded_block_calls(ctx))
    flow = read_flow(ctx)
    if flow is None or not ctx.cached_lists:
        return ContextParallelResult(
            "none", HookPlan(), [Evidence("no forward or no cached block list", ctx.path, 1)]
        )
    main = ctx.cached_lists[0]
    attn = block_attention_facts(ctx, main.block)
    _add_other_routes(ctx, attn)
    before = [c for c in flow.module_calls if c.line < flow.first_loop_line]
    rope_dims = position_output_dims(ctx, before)
    shipped = read_cp_plan(ctx.resolver, ctx.transformer)
    if shipped is not None:
        rope_dims = declared_position_axes(rope_dims, shipped[0])
    draft = _without_an_empty_root_split(
        ctx, build_plan(ctx, flow, attn.cross_attention_cp, rope_dims)
    )
    if draft.approach == "none" and ctx.forward is not None:
        split, reasons = factorised_split(ctx, flow)
        if split is not None:
            factorised, reasons = factorised_result(ctx, flow, split, {id(main.block.node): attn})
            if factorised is not None:
                return factorised
        draft.evidence += reasons
        draft.refusals = [*(draft.refusals or []), *reasons]
    # a module whose source is not read may hold the block's attention: it blocks the split
    # when it is named so, or when no attention of the block was read at all
    unread = attn.unread_modules[:1] if attn.unread_attention or not attn.attention_seen else []
    blocking = attn.own_attention[:1] or unread or no_attention_read(ctx, main.block, attn)
    if blocking and not draft.plan.splits and draft.refusals:
        draft.refusals.extend(b for b in blocking if b not in draft.refusals)  # every reason
    if blocking and draft.plan.splits:
        # hooks would split the tokens around an attention no backend runs across ranks (or
        # around a module whose attention, if any, is not known)
        evidence = draft.evidence + blocking
        draft = PlanDraft("none", HookPlan(), evidence, draft.patches, (), blocking)
    mask = attention_mask(ctx, flow, draft.split_streams)
    if mask.reorder_needed and draft.plan.splits:
        mask.reorder_plan = mask_reorder_plan(ctx, draft.plan, attn.joint_order)
    if mask.present and draft.plan.splits:
        mask.with_stream = masks_with_stream(ctx, flow, draft.plan, main)
    result = ContextParallelResult(
        approach=draft.approach,
        plan=draft.plan,
        evidence=draft.evidence,
        attention_mask=mask,
        patches=list(dict.fromkeys(draft.patches + attn.needs_processor_patch)),
        sdpa_routes=list(attn.sdpa_routes),
    )
    if len(draft.split_streams) >= 2:  # the other input may be split too: local is not known
        result.patches += attn.local_cross[:1]
    if mask.present and attn.masks:
        result.mask_patches += attn.masks[:1]
    warnings = _preflight_warnings(ctx, draft, attn)
    if _splits_text(draft):
        result.uaa_recommended = True
        warnings.append(_uaa_warning(ctx))
    warnings += _block_split_warnings(ctx, draft, main)
    warnings += _optional_entry_warnings(ctx, draft, flow)
    if mask.present and attn.masks:
        warnings += evidence_diagnostics("CDIT219", "warning", attn.masks[:1])
    if mask.reorder_needed:
        warnings.append(_mask_reorder_warning(ctx, mask))
    if shipped is not None:
        plan, line = shipped
        result.diffusers_plan = plan
        for diff in compare(plan, draft.plan):
            warnings.append(Diagnostic("info", "CDIT218", f"_cp_plan: {diff}", ctx.path, line))
    result.warnings = warnings
    return result


def _without_an_empty_root_split(ctx: ParallelContext, draft: PlanDraft) -> PlanDraft:
    """A root split that found no input of forward to split (the stream the blocks receive is
    not traced to one: blocks run by a helper method written above forward, whose lines the
    reading compared with forward's) would run the whole sequence on every rank and gather
    copies of it (an output twice as long): refused with that reason."""
    if draft.approach not in ("root_split", "output_split") or draft.plan.splits.get(""):
        return draft
    helper = _loop_method(ctx)
    where = f" (the blocks run in `self.{helper}(...)`, not in forward)" if helper else ""
    why = Evidence(
        "the root split found no input of forward to split: the stream the blocks receive is "
        f"not traced to a parameter of forward{where}; every rank would run the whole sequence "
        "and the gather would join copies of it",
        ctx.path,
        _forward_line(ctx),
    )
    return PlanDraft("none", HookPlan(), [*draft.evidence, why], draft.patches, (), [why])


def _loop_method(ctx: ParallelContext) -> str | None:
    """The method other than forward of the transformer's class whose body holds the first
    cached list's loop (`_run_blocks`), if any."""
    loops = {id(loop) for loop in ctx.cached_lists[0].loops} if ctx.cached_lists else set()
    for ancestor in ctx.resolver.iter_mro(ctx.transformer):
        for func in ancestor.node.body if ancestor.node is not None else ():
            if not isinstance(func, ast.FunctionDef) or func.name == "forward":
                continue
            if any(id(node) in loops for node in ast.walk(func)):
                return func.name
    return None


def _add_other_routes(ctx: ParallelContext, attn: AttentionFacts) -> None:
    """SDPA calls of the other cached lists' blocks (a single-stream list after a double-stream
    one): routed as well (the generated routing acts only inside the split region)."""
    seen = {ctx.cached_lists[0].block.name}
    for other in ctx.cached_lists[1:]:
        if other.block.name in seen:
            continue
        seen.add(other.block.name)
        facts = block_attention_facts(ctx, other.block)
        known = {r.class_name for r in attn.sdpa_routes}
        for route in facts.sdpa_routes:
            if route.class_name not in known:
                attn.sdpa_routes.append(route)
                attn.needs_processor_patch.append(route.evidence)


def _forward_line(ctx: ParallelContext) -> int:
    return ctx.forward.lineno if ctx.forward else 1


def _preflight_warnings(
    ctx: ParallelContext, draft: PlanDraft, attn: AttentionFacts
) -> list[Diagnostic]:
    """Head checks, refusals, cautions, processors to patch and GQA."""
    warnings: list[Diagnostic] = head_checks(ctx)
    warnings += evidence_diagnostics("CDIT220", "warning", draft.refusals or [])
    warnings += evidence_diagnostics("CDIT221", "warning", draft.cautions)
    warnings += evidence_diagnostics(
        "CDIT215", "warning", attn.needs_processor_patch[:1] + attn.third_party_attention
    )
    warnings += evidence_diagnostics("CDIT213", "warning", attn.gqa[:1])
    return warnings


def _splits_text(draft: PlanDraft) -> bool:
    """Whether the plan splits a text (encoder) sequence, whose length the prompt decides."""
    return len(draft.split_streams) >= 2 or any(
        key.endswith(".*") and any("encoder" in name for name in specs)
        for key, specs in draft.plan.splits.items()
    )


def _uaa_warning(ctx: ParallelContext) -> Diagnostic:
    return Diagnostic(
        "warning",
        "CDIT212",
        "the split sequence length depends on the prompt and resolution: enable UAA "
        "(ParallelismConfig(ulysses_anything=True)) unless every length divides by the "
        "CP size",
        ctx.path,
        _forward_line(ctx),
    )


def _block_split_warnings(
    ctx: ParallelContext, draft: PlanDraft, main: ParallelBlockList
) -> list[Diagnostic]:
    block_keys = [k for k in draft.plan.splits if k.endswith((".0", ".*")) or ".<" in k]
    if not block_keys:
        return []
    return [
        Diagnostic(
            "warning",
            "CDIT214",
            f"the plan splits at a block ({', '.join(block_keys)}): with DBCache this can "
            "crash in cache-dit 1.5.x (residual shapes differ); prefer a root split when "
            "cache and CP must run together, or check both on a 2-process CPU run",
            ctx.path,
            main.loops[0].lineno,
        )
    ]


def _optional_entry_warnings(
    ctx: ParallelContext, draft: PlanDraft, flow: ForwardFlow
) -> list[Diagnostic]:
    """Inputs split at the transformer entry that forward defaults to None."""
    return [
        Diagnostic(
            "warning",
            "CDIT216",
            f"the plan splits `{name}` at the transformer entry but forward defaults it to "
            "None: the caller must always pass it (cache-dit raises when it is omitted)",
            ctx.path,
            _forward_line(ctx),
        )
        for name in sorted(draft.plan.splits.get("", {}))
        if name in flow.optional
    ]


def _mask_reorder_warning(ctx: ParallelContext, mask: AttentionMask) -> Diagnostic:
    placed = mask.reorder_plan
    return Diagnostic(
        "info" if placed else "warning",
        "CDIT217",
        "an attention mask covers text and image tokens that are split separately: it must "
        "be permuted into all-to-all order ([t0, i0, t1, i1, ...]) or the top-left of the "
        "image corrupts; "
        + (
            f"the generated module permutes `{placed['mask']}` at every block of "
            f"`{placed['list']}` (streams joined as {', '.join(placed['streams'])})"
            if placed
            else "the permutation cannot be placed here (the split region spans more "
            "than one block list, or the order the attention joins the streams is not "
            "read), so context parallelism is not generated"
        ),
        ctx.path,
        mask.sources[0].line if mask.sources else 1,
    )
