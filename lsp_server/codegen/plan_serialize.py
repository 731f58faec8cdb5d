"""`IntegrationPlan` -> its contract document (`cdit_runtime.contract.plan.PlanDocument`).

The inverse of `plan_parse.parse_plan`; `IntegrationPlan.to_json` writes the document through the
contract codec (`to_json`: camelCase keys in the document's order). What differs from codegen's
own dataclasses is spelled here: the PatchFunctor and the mask guard as objects, the SDPA routes
and kernel flags as objects, the parts refused with their labels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdit_runtime.contract.plan import (
    PlanAxisGuard,
    PlanAxisInput,
    PlanAxisSplit,
    PlanAxisTable,
    PlanBlockList,
    PlanCache,
    PlanComponent,
    PlanContextParallel,
    PlanDocument,
    PlanExample,
    PlanFunctorReason,
    PlanKernelFlag,
    PlanMaskGuard,
    PlanMaskReorder,
    PlanModel,
    PlanPatchFunctor,
    PlanRearrangement,
    PlanRefusedPart,
    PlanSdpaRoute,
    PlanSources,
    PlanStreamMask,
    PlanTarget,
    PlanTensorParallel,
)

if TYPE_CHECKING:  # the dataclasses call into this module: no import back at run time
    from .plan_model import (
        BlockListPlan,
        CachePlan,
        ComponentPlan,
        ContextParallelPlan,
        ExamplePlan,
        IntegrationPlan,
        ModelInfo,
        TensorParallelPlan,
    )


def plan_document(plan: IntegrationPlan) -> PlanDocument:
    """The whole document, with the parts the plan refuses (`refused`: part, label, reasons)."""
    return PlanDocument(
        schema_version=plan.schema_version,
        model=model_document(plan.model),
        register_name=plan.register_name,
        model_slug=plan.model_slug,
        target=PlanTarget(kind=plan.target.kind, path=plan.target.path, root=plan.target.root),
        cache=cache_document(plan.cache),
        context_parallel=context_parallel_document(plan.context_parallel),
        tensor_parallel=tensor_parallel_document(plan.tensor_parallel),
        components=[component_document(c) for c in plan.components],
        example=example_document(plan.example),
        provenance=dict(plan.provenance),
        refused=[
            PlanRefusedPart(part=part, label=plan.part_label(part), reasons=list(reasons))
            for part, reasons in plan.refused.items()
        ],
    )


def model_document(m: ModelInfo) -> PlanModel:
    return PlanModel(
        transformer_class=m.transformer_class,
        transformer_module=m.transformer_module,
        pipeline_class=m.pipeline_class,
        local_path=m.local_path,
        default_model_id=m.default_model_id,
        is_diffusers_model=m.is_diffusers_model,
        sources=PlanSources(
            transformer=m.sources.transformer,
            pipeline=m.sources.pipeline,
            config=m.sources.config,
            model_index=m.sources.model_index,
        ),
    )


def cache_document(cache: CachePlan) -> PlanCache:
    reasons = [
        PlanFunctorReason(
            kind=r.kind,
            message=r.message,
            line=r.line,
            block_list=r.block_list,
            severity=r.severity,
        )
        for r in cache.functor_reasons
    ]
    return PlanCache(
        block_lists=[block_list_document(b) for b in cache.block_lists],
        enabled=cache.enabled,
        has_separate_cfg=cache.has_separate_cfg,
        patch_functor=PlanPatchFunctor(enabled=cache.patch_functor, reasons=reasons),
    )


def block_list_document(b: BlockListPlan) -> PlanBlockList:
    return PlanBlockList(
        attr=b.attr,
        forward_pattern=b.forward_pattern,  # type: ignore[arg-type]  # checked by parse_plan
        check_forward_pattern=b.check_forward_pattern,
        check_num_outputs=b.check_num_outputs,
        block_class=b.block_class,
        block_class_path=b.block_class_path,
        block_class_line=b.block_class_line,
        continues=b.continues,
        container=b.container,  # type: ignore[arg-type]  # checked by parse_plan
    )


def context_parallel_document(cp: ContextParallelPlan) -> PlanContextParallel:
    guard = cp.mask_guard_params
    mask_guard = PlanMaskGuard(params=list(guard), reason=cp.mask_guard_reason) if guard else None
    reorder = cp.mask_reorder
    mask_reorder = (
        None
        if reorder is None
        else PlanMaskReorder(
            list_=reorder.list_attr, mask=reorder.mask, streams=list(reorder.streams)
        )
    )
    return PlanContextParallel(
        enabled=cp.enabled,
        approach=cp.approach,
        plan=dict(cp.plan),
        ulysses_anything=cp.ulysses_anything,
        patches=list(cp.patches),
        ring_unsupported=cp.ring_unsupported,
        mask_guard=mask_guard,
        not_possible=cp.not_possible,
        ring_masks=cp.ring_masks,
        sdpa_routes=[
            PlanSdpaRoute(class_=cls, owner=owner, names=list(names))  # type: ignore[arg-type]
            for cls, owner, names in cp.sdpa_routes
        ],
        flash_names=list(cp.flash_names),
        kernel_flags=[PlanKernelFlag(class_=c, attr=a, value=v) for c, a, v in cp.kernel_flags],
        mask_reorder=mask_reorder,
        stream_masks=[
            PlanStreamMask(list_=m.list_attr, mask=m.mask, stream=m.stream) for m in cp.stream_masks
        ],
        axis_split=_axis_split_document(cp),
    )


def _axis_split_document(cp: ContextParallelPlan) -> PlanAxisSplit | None:
    split = cp.axis_split
    if split is None:
        return None
    return PlanAxisSplit(
        param=split.param,
        axis=split.axis,
        gather_axis=split.gather_axis,
        routed=list(split.routed),
        local=list(split.local),
        tables=[PlanAxisTable(attr=a, axis=x) for a, x in split.tables],
        guards=[PlanAxisGuard(op=o, value=v) for o, v in split.guards],  # type: ignore[arg-type]
        inputs=[PlanAxisInput(param=n, axis=x) for n, x in split.inputs],
    )


def tensor_parallel_document(tp: TensorParallelPlan) -> PlanTensorParallel:
    return PlanTensorParallel(
        enabled=tp.enabled,
        attention_strategy=tp.attention_strategy,
        layers=dict(tp.layers),  # type: ignore[arg-type]  # styles checked by parse_plan
        shard_div_attrs=list(tp.shard_div_attrs),
        conditional_layers=dict(tp.conditional_layers),
        weight_rearrangement=[
            PlanRearrangement(
                layer=r.layer, kind=r.kind, reason=r.reason, segments=list(r.segments)
            )
            for r in tp.weight_rearrangement
        ],
        distributed_norms=list(tp.distributed_norms),
        dtensor_unsafe=list(tp.dtensor_unsafe),
    )


def component_document(c: ComponentPlan) -> PlanComponent:
    return PlanComponent(
        component=c.component,
        class_=c.class_name,
        kind=c.kind,  # type: ignore[arg-type]  # a refused component keeps what it was given
        library=c.library,
        generate=c.generate,
        source=c.source,
    )


def example_document(e: ExamplePlan | None) -> PlanExample | None:
    if e is None:
        return None
    return PlanExample(
        name=e.name,
        env_var=e.env_var,
        task_type=e.task_type,  # type: ignore[arg-type]  # checked by parse_plan
        prompt=e.prompt,
        height=e.height,
        width=e.width,
        num_frames=e.num_frames,
        num_inference_steps=e.num_inference_steps,
        guidance_scale=e.guidance_scale,
        enable_separate_cfg=e.enable_separate_cfg,
    )
