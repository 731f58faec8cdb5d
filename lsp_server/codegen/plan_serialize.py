"""`IntegrationPlan` -> its JSON document (``schemaVersion`` 1, camelCase keys), section by section.

The inverse of `plan_parse.parse_plan`; `IntegrationPlan.to_json` calls `plan_json`. The key
order is the document's (the UI and the tests read it as written).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the dataclasses call into this module: no import back at run time
    from .plan_model import (
        BlockListPlan,
        CachePlan,
        ComponentPlan,
        ContextParallelPlan,
        ExamplePlan,
        FunctorReason,
        IntegrationPlan,
        ModelInfo,
        Rearrangement,
        Target,
        TensorParallelPlan,
    )


def plan_json(plan: IntegrationPlan) -> dict[str, Any]:
    """The whole document, with the parts the plan refuses (`refused`: part, label, reasons)."""
    return {
        "schemaVersion": plan.schema_version,
        "model": model_json(plan.model),
        "registerName": plan.register_name,
        "modelSlug": plan.model_slug,
        "target": target_json(plan.target),
        "cache": cache_json(plan.cache),
        "contextParallel": context_parallel_json(plan.context_parallel),
        "tensorParallel": tensor_parallel_json(plan.tensor_parallel),
        "components": [component_json(c) for c in plan.components],
        "example": example_json(plan.example),
        "provenance": dict(plan.provenance),
        "refused": [
            {"part": part, "label": plan.part_label(part), "reasons": list(reasons)}
            for part, reasons in plan.refused.items()
        ],
    }


def model_json(m: ModelInfo) -> dict[str, Any]:
    return {
        "transformerClass": m.transformer_class,
        "transformerModule": m.transformer_module,
        "pipelineClass": m.pipeline_class,
        "localPath": m.local_path,
        "defaultModelId": m.default_model_id,
        "isDiffusersModel": m.is_diffusers_model,
        "sources": {
            "transformer": m.sources.transformer,
            "pipeline": m.sources.pipeline,
            "config": m.sources.config,
            "modelIndex": m.sources.model_index,
        },
    }


def target_json(target: Target) -> dict[str, Any]:
    """`kind`, and `path` / `root` where set."""
    return (
        {"kind": target.kind}
        | ({"path": target.path} if target.path is not None else {})
        | ({"root": target.root} if target.root is not None else {})
    )


def cache_json(cache: CachePlan) -> dict[str, Any]:
    return {
        "blockLists": [block_list_json(b) for b in cache.block_lists],
        "enabled": cache.enabled,
        "hasSeparateCfg": cache.has_separate_cfg,
        "patchFunctor": {
            "enabled": cache.patch_functor,
            "reasons": [functor_reason_json(r) for r in cache.functor_reasons],
        },
    }


def block_list_json(b: BlockListPlan) -> dict[str, Any]:
    return {
        "attr": b.attr,
        "forwardPattern": b.forward_pattern,
        "checkForwardPattern": b.check_forward_pattern,
        "checkNumOutputs": b.check_num_outputs,
        "blockClass": b.block_class,
        "blockClassPath": b.block_class_path,
        "blockClassLine": b.block_class_line,
        "continues": b.continues,
        "container": b.container,
    }


def functor_reason_json(r: FunctorReason) -> dict[str, Any]:
    return {
        "kind": r.kind,
        "message": r.message,
        "line": r.line,
        "blockList": r.block_list,
        "severity": r.severity,
    }


def context_parallel_json(cp: ContextParallelPlan) -> dict[str, Any]:
    return {
        "enabled": cp.enabled,
        "approach": cp.approach,
        "plan": dict(cp.plan),
        "ulyssesAnything": cp.ulysses_anything,
        "patches": list(cp.patches),
        "ringUnsupported": cp.ring_unsupported,
        "maskGuard": guard_json(cp.mask_guard_params, cp.mask_guard_reason),
        "notPossible": cp.not_possible,
        "ringMasks": cp.ring_masks,
        "sdpaRoutes": [
            {"class": cls, "owner": owner, "names": list(names)}
            for cls, owner, names in cp.sdpa_routes
        ],
        **({"flashNames": list(cp.flash_names)} if cp.flash_names else {}),
        **(
            {"kernelFlags": [{"class": c, "attr": a, "value": v} for c, a, v in cp.kernel_flags]}
            if cp.kernel_flags
            else {}
        ),
        "maskReorder": cp.mask_reorder.to_json() if cp.mask_reorder is not None else None,
        "streamMasks": [m.to_json() for m in cp.stream_masks],
    }


def guard_json(params: tuple[str, ...], reason: str) -> dict[str, Any] | None:
    """A mask guard (`{"params": [...], "reason": ...}`), or None without parameters."""
    return {"params": list(params), "reason": reason} if params else None


def tensor_parallel_json(tp: TensorParallelPlan) -> dict[str, Any]:
    return {
        "enabled": tp.enabled,
        "attentionStrategy": tp.attention_strategy,
        "layers": dict(tp.layers),
        "shardDivAttrs": list(tp.shard_div_attrs),
        "conditionalLayers": dict(tp.conditional_layers),
        "weightRearrangement": [rearrangement_json(r) for r in tp.weight_rearrangement],
        "distributedNorms": list(tp.distributed_norms),
        "dtensorUnsafe": list(tp.dtensor_unsafe),
    }


def rearrangement_json(r: Rearrangement) -> dict[str, Any]:
    """`segments` only when there are some."""
    return {"layer": r.layer, "kind": r.kind, "reason": r.reason} | (
        {"segments": list(r.segments)} if r.segments else {}
    )


def component_json(c: ComponentPlan) -> dict[str, Any]:
    return {
        "component": c.component,
        "class": c.class_name,
        "kind": c.kind,
        "library": c.library,
        "generate": c.generate,
        "source": c.source,
    }


def example_json(e: ExamplePlan | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {
        "name": e.name,
        "envVar": e.env_var,
        "taskType": e.task_type,
        "prompt": e.prompt,
        "height": e.height,
        "width": e.width,
        "numFrames": e.num_frames,
        "numInferenceSteps": e.num_inference_steps,
        "guidanceScale": e.guidance_scale,
        "enableSeparateCfg": e.enable_separate_cfg,
    }
