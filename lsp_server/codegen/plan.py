"""`IntegrationPlan`: the analysis joined with the user's gate-check answers; codegen's input.

The JSON document (``schemaVersion`` 1, camelCase keys) is what the UI edits and what
``cdit-integrate generate PLAN.json`` consumes. `parse_plan` checks it field by field and returns
either a frozen `IntegrationPlan` or every problem as a `FieldError` (``path`` such as
``cache.blockLists[0].forwardPattern``); it never raises on bad input. `IntegrationPlan.to_json`
writes the same shape back. The JSON Schema of the document is in `plan_schema.py`.

Only the shape and the values are checked here; checks against the file system and the target's
registries (does the checkout exist, is the register name shadowed) happen in `generate`.

The plan has independent parts: cache (`cache`), context parallelism (`contextParallel`), tensor
parallelism (`tensorParallel`) and one text-encoder TP or VAE-P part per `components[i]`. Each is
validated on its own: a part with an error is *refused* (`IntegrationPlan.refused`: part -> its
errors) and the others are still generated; a disabled part (`enabled: false`, a component with
`generate: false`) is neither validated nor generated. Errors outside the parts (model, names,
target, example) make the whole plan invalid.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

SCHEMA_VERSION = 1

TargetKind = Literal["standalone", "cache-dit-checkout"]
TARGET_KINDS: tuple[str, ...] = ("standalone", "cache-dit-checkout")
FORWARD_PATTERNS: tuple[str, ...] = tuple(f"Pattern_{i}" for i in range(6))
TP_STYLES: tuple[str, ...] = ("colwise", "rowwise", "colwise_replicate", "rowwise_replicate_input")
TASK_TYPES: tuple[str, ...] = ("T2I", "T2V", "I2V", "IE2I", "FLF2V", "VACE")
COMPONENT_KINDS: tuple[str, ...] = ("text_encoder", "vae")

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SLUG = re.compile(r"^[a-z][a-z0-9_]*$")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_ENV_VAR = re.compile(r"^[A-Z][A-Z0-9_]*$")
_EXAMPLE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.\-]*$")
_MODULE_KEY_ATOM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*|\d+|\*|<last>|<each>)$")
# A TP layer key: the block list (attribute path), `*` for every block, the layer inside a block.
TP_KEY_PATTERN = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\.\*"
    r"(\.([A-Za-z_][A-Za-z0-9_]*|\d+))+$"
)
TP_KEY_FORM = "`<list>.*.<path>` (the block list, `*` for each block, the layer in the block)"

CACHE_PART = "cache"
CP_PART = "contextParallel"
TP_PART = "tensorParallel"


@dataclass(frozen=True)
class FieldError:
    """One problem in a plan: where (a JSON path) and what."""

    path: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}

    def __str__(self) -> str:
        return f"{self.path or '<plan>'}: {self.message}"


@dataclass(frozen=True)
class Sources:
    """Source files the plan was made from (the transformer file is required)."""

    transformer: str
    pipeline: str | None = None
    config: str | None = None
    model_index: str | None = None


@dataclass(frozen=True)
class ModelInfo:
    """The gate-check answers about the model."""

    transformer_class: str
    transformer_module: str  # dotted module the class is imported from
    sources: Sources
    pipeline_class: str | None = None
    local_path: str | None = None  # local model directory (model_index.json)
    default_model_id: str | None = None  # hub id or path the CLI example defaults to
    is_diffusers_model: bool = True


@dataclass(frozen=True)
class Target:
    """Where the code goes: one standalone module, or a cache-dit git checkout."""

    kind: TargetKind
    path: str | None = None  # standalone: the module file to write
    root: str | None = None  # checkout: repository root (or the `cache_dit` package directory)


@dataclass(frozen=True)
class BlockListPlan:
    """One cached block list: attribute, ForwardPattern and cache-dit's check flags."""

    attr: str
    forward_pattern: str
    check_forward_pattern: bool = True
    check_num_outputs: bool = False
    block_class: str | None = None
    block_class_path: str | None = None
    block_class_line: int | None = None
    # the list whose loop this one directly continues with the same block call (analysis):
    # the adapter may cache both as one list
    continues: str | None = None


@dataclass(frozen=True)
class FunctorReason:
    """Why a PatchFunctor is needed (from the analysis), with the transformer source line."""

    kind: str
    message: str
    line: int
    block_list: str | None = None
    severity: str = "high"


@dataclass(frozen=True)
class CachePlan:
    block_lists: tuple[BlockListPlan, ...]
    has_separate_cfg: bool = False
    patch_functor: bool = False
    functor_reasons: tuple[FunctorReason, ...] = ()
    enabled: bool = True


@dataclass(frozen=True)
class ContextParallelPlan:
    """The CP hook plan in the analyzer's JSON vocabulary (module key -> split/gather entry)."""

    enabled: bool = False
    approach: str | None = None
    plan: Mapping[str, Any] = field(default_factory=dict)
    ulysses_anything: bool = False
    patches: tuple[str, ...] = ()  # processor / RoPE / mask patches the hooks do not cover
    # why cache-dit's ring attention cannot run this model (None: it can)
    ring_unsupported: str | None = None
    # forward's mask parameters a CP call must leave None (the processor would build the mask
    # from local lengths), and why; empty: no guard
    mask_guard_params: tuple[str, ...] = ()
    mask_guard_reason: str = ""
    # the attention receives a mask: ring runs through the module's masked ring steps
    ring_masks: bool = False
    not_possible: str | None = None  # why the analysis gave no plan (no plan, not disabled)
    # a mask over separately split streams, permuted into all-to-all order at every block of a
    # list: the list, the blocks' mask parameter and their two stream parameters in the order
    # the attention joins them; None: no reorder
    mask_reorder: MaskReorder | None = None


@dataclass(frozen=True)
class MaskReorder:
    """`blocks.*` get `mask` permuted into Ulysses' all-to-all order of `streams`."""

    list_attr: str
    mask: str
    streams: tuple[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"list": self.list_attr, "mask": self.mask, "streams": list(self.streams)}


@dataclass(frozen=True)
class Rearrangement:
    """A fused weight to regroup per rank before sharding (`segments`: producers, in order)."""

    layer: str
    kind: str
    reason: str = ""
    segments: tuple[str, ...] = ()


@dataclass(frozen=True)
class TensorParallelPlan:
    """The TP layer plan: `<list>.*.<path>` -> style, `shard_div_attr` targets, extra steps."""

    enabled: bool = False
    attention_strategy: str | None = None
    layers: Mapping[str, str] = field(default_factory=dict)
    shard_div_attrs: tuple[str, ...] = ()
    conditional_layers: Mapping[str, str] = field(default_factory=dict)  # key -> condition
    weight_rearrangement: tuple[Rearrangement, ...] = ()
    distributed_norms: tuple[str, ...] = ()  # `<list>.*.<path>` of norms to replace
    dtensor_unsafe: tuple[str, ...] = ()  # messages; patched by hand


@dataclass(frozen=True)
class ComponentPlan:
    """A text encoder or VAE of the pipeline that cache-dit has no planner for."""

    component: str
    class_name: str
    kind: str  # text_encoder | vae
    library: str = "transformers"
    generate: bool = True
    source: str | None = None


@dataclass(frozen=True)
class ExamplePlan:
    """The `cache_dit.generate` CLI example (checkout target only)."""

    name: str
    env_var: str
    task_type: str = "T2I"
    prompt: str = "A cat holding a sign that says hello world"
    height: int | None = None
    width: int | None = None
    num_frames: int | None = None
    num_inference_steps: int | None = None
    guidance_scale: float | None = None
    enable_separate_cfg: bool | None = None


@dataclass(frozen=True)
class IntegrationPlan:
    model: ModelInfo
    register_name: str
    model_slug: str
    target: Target
    cache: CachePlan
    context_parallel: ContextParallelPlan = field(default_factory=ContextParallelPlan)
    tensor_parallel: TensorParallelPlan = field(default_factory=TensorParallelPlan)
    components: tuple[ComponentPlan, ...] = ()
    example: ExamplePlan | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    # part ("cache", "contextParallel", "tensorParallel", "components[i]") -> why it is refused
    refused: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def class_prefix(self) -> str:
        """Prefix of generated class names (`<prefix>PatchFunctor`, ...)."""
        name = self.register_name
        return name[:1].upper() + name[1:]

    @property
    def generates_cache(self) -> bool:
        return self.cache.enabled and CACHE_PART not in self.refused

    @property
    def generates_cp(self) -> bool:
        cp = self.context_parallel
        return cp.enabled and bool(cp.plan) and CP_PART not in self.refused

    @property
    def generates_tp(self) -> bool:
        tp = self.tensor_parallel
        return tp.enabled and bool(tp.layers) and TP_PART not in self.refused

    def generated_components(self) -> list[ComponentPlan]:
        return [
            c
            for i, c in enumerate(self.components)
            if c.generate and component_part(i) not in self.refused
        ]

    def with_refused(self, more: Mapping[str, tuple[str, ...]]) -> IntegrationPlan:
        """This plan with more parts refused (reasons appended to earlier ones)."""
        refused = dict(self.refused)
        for part, reasons in more.items():
            refused[part] = (*refused.get(part, ()), *reasons)
        return replace(self, refused=refused)

    def part_label(self, part: str) -> str:
        """A part for people: `tensor parallelism`, `VAE-P for AutoencoderKL (vae)`, ..."""
        labels = {
            CACHE_PART: "cache",
            CP_PART: "context parallelism",
            TP_PART: "tensor parallelism",
        }
        if part in labels:
            return labels[part]
        index = _component_index(part)
        if index is not None and index < len(self.components):
            c = self.components[index]
            kind = "text-encoder TP" if c.kind == "text_encoder" else "VAE-P"
            return f"{kind} for {c.class_name} ({c.component})"
        return part

    def not_generated(self) -> dict[str, str]:
        """Every part that is not generated -> why (refused with its errors, or disabled)."""
        out: dict[str, str] = {}
        switches = {
            CACHE_PART: self.cache.enabled,
            CP_PART: self.context_parallel.enabled and bool(self.context_parallel.plan),
            TP_PART: self.tensor_parallel.enabled and bool(self.tensor_parallel.layers),
        }
        for i, c in enumerate(self.components):
            switches[component_part(i)] = c.generate
        for part, on in switches.items():
            if part in self.refused:
                out[part] = "refused: " + "; ".join(self.refused[part])
            elif part == CP_PART and not on and self.context_parallel.not_possible:
                out[part] = "no plan: " + self.context_parallel.not_possible
            elif not on:
                out[part] = "disabled in the plan"
        return out

    def to_json(self) -> dict[str, Any]:
        m = self.model
        out: dict[str, Any] = {
            "schemaVersion": self.schema_version,
            "model": {
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
            },
            "registerName": self.register_name,
            "modelSlug": self.model_slug,
            "target": {"kind": self.target.kind}
            | ({"path": self.target.path} if self.target.path is not None else {})
            | ({"root": self.target.root} if self.target.root is not None else {}),
            "cache": {
                "blockLists": [
                    {
                        "attr": b.attr,
                        "forwardPattern": b.forward_pattern,
                        "checkForwardPattern": b.check_forward_pattern,
                        "checkNumOutputs": b.check_num_outputs,
                        "blockClass": b.block_class,
                        "blockClassPath": b.block_class_path,
                        "blockClassLine": b.block_class_line,
                        "continues": b.continues,
                    }
                    for b in self.cache.block_lists
                ],
                "enabled": self.cache.enabled,
                "hasSeparateCfg": self.cache.has_separate_cfg,
                "patchFunctor": {
                    "enabled": self.cache.patch_functor,
                    "reasons": [
                        {
                            "kind": r.kind,
                            "message": r.message,
                            "line": r.line,
                            "blockList": r.block_list,
                            "severity": r.severity,
                        }
                        for r in self.cache.functor_reasons
                    ],
                },
            },
            "contextParallel": {
                "enabled": self.context_parallel.enabled,
                "approach": self.context_parallel.approach,
                "plan": dict(self.context_parallel.plan),
                "ulyssesAnything": self.context_parallel.ulysses_anything,
                "patches": list(self.context_parallel.patches),
                "ringUnsupported": self.context_parallel.ring_unsupported,
                "maskGuard": _guard_json(
                    self.context_parallel.mask_guard_params,
                    self.context_parallel.mask_guard_reason,
                ),
                "notPossible": self.context_parallel.not_possible,
                "ringMasks": self.context_parallel.ring_masks,
                "maskReorder": (
                    self.context_parallel.mask_reorder.to_json()
                    if self.context_parallel.mask_reorder is not None
                    else None
                ),
            },
            "tensorParallel": {
                "enabled": self.tensor_parallel.enabled,
                "attentionStrategy": self.tensor_parallel.attention_strategy,
                "layers": dict(self.tensor_parallel.layers),
                "shardDivAttrs": list(self.tensor_parallel.shard_div_attrs),
                "conditionalLayers": dict(self.tensor_parallel.conditional_layers),
                "weightRearrangement": [
                    {"layer": r.layer, "kind": r.kind, "reason": r.reason}
                    | ({"segments": list(r.segments)} if r.segments else {})
                    for r in self.tensor_parallel.weight_rearrangement
                ],
                "distributedNorms": list(self.tensor_parallel.distributed_norms),
                "dtensorUnsafe": list(self.tensor_parallel.dtensor_unsafe),
            },
            "components": [
                {
                    "component": c.component,
                    "class": c.class_name,
                    "kind": c.kind,
                    "library": c.library,
                    "generate": c.generate,
                    "source": c.source,
                }
                for c in self.components
            ],
            "example": None,
            "provenance": dict(self.provenance),
            "refused": [
                {"part": part, "label": self.part_label(part), "reasons": list(reasons)}
                for part, reasons in self.refused.items()
            ],
        }
        if self.example is not None:
            e = self.example
            out["example"] = {
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
        return out


# ----------------------------------------------------------------------------- parsing


class _Reader:
    """Typed field access over nested JSON objects that records errors instead of raising."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def obj(self, data: Any, path: str, *, required: bool = True) -> Mapping[str, Any] | None:
        if data is None and not required:
            return None
        if not isinstance(data, Mapping):
            self.error(path, f"expected an object, got {_type_name(data)}")
            return None
        return data

    def get(self, data: Mapping[str, Any], key: str, path: str, kind: type | tuple, **opts: Any):
        where = f"{path}.{key}" if path else key
        if key not in data or data[key] is None:
            if opts.get("required", False):
                self.error(where, "is required")
            return opts.get("default")
        value = data[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            self.error(where, f"expected an integer, got {_type_name(value)}")
            return opts.get("default")
        if kind is float and (isinstance(value, bool) or not isinstance(value, int | float)):
            self.error(where, f"expected a number, got {_type_name(value)}")
            return opts.get("default")
        if kind not in (int, float) and not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            self.error(where, f"expected {_json_kind(names)}, got {_type_name(value)}")
            return opts.get("default")
        pattern: re.Pattern[str] | None = opts.get("pattern")
        if pattern is not None and isinstance(value, str) and not pattern.match(value):
            self.error(where, f"{value!r} {opts.get('pattern_message', 'is not valid')}")
        choices = opts.get("choices")
        if choices is not None and value not in choices:
            self.error(where, f"{value!r} is not one of {', '.join(map(str, choices))}")
        return float(value) if kind is float else value


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), "an array" if isinstance(value, list) else "an object"
    )


def _json_kind(python_names: str) -> str:
    names = {"str": "a string", "bool": "a boolean", "list": "an array", "dict": "an object"}
    return " or ".join(names.get(n, n) for n in python_names.split("/"))


def parse_plan(data: Any) -> tuple[IntegrationPlan | None, list[FieldError]]:
    """Check a plan document; return the plan, or None and every field-level error."""
    r = _Reader()
    root = r.obj(data, "")
    if root is None:
        return None, r.errors
    version = r.get(root, "schemaVersion", "", int, required=True)
    if version is not None and version != SCHEMA_VERSION:
        r.error(
            "schemaVersion", f"unsupported version {version} (this tool reads {SCHEMA_VERSION})"
        )

    model = _parse_model(r, root.get("model"))
    register_name = r.get(
        root,
        "registerName",
        "",
        str,
        required=True,
        pattern=_IDENTIFIER,
        pattern_message="is not a Python identifier",
    )
    slug = r.get(
        root,
        "modelSlug",
        "",
        str,
        required=True,
        pattern=_SLUG,
        pattern_message="must be snake_case (a-z, 0-9, _), starting with a letter",
    )
    if isinstance(slug, str) and keyword.iskeyword(slug):
        r.error("modelSlug", f"{slug!r} is a Python keyword")
    target = _parse_target(r, root.get("target"))
    example = _parse_example(r, root.get("example"))
    provenance = r.obj(root.get("provenance"), "provenance", required=False) or {}

    # The parts: each is read with its own reader, so that its errors refuse only that part.
    parts: dict[str, tuple[bool, list[FieldError]]] = {}
    cache_data = r.obj(root.get("cache"), "cache")
    rc = _Reader()
    cache = _parse_cache(rc, cache_data) if cache_data is not None else None
    if cache is not None and cache.patch_functor and model and not model.sources.transformer:
        rc.error("model.sources.transformer", "is required to generate a PatchFunctor")
    if cache is not None:
        parts[CACHE_PART] = (cache.enabled, rc.errors)
    rcp = _Reader()
    cp = _parse_cp(rcp, root.get("contextParallel"))
    parts[CP_PART] = (cp.enabled, rcp.errors)
    rtp = _Reader()
    tp = _parse_tp(rtp, root.get("tensorParallel"))
    parts[TP_PART] = (tp.enabled, rtp.errors)
    components, component_errors = _parse_components(r, root.get("components"))
    for i, (on, errors) in component_errors.items():
        parts[component_part(i)] = (on, errors)

    if model is not None and isinstance(register_name, str) and _IDENTIFIER.match(register_name):
        from ..analysis.register_names import register_name_problems

        # the pipeline is looked up by name only through the checkout's registry; the registry
        # itself is checked where it is read (`registry_name_errors`, `checkout._name_problems`)
        checkout = target is not None and target.kind == "cache-dit-checkout"
        pipeline = model.pipeline_class if checkout else None
        for problem in register_name_problems(register_name, model.transformer_class, pipeline):
            r.error("registerName", problem)
    if target is not None and target.kind == "cache-dit-checkout" and example is None:
        r.error("example", "is required for the cache-dit checkout target (the CLI example)")

    part_errors = [e for on, errors in parts.values() if on for e in errors]
    if r.errors or model is None or target is None or cache is None:
        return None, r.errors + part_errors
    assert isinstance(register_name, str) and isinstance(slug, str)
    refused = {
        part: tuple(str(e) for e in errors) for part, (on, errors) in parts.items() if on and errors
    }
    return (
        IntegrationPlan(
            model=model,
            register_name=register_name,
            model_slug=slug,
            target=target,
            cache=cache,
            context_parallel=cp,
            tensor_parallel=tp,
            components=components,
            example=example,
            provenance=dict(provenance),
            refused=refused,
        ),
        [],
    )


def component_part(index: int) -> str:
    return f"components[{index}]"


def _component_index(part: str) -> int | None:
    match = re.fullmatch(r"components\[(\d+)\]", part)
    return int(match.group(1)) if match else None


def _parse_model(r: _Reader, data: Any) -> ModelInfo | None:
    m = r.obj(data, "model")
    if m is None:
        return None
    p = "model"
    cls = r.get(
        m,
        "transformerClass",
        p,
        str,
        required=True,
        pattern=_IDENTIFIER,
        pattern_message="is not a class name",
    )
    module = r.get(
        m,
        "transformerModule",
        p,
        str,
        required=True,
        pattern=_DOTTED,
        pattern_message="is not a dotted module name",
    )
    pipeline = r.get(
        m, "pipelineClass", p, str, pattern=_IDENTIFIER, pattern_message="is not a class name"
    )
    local_path = r.get(m, "localPath", p, str)
    default_id = r.get(m, "defaultModelId", p, str)
    is_diffusers = r.get(m, "isDiffusersModel", p, bool, default=True)
    s = r.obj(m.get("sources"), f"{p}.sources")
    sources = None
    if s is not None:
        sp = f"{p}.sources"
        transformer = r.get(s, "transformer", sp, str, required=True)
        sources = Sources(
            transformer=transformer or "",
            pipeline=r.get(s, "pipeline", sp, str),
            config=r.get(s, "config", sp, str),
            model_index=r.get(s, "modelIndex", sp, str),
        )
    if not (isinstance(cls, str) and isinstance(module, str) and sources is not None):
        return None
    return ModelInfo(
        transformer_class=cls,
        transformer_module=module,
        sources=sources,
        pipeline_class=pipeline,
        local_path=local_path,
        default_model_id=default_id,
        is_diffusers_model=bool(is_diffusers),
    )


def _parse_target(r: _Reader, data: Any) -> Target | None:
    t = r.obj(data, "target")
    if t is None:
        return None
    kind = r.get(t, "kind", "target", str, required=True, choices=TARGET_KINDS)
    if kind == "standalone":
        path = r.get(t, "path", "target", str, required=True)
        if isinstance(path, str):
            stem = path.replace("\\", "/").rsplit("/", 1)[-1]
            if "\x00" in path:
                r.error("target.path", "contains a NUL byte")
            elif not stem.endswith(".py") or not _IDENTIFIER.match(stem[:-3]):
                r.error("target.path", f"{path!r} must name an importable module file (`name.py`)")
            return Target(kind="standalone", path=path)
    elif kind == "cache-dit-checkout":
        root = r.get(t, "root", "target", str, required=True)
        if isinstance(root, str) and "\x00" in root:
            r.error("target.root", "contains a NUL byte")
        elif isinstance(root, str) and not root.strip():
            r.error("target.root", "must name the checkout's folder (it is empty)")
        elif isinstance(root, str):
            return Target(kind="cache-dit-checkout", root=root)
    return None


def _parse_cache(r: _Reader, c: Mapping[str, Any]) -> CachePlan:
    """The cache part (errors go to `r`; the caller ignores them when the part is disabled)."""
    enabled = r.get(c, "enabled", "cache", bool, default=True)
    lists_raw = c.get("blockLists")
    lists: list[BlockListPlan] = []
    if not isinstance(lists_raw, list) or not lists_raw:
        why = c.get("notCacheable")
        r.error(
            "cache.blockLists",
            str(why) if why else "must be a non-empty array of block lists",
        )
    else:
        seen: set[str] = set()
        for i, item in enumerate(lists_raw):
            p = f"cache.blockLists[{i}]"
            b = r.obj(item, p)
            if b is None:
                continue
            attr = r.get(
                b,
                "attr",
                p,
                str,
                required=True,
                pattern=_IDENTIFIER,
                pattern_message="is not an attribute name",
            )
            pattern = r.get(b, "forwardPattern", p, str, required=True, choices=FORWARD_PATTERNS)
            if isinstance(attr, str):
                if attr in seen:
                    r.error(f"{p}.attr", f"block list {attr!r} is listed twice")
                seen.add(attr)
            if isinstance(attr, str) and pattern in FORWARD_PATTERNS:
                lists.append(
                    BlockListPlan(
                        attr=attr,
                        forward_pattern=pattern,
                        check_forward_pattern=r.get(
                            b, "checkForwardPattern", p, bool, default=True
                        ),
                        check_num_outputs=r.get(b, "checkNumOutputs", p, bool, default=False),
                        block_class=r.get(b, "blockClass", p, str),
                        block_class_path=r.get(b, "blockClassPath", p, str),
                        block_class_line=r.get(b, "blockClassLine", p, int),
                        continues=r.get(b, "continues", p, str),
                    )
                )
    separate = r.get(c, "hasSeparateCfg", "cache", bool, default=False)
    pf = r.obj(c.get("patchFunctor", {}), "cache.patchFunctor") or {}
    functor = r.get(pf, "enabled", "cache.patchFunctor", bool, default=False)
    reasons: list[FunctorReason] = []
    raw_reasons = pf.get("reasons", [])
    if not isinstance(raw_reasons, list):
        r.error("cache.patchFunctor.reasons", "expected an array")
        raw_reasons = []
    for i, item in enumerate(raw_reasons):
        p = f"cache.patchFunctor.reasons[{i}]"
        o = r.obj(item, p)
        if o is None:
            continue
        kind = r.get(o, "kind", p, str, required=True)
        line = r.get(o, "line", p, int, required=True)
        if isinstance(kind, str) and isinstance(line, int):
            reasons.append(
                FunctorReason(
                    kind=kind,
                    message=r.get(o, "message", p, str, default=""),
                    line=line,
                    block_list=r.get(o, "blockList", p, str),
                    severity=r.get(o, "severity", p, str, default="high"),
                )
            )
    if functor and not reasons:
        r.error("cache.patchFunctor.reasons", "a PatchFunctor needs at least one reason")
    return CachePlan(
        block_lists=tuple(lists),
        has_separate_cfg=bool(separate),
        patch_functor=bool(functor),
        functor_reasons=tuple(reasons),
        enabled=bool(enabled),
    )


def _parse_cp(r: _Reader, data: Any) -> ContextParallelPlan:
    c = r.obj(data, "contextParallel", required=False)
    if c is None:
        return ContextParallelPlan()
    p = "contextParallel"
    enabled = r.get(c, "enabled", p, bool, default=False)
    plan = r.obj(c.get("plan", {}), f"{p}.plan") or {}
    for key, entry in plan.items():
        _check_cp_entry(r, f"{p}.plan[{key!r}]", key, entry)
    if enabled and not plan:
        r.error(f"{p}.plan", "context parallelism is enabled but the plan is empty")
    patches = r.get(c, "patches", p, list, default=[])
    texts = tuple(str(x.get("message", x)) if isinstance(x, dict) else str(x) for x in patches)
    guard_params, guard_reason = _parse_guard(r, c, "maskGuard", p)
    if enabled:
        # hooks alone would run and be wrong: the part is refused, never left to a comment
        for i, text in enumerate(texts):
            r.error(f"{p}.patches[{i}]", f"needs code the hook plan cannot express: {text}")
    return ContextParallelPlan(
        enabled=bool(enabled),
        approach=r.get(c, "approach", p, str),
        plan=dict(plan),
        ulysses_anything=bool(r.get(c, "ulyssesAnything", p, bool, default=False)),
        patches=texts,
        ring_unsupported=r.get(c, "ringUnsupported", p, str),
        mask_guard_params=guard_params,
        mask_guard_reason=guard_reason,
        ring_masks=bool(r.get(c, "ringMasks", p, bool, default=False)),
        not_possible=r.get(c, "notPossible", p, str),
        mask_reorder=_parse_reorder(r, c, p),
    )


def _parse_reorder(r: _Reader, c: Mapping[str, Any], p: str) -> MaskReorder | None:
    """`maskReorder` (`{"list", "mask", "streams": [first, second]}` or null)."""
    raw = r.obj(c.get("maskReorder"), f"{p}.maskReorder", required=False)
    if not raw:
        return None
    names = [raw.get("list"), raw.get("mask"), *(raw.get("streams") or [])]
    if len(names) != 4 or not all(isinstance(n, str) and n.isidentifier() for n in names):
        r.error(f"{p}.maskReorder", "needs `list`, `mask` and two `streams`, each an identifier")
        return None
    return MaskReorder(names[0], names[1], (names[2], names[3]))


def _parse_guard(r: _Reader, c: Mapping[str, Any], key: str, p: str) -> tuple[tuple[str, ...], str]:
    """A mask guard (`{"params": [...], "reason": ...}` or null): the parameter names, why."""
    guard = r.obj(c.get(key), f"{p}.{key}", required=False) or {}
    params = tuple(str(x) for x in guard.get("params", []) if str(x).isidentifier())
    return params, str(guard.get("reason", ""))


def _guard_json(params: tuple[str, ...], reason: str) -> dict[str, Any] | None:
    return {"params": list(params), "reason": reason} if params else None


def _check_cp_entry(r: _Reader, path: str, key: str, entry: Any) -> None:
    atoms = key.split(".") if key else []
    bad = [a for a in atoms if not _MODULE_KEY_ATOM.match(a)]
    if bad:
        r.error(path, f"module key has an invalid part {bad[0]!r}")
    if sum(a in ("*", "<each>") for a in atoms) > 1:
        r.error(path, "module key may contain at most one `*` / `<each>`")
    if not isinstance(entry, Mapping):
        r.error(path, f"expected an object, got {_type_name(entry)}")
        return
    if "gather_dim" in entry:
        r.get(entry, "gather_dim", path, int, required=True)
        r.get(entry, "expected_dims", path, int)
        outputs = r.get(entry, "outputs", path, int, default=1)
        if isinstance(outputs, int) and outputs < 1:
            r.error(f"{path}.outputs", "must be at least 1")
        return
    for name, split in entry.items():
        if name in ("reason", "line"):
            continue
        items = split if isinstance(split, list) else [split]
        for j, item in enumerate(items):
            where = f"{path}.{name}" + (f"[{j}]" if isinstance(split, list) else "")
            o = r.obj(item, where)
            if o is None:
                continue
            r.get(o, "split_dim", where, int, required=True)
            r.get(o, "expected_dims", where, int)
            out = r.get(o, "split_output", where, bool, default=False)
            if out and not str(name).isdigit():
                r.error(where, 'split_output entries are keyed by output index (`"0"`, `"1"`)')
            if not out and not _IDENTIFIER.match(str(name)):
                r.error(where, f"{name!r} is not a parameter name")


def _parse_tp(r: _Reader, data: Any) -> TensorParallelPlan:
    """The TP part. Every module key must be `<list>.*.<path>`: the planner shards the layer at
    `<path>` in each block of `<list>`; no other form is ever emitted."""
    t = r.obj(data, "tensorParallel", required=False)
    if t is None:
        return TensorParallelPlan()
    p = "tensorParallel"
    enabled = bool(r.get(t, "enabled", p, bool, default=False))
    layers = r.obj(t.get("layers", {}), f"{p}.layers") or {}
    for key, style in layers.items():
        if style not in TP_STYLES:
            r.error(f"{p}.layers[{key!r}]", f"{style!r} is not one of {', '.join(TP_STYLES)}")
        if not tp_key_ok(key):
            r.error(f"{p}.layers[{key!r}]", f"layer key must look like {TP_KEY_FORM}")
    if enabled and not layers:
        r.error(f"{p}.layers", "tensor parallelism is enabled but no layer is sharded")
    attrs = r.get(t, "shardDivAttrs", p, list, default=[])
    for i, a in enumerate(attrs):
        if not (tp_key_ok(a) and _path_depth(a) >= 2):
            r.error(f"{p}.shardDivAttrs[{i}]", "must look like `<list>.*.<path>.<attr>`")
    cond_raw = r.obj(t.get("conditionalLayers", {}), f"{p}.conditionalLayers") or {}
    conditional = {
        k: (v.get("condition", "") if isinstance(v, Mapping) else str(v))
        for k, v in cond_raw.items()
    }
    for key in conditional:
        if key not in layers:
            r.error(f"{p}.conditionalLayers[{key!r}]", "is not a key of `layers`")
    rearr: list[Rearrangement] = []
    for i, item in enumerate(r.get(t, "weightRearrangement", p, list, default=[])):
        where = f"{p}.weightRearrangement[{i}]"
        o = r.obj(item, where)
        if o is not None and isinstance(o.get("layer"), str) and isinstance(o.get("kind"), str):
            segments = o.get("segments") or []
            if not isinstance(segments, list) or not all(isinstance(x, str) for x in segments):
                r.error(f"{where}.segments", "expected an array of strings")
                segments = []
            for key in (o["layer"], *segments):
                if not tp_key_ok(key):
                    r.error(where, f"{key!r} must look like {TP_KEY_FORM}")
            rearr.append(
                Rearrangement(o["layer"], o["kind"], str(o.get("reason", "")), tuple(segments))
            )
        elif o is not None:
            r.error(where, "needs string `layer` and `kind`")
    norms = [
        n.get("module") if isinstance(n, Mapping) else n
        for n in r.get(t, "distributedNorms", p, list, default=[])
    ]
    for i, n in enumerate(norms):
        if not tp_key_ok(n):
            r.error(f"{p}.distributedNorms[{i}]", f"{n!r} must look like {TP_KEY_FORM}")
    unsafe = [
        n.get("message", str(n)) if isinstance(n, Mapping) else str(n)
        for n in r.get(t, "dtensorUnsafe", p, list, default=[])
    ]
    if enabled:
        # what the generated planner cannot do itself refuses the part (never a hand-edit note)
        for i, item in enumerate(rearr):
            if not _rearrangement_generated(item):
                r.error(
                    f"{p}.weightRearrangement[{i}]",
                    f"{item.kind} on {item.layer} needs a weight rearrangement that is not "
                    f"generated: {item.reason}",
                )
        for i, message in enumerate(unsafe):
            r.error(f"{p}.dtensorUnsafe[{i}]", f"sharded weights would reach code that takes "
                    f"no DTensor: {message}")  # fmt: skip
    return TensorParallelPlan(
        enabled=enabled,
        attention_strategy=r.get(t, "attentionStrategy", p, str),
        layers={k: v for k, v in layers.items() if isinstance(k, str) and isinstance(v, str)},
        shard_div_attrs=tuple(a for a in attrs if isinstance(a, str)),
        conditional_layers=conditional,
        weight_rearrangement=tuple(rearr),
        distributed_norms=tuple(n for n in norms if isinstance(n, str)),
        dtensor_unsafe=tuple(unsafe),
    )


def _rearrangement_generated(item: Rearrangement) -> bool:
    """The rearrangements the TP planner writes code for (`render_tp`)."""
    return item.kind == "packed_gated" or (item.kind == "fused_out_down" and bool(item.segments))


def tp_key_ok(key: Any) -> bool:
    """Whether `key` is a TP module key `<list>.*.<path>`."""
    return isinstance(key, str) and TP_KEY_PATTERN.match(key) is not None


def _path_depth(key: str) -> int:
    """Number of dotted parts after the `.*.` of a TP key."""
    return len(key.split(".*.", 1)[1].split("."))


def _parse_components(
    r: _Reader, data: Any
) -> tuple[tuple[ComponentPlan, ...], dict[int, tuple[bool, list[FieldError]]]]:
    """Components, one part each (TE-P / VAE-P): index -> (generated?, its errors).

    An item with errors is kept (its fields as given, `""` where unusable) so that indices,
    and `to_json`, still match the document; it is refused, never generated."""
    if data is None:
        return (), {}
    if not isinstance(data, list):
        r.error("components", f"expected an array, got {_type_name(data)}")
        return (), {}
    out: list[ComponentPlan] = []
    parts: dict[int, tuple[bool, list[FieldError]]] = {}
    for i, item in enumerate(data):
        p = component_part(i)
        rc = _Reader()
        o = rc.obj(item, p) or {}
        generate = bool(rc.get(o, "generate", p, bool, default=True))
        component = rc.get(o, "component", p, str, required=True)
        cls = rc.get(
            o, "class", p, str, required=True, pattern=_IDENTIFIER, pattern_message="not a class"
        )
        kind = rc.get(o, "kind", p, str, required=True, choices=COMPONENT_KINDS)
        out.append(
            ComponentPlan(
                component=component if isinstance(component, str) else "",
                class_name=cls if isinstance(cls, str) else "",
                kind=kind if isinstance(kind, str) else "",
                library=rc.get(o, "library", p, str, default="transformers"),
                generate=generate,
                source=rc.get(o, "source", p, str),
            )
        )
        parts[i] = (generate, rc.errors)
    return tuple(out), parts


def _parse_example(r: _Reader, data: Any) -> ExamplePlan | None:
    e = r.obj(data, "example", required=False)
    if e is None:
        return None
    p = "example"
    name = r.get(
        e,
        "name",
        p,
        str,
        required=True,
        pattern=_EXAMPLE_NAME,
        pattern_message="must be lower case (a-z, 0-9, `_`, `-`, `.`)",
    )
    env = r.get(
        e,
        "envVar",
        p,
        str,
        required=True,
        pattern=_ENV_VAR,
        pattern_message="must be an upper-case environment variable name",
    )
    ints = {}
    for key in ("height", "width", "numFrames", "numInferenceSteps"):
        value = r.get(e, key, p, int)
        if isinstance(value, int) and value <= 0:
            r.error(f"{p}.{key}", "must be positive")
        ints[key] = value
    if not (isinstance(name, str) and isinstance(env, str)):
        return None
    return ExamplePlan(
        name=name,
        env_var=env,
        task_type=r.get(e, "taskType", p, str, default="T2I", choices=TASK_TYPES),
        prompt=r.get(e, "prompt", p, str, default=ExamplePlan.prompt),
        height=ints["height"],
        width=ints["width"],
        num_frames=ints["numFrames"],
        num_inference_steps=ints["numInferenceSteps"],
        guidance_scale=r.get(e, "guidanceScale", p, float),
        enable_separate_cfg=r.get(e, "enableSeparateCfg", p, bool),
    )
