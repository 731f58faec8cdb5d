"""Build an IntegrationPlan document from the analysis JSON and the user's gate-check answers.

`build_plan(analysis, answers)` takes the `cdit-integrate analyze --json` document and an answers
object shaped like the plan itself (only the keys the user decided: `target`, `model.*`,
`registerName`, `modelSlug`, `contextParallel.enabled` / `ulyssesAnything`,
`tensorParallel.enabled` / `strategy`, `example.*`) and returns the plan JSON: answers win,
the analysis fills the rest. The result is not validated here; `plan.parse_plan` does that.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .naming import snake_case
from .plan import SCHEMA_VERSION
from .plan_axis_split import axis_split_fields
from .plan_parse_parts import rearrangement_written
from .plan_routes import route_fields, unrouted


class PlanBuildError(ValueError):
    """The analysis document does not contain what the answers select (``path``: the answer)."""

    def __init__(self, message: str, path: str = "model.transformerClass") -> None:
        super().__init__(message)
        self.path = path


def build_plan(analysis: Mapping[str, Any], answers: Mapping[str, Any]) -> dict[str, Any]:
    model_answers = answers.get("model") or {}
    chosen = _chosen_transformer(analysis, model_answers.get("transformerClass"))
    cls = chosen["className"]
    source_path = (analysis.get("source") or {}).get("path", "")
    pipeline_class = model_answers.get("pipelineClass")
    registry = chosen.get("registry") or {}
    register_name = answers.get("registerName") or _proposed_name(
        cls, pipeline_class, registry, answers.get("target") or {}
    )
    slug = answers.get("modelSlug") or snake_case(register_name)
    model = _model(analysis, chosen, model_answers, source_path)
    notes: list[str] = []
    separate = (chosen.get("separateCfg") or {}).get("value")
    if separate is None:
        notes.append("has_separate_cfg unknown (no pipeline analyzed): False assumed")
    plan: dict[str, Any] = {
        "schemaVersion": SCHEMA_VERSION,
        "model": model,
        "registerName": register_name,
        "modelSlug": slug,
        "target": dict(answers.get("target") or {}),
        "cache": _cache(chosen, bool(separate)),
        "contextParallel": _cp(chosen.get("contextParallel") or {}, answers),
        "tensorParallel": _tp(chosen.get("tensorParallel") or {}, answers),
        "components": _components((chosen.get("tensorParallel") or {}).get("components")),
        "example": _example(slug, pipeline_class, cls, answers.get("example")),
        "provenance": {
            "analysisPath": source_path,
            "analysisSha256": (analysis.get("source") or {}).get("sha256"),
            "cacheDitVersion": registry.get("cacheDitVersion"),
            "notes": notes,
        },
    }
    if plan["target"].get("kind") == "standalone" and not answers.get("example"):
        plan["example"] = None
    return plan


def _chosen_transformer(analysis: Mapping[str, Any], wanted: Any) -> Mapping[str, Any]:
    """The analyzed transformer the answers name (the first one when they name none)."""
    transformers = analysis.get("transformers") or []
    chosen = next((t for t in transformers if t.get("className") == wanted), None)
    if chosen is None:
        if wanted or not transformers:
            names = ", ".join(t.get("className", "?") for t in transformers) or "none"
            raise PlanBuildError(f"transformer {wanted!r} is not in the analysis (found: {names})")
        chosen = transformers[0]
    return chosen


def _model(
    analysis: Mapping[str, Any],
    chosen: Mapping[str, Any],
    model_answers: Mapping[str, Any],
    source_path: str,
) -> dict[str, Any]:
    """The `model` section: the answers, the analyzed transformer and source files."""
    sources = dict(model_answers.get("sources") or {})
    sources.setdefault("transformer", source_path)
    sources.setdefault("pipeline", (analysis.get("pipeline") or {}).get("path"))
    return {
        "transformerClass": chosen["className"],
        "transformerModule": model_answers.get("transformerModule")
        or _module_of(sources["transformer"]),
        "pipelineClass": model_answers.get("pipelineClass"),
        "localPath": model_answers.get("localPath"),
        "defaultModelId": model_answers.get("defaultModelId"),
        "isDiffusersModel": chosen.get("isDiffusersModel", True),
        "sources": {
            "transformer": sources.get("transformer"),
            "pipeline": sources.get("pipeline"),
            "config": sources.get("config"),
            "modelIndex": sources.get("modelIndex"),
        },
    }


def _cache(chosen: Mapping[str, Any], separate: bool) -> dict[str, Any]:
    """The `cache` section: the analyzed block lists and PatchFunctor reasons (active ones)."""
    functor = chosen.get("patchFunctor") or {}
    reasons = [r for r in functor.get("reasons", []) if r.get("active", True)]
    return {
        "blockLists": [
            {
                "attr": b.get("attr"),
                "forwardPattern": b.get("forwardPattern"),
                "checkForwardPattern": b.get("checkForwardPattern", True),
                "checkNumOutputs": b.get("checkNumOutputs", False),
                "blockClass": b.get("blockClass"),
                "blockClassPath": b.get("blockClassPath"),
                "blockClassLine": b.get("blockClassLine"),
                "continues": b.get("continues"),
                "container": b.get("container", "ModuleList"),
            }
            for b in chosen.get("blockLists", [])
        ],
        "hasSeparateCfg": separate,
        "notCacheable": _not_cacheable(chosen),
        "patchFunctor": {
            "enabled": bool(functor.get("needed")) and bool(reasons),
            "reasons": [
                {
                    "kind": r.get("kind"),
                    "message": r.get("message", ""),
                    "line": r.get("line"),
                    "blockList": r.get("blockList"),
                    "severity": r.get("severity", "high"),
                }
                for r in sorted(reasons, key=lambda r: (r.get("line") or 0, r.get("kind", "")))
            ],
        },
    }


def _module_of(source: str | None) -> str:
    """The module a source entry (file or dotted module) is imported as, resolved as the
    analysis resolves it."""
    from .source_files import SourceNotFound, source_module

    if not source:
        return ""
    try:
        return source_module(source)
    except SourceNotFound as exc:
        raise PlanBuildError(str(exc)) from None


def _proposed_name(
    cls: str, pipeline_class: str | None, registry: Mapping[str, Any], target: Mapping[str, Any]
) -> str:
    """The register name the check accepts (`register_names`): for the checkout target, against
    that checkout's registered adapters; `PlanBuildError` when no name can pass."""
    from ..analysis.register_names import suggest_register_name
    from ..analysis.registry_facts import propose_register_name

    if pipeline_class:
        preferred = propose_register_name(cls, pipeline_class)
    else:
        preferred = registry.get("proposedName") or propose_register_name(cls)
    if target.get("kind") != "cache-dit-checkout":
        return preferred
    suggestion = suggest_register_name(
        cls, pipeline_class, checkout_adapters(target.get("root")), preferred
    )
    if suggestion.name is None:
        raise PlanBuildError(suggestion.reason, path="registerName")
    return suggestion.name


def checkout_adapters(root: Any, own_function: str | None = None) -> list[str]:
    """BlockAdapter names registered in the cache-dit checkout at ``root``, without the one whose
    factory is ``own_function`` (ours, on a re-generation); none if it is not a checkout (the
    target check reports that)."""
    from ..analysis.registry_facts import read_registries
    from .checkout_layout import locate_package

    if not isinstance(root, str) or not root.strip():
        return []
    package = locate_package(root)
    if package is None:
        return []
    registries = read_registries(package)
    return [
        r.name
        for r in registries.entries("adapter", include_inactive=True)
        if own_function is None or r.target != own_function
    ]


def registry_name_errors(plan: Mapping[str, Any]) -> list[str]:
    """The register name against the checkout's registered adapters (checkout target only): the
    same rule the suggestion follows, so the check never rejects the suggestion."""
    from ..analysis.register_names import register_name_problems
    from .naming import names_for

    target = plan.get("target") or {}
    name = plan.get("registerName")
    slug = plan.get("modelSlug")
    model = plan.get("model") or {}
    if target.get("kind") != "cache-dit-checkout" or not isinstance(name, str):
        return []
    own = names_for(name, slug).adapter_func if isinstance(slug, str) else None
    registered = checkout_adapters(target.get("root"), own)
    cls = model.get("transformerClass") or ""
    problems = register_name_problems(name, cls, model.get("pipelineClass"), registered)
    return [p for p in problems if "registered" in p]


def _cp(cp: Mapping[str, Any], answers: Mapping[str, Any]) -> dict[str, Any]:
    chosen = answers.get("contextParallel") or {}
    plan = cp.get("plan") or {}
    approach = cp.get("approach")
    default = bool(plan) and approach not in (None, "none", "patch_based")
    # A processor that builds its mask from the lengths it sees is only wrong when a mask is
    # passed: the plan serves calls without one, and a call with one is stopped (`maskGuard`).
    # A mask forward builds itself cannot be guarded: the patch refuses CP.
    mask_patches = _messages(cp.get("maskPatches"))
    # attention calling SDPA itself: the standalone module routes it (a checkout planner cannot)
    standalone = (answers.get("target") or {}).get("kind") == "standalone"
    routes = list(cp.get("sdpaRoutes") or []) if standalone else []
    mask = cp.get("attentionMask") or {}
    guard = mask_patches and not mask.get("builtInForward")
    guard_params = list(mask.get("params") or []) if guard else []
    # a mask of a stream split at every block is split with it by the standalone module: the
    # processor then builds its mask from matching lengths, no guard needed for it
    with_stream = list(mask.get("withStream") or []) if standalone else []
    served = {p for m in with_stream for p in m.get("params") or []}
    guard_params = [p for p in guard_params if p not in served]
    # A mask over text and image tokens split as separate tensors must be permuted into the
    # all-to-all order, which is not generated: masks only a caller passes are guarded (calls
    # without one are right); a mask forward builds refuses CP (never a plan known to be wrong).
    reorder = _mask_reorder_refusal(cp)
    placed = mask.get("reorderPlan") if reorder is not None else None
    refused = None
    if reorder is not None and not placed:
        params = _masks_from_params_only(cp)
        if params:
            guard_params = sorted(set(guard_params) | set(params))
            mask_patches = [*mask_patches, reorder]
        else:
            refused = reorder
    return {
        "enabled": False if refused else bool(chosen.get("enabled", default)),
        "approach": approach,
        "plan": {} if refused else canonical_cp_plan(plan),
        "ulyssesAnything": bool(chosen.get("ulyssesAnything", cp.get("uaaRecommended", False))),
        "patches": _messages(unrouted(cp.get("patches"), routes))
        + (mask_patches if not guard_params else []),
        "maskGuard": (
            {"params": guard_params, "reason": "; ".join(mask_patches)} if guard_params else None
        ),
        "ringUnsupported": None,
        "ringMasks": bool((cp.get("attentionMask") or {}).get("present")),
        **route_fields(routes),
        "notPossible": refused or _cp_not_possible(cp),
        "maskReorder": ({k: placed[k] for k in ("list", "mask", "streams")} if placed else None),
        "streamMasks": [{k: m[k] for k in ("list", "mask", "stream")} for m in with_stream],
        **axis_split_fields(cp.get("factorised")),
    }


def _mask_reorder_refusal(cp: Mapping[str, Any]) -> str | None:
    """Why a mask over separately split streams makes the hook plan wrong (CDIT217), if it does."""
    mask = cp.get("attentionMask") or {}
    if not (cp.get("plan") and mask.get("present") and mask.get("reorderNeeded")):
        return None
    where = "; ".join(
        f"{s.get('message', '')} (line {s.get('line')})" for s in (mask.get("sources") or [])[:2]
    )
    return (
        "the attention mask covers text and image tokens that the plan splits as separate "
        "tensors; Ulysses sees them in all-to-all order ([t0, i0, t1, i1, ...]), so the mask "
        "would have to be permuted into that order per rank, which is not generated"
        + (f" ({where})" if where else "")
    )


def _cp_not_possible(cp: Mapping[str, Any]) -> str | None:
    """Why the analysis gave no plan (its CDIT220 refusals), when it gave none."""
    if cp.get("plan"):
        return None
    reasons = [w.get("message", "") for w in cp.get("warnings") or [] if w.get("code") == "CDIT220"]
    return "; ".join(reasons) or None


def _not_cacheable(chosen: Mapping[str, Any]) -> str | None:
    """Why the analysis found no list to cache (its CDIT005 error), when it found none."""
    if chosen.get("blockLists"):
        return None
    for d in chosen.get("diagnostics") or []:
        if d.get("code") == "CDIT005":
            return str(d.get("message", ""))
    return None


def _messages(items: Any) -> list[str]:
    return [p.get("message", str(p)) if isinstance(p, Mapping) else str(p) for p in items or []]


def _masks_from_params_only(cp: Mapping[str, Any]) -> list[str]:
    """The forward parameters every attention mask comes from, when masks come from nowhere
    else (empty: no mask, or a mask forward builds or passes in a kwargs dict)."""
    mask = cp.get("attentionMask") or {}
    params = list(mask.get("params") or [])
    sources = mask.get("sources") or []
    return params if params and len(sources) == len(params) else []


def canonical_cp_plan(plan: Mapping[str, Any]) -> dict[str, Any]:
    """The CP plan with module keys and input names in a stable order (`""` first)."""

    def name_key(name: str) -> tuple[int, int, str]:
        return (0, int(name), "") if name.isdigit() else (1, 0, name)

    out: dict[str, Any] = {}
    for key in sorted(plan, key=lambda k: (k != "", k)):
        entry = plan[key]
        if isinstance(entry, Mapping) and "gather_dim" not in entry:
            entry = {name: entry[name] for name in sorted(entry, key=name_key)}
        out[key] = entry
    return out


def _tp(tp: Mapping[str, Any], answers: Mapping[str, Any]) -> dict[str, Any]:
    chosen = answers.get("tensorParallel") or {}
    layers = dict(tp.get("layers") or {})
    attrs = list(tp.get("shardDivAttrs") or [])
    strategy = chosen.get("strategy") or tp.get("attentionStrategy")
    alternative = (tp.get("alternatives") or {}).get(strategy or "")
    if alternative:
        removed = set(alternative.get("removeLayers") or [])
        for key in removed:
            layers.pop(key, None)
        modules = {key.rsplit(".", 1)[0] + "." for key in removed}
        attrs = [a for a in attrs if not any(a.startswith(m) for m in modules)]
        layers.update(alternative.get("layers") or {})
        if "shardDivAttrs" in alternative:
            attrs = list(alternative["shardDivAttrs"])
    layers, attrs, kept = _fallbacks(tp, layers, attrs)
    conditional = {
        key: value.get("condition", "") if isinstance(value, Mapping) else str(value)
        for key, value in (tp.get("conditionalLayers") or {}).items()
        if key in layers
    }
    return {
        "enabled": bool(chosen.get("enabled", bool(layers))),
        "attentionStrategy": strategy,
        "layers": dict(sorted(layers.items())),
        "shardDivAttrs": sorted(set(attrs)),
        "conditionalLayers": dict(sorted(conditional.items())),
        "weightRearrangement": sorted(
            (
                _with_segments(item, tp)
                for item in tp.get("weightRearrangement") or []
                if item.get("layer") in layers and item.get("layer") in kept
            ),
            key=lambda item: (item["layer"], item["kind"]),
        ),
        "distributedNorms": sorted(
            {
                n.get("module") if isinstance(n, Mapping) else n
                for n in tp.get("distributedNorms") or []
            }
        ),
        "dtensorUnsafe": [
            n.get("message", str(n)) if isinstance(n, Mapping) else str(n)
            for n in tp.get("dtensorUnsafe") or []
        ],
    }


def _fallbacks(
    tp: Mapping[str, Any], layers: dict[str, Any], attrs: list[str]
) -> tuple[dict[str, Any], list[str], set[str]]:
    """A list whose rearrangement the planner cannot write takes the analysis' plan without it
    (`fallback`: the packed projection's output replicated), so it is generated and correct
    rather than refused. Returns the layers, the attributes and the rearranged layers kept."""
    items = list(tp.get("weightRearrangement") or [])
    kept = {str(item.get("layer")) for item in items}
    for item in items:
        fallback = item.get("fallback")
        layer = str(item.get("layer"))
        if (
            not isinstance(fallback, Mapping)
            or rearrangement_written(item.get("kind"), True)
            or ".*." not in layer
        ):
            continue
        head = layer.split(".*.", 1)[0] + ".*."
        layers = {k: v for k, v in layers.items() if not k.startswith(head)}
        layers.update(fallback.get("layers") or {})
        attrs = [a for a in attrs if not a.startswith(head)] + list(
            fallback.get("shardDivAttrs") or []
        )
        kept = {k for k in kept if not k.startswith(head)} | set(
            fallback.get("weightRearrangement") or []
        )
    return layers, attrs, kept


def _with_segments(item: Mapping[str, Any], tp: Mapping[str, Any]) -> dict[str, Any]:
    """A fused out+down layer: its input segments (attention output first, then other branches)."""
    out = {"layer": item["layer"], "kind": item["kind"], "reason": item.get("reason", "")}
    if item["kind"] != "fused_out_down" or ".*." not in item["layer"]:
        return out
    head = item["layer"].split(".*.", 1)[0] + ".*."
    producers = [p[len(head) :] for p in item.get("producers") or [] if p.startswith(head)]
    if not producers:
        return out
    values: list[str] = []
    qkv: set[str] = set()
    for attention in tp.get("attention") or []:
        if not str(attention.get("module", "")).startswith(head):
            continue
        for role in ("query", "key", "value"):
            qkv.update(k[len(head) :] for k in attention.get(role, []))
        values.extend(
            k[len(head) :] for k in attention.get("value", []) if k[len(head) :] in producers
        )
    others = [p for p in producers if p not in qkv]
    segments = values[:1] + others
    if segments:
        out["segments"] = [head + s for s in segments]
    return out


def _components(components: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    if not components:
        return []
    out = []
    for entry in components.get("textEncoders") or []:
        if not entry.get("supported"):
            out.append(
                {
                    "component": entry.get("component"),
                    "class": entry.get("class"),
                    "kind": "text_encoder",
                    "library": entry.get("library", "transformers"),
                    "generate": entry.get("library") == "transformers",
                    "source": entry.get("source"),
                }
            )
    for entry in components.get("vaes") or []:
        if not entry.get("supported"):
            out.append(
                {
                    "component": entry.get("component"),
                    "class": entry.get("class"),
                    "kind": "vae",
                    "library": entry.get("library", "diffusers"),
                    "generate": bool(entry.get("tilingApi")),
                    "source": entry.get("source"),
                }
            )
    return out


def _example(
    slug: str, pipeline_class: str | None, cls: str, answers: Mapping[str, Any] | None
) -> dict[str, Any]:
    answers = answers or {}
    return {
        "name": answers.get("name", slug),
        "envVar": answers.get("envVar", f"{slug.upper()}_DIR"),
        "taskType": answers.get("taskType", task_type_for(pipeline_class or cls)),
        "prompt": answers.get("prompt", "A cat holding a sign that says hello world"),
        "height": answers.get("height"),
        "width": answers.get("width"),
        "numFrames": answers.get("numFrames"),
        "numInferenceSteps": answers.get("numInferenceSteps"),
        "guidanceScale": answers.get("guidanceScale"),
        "enableSeparateCfg": answers.get("enableSeparateCfg"),
    }


def task_type_for(class_name: str) -> str:
    """A default example task type from the (pipeline) class name's words."""
    if "VACE" in class_name:
        return "VACE"
    if "ImageToVideo" in class_name or "I2V" in class_name or "Image2Video" in class_name:
        return "I2V"
    if "Video" in class_name or "3D" in class_name:
        return "T2V"
    if "Edit" in class_name:
        return "IE2I"
    return "T2I"
