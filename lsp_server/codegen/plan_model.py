"""The IntegrationPlan's dataclasses: the model, target and parts, and the plan that joins them.

Constants name the value sets the document allows (`FORWARD_PATTERNS`, `TP_STYLES`, ...: the
contract's, `cdit_runtime.contract.plan`) and the parts (`CACHE_PART`, ...). The JSON document
is read by `plan_parse.parse_plan` and written by `IntegrationPlan.to_json` (the contract's
`PlanDocument` through its codec, `plan_serialize`); `plan.py` re-exports all of it.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cdit_runtime.contract import to_json
from cdit_runtime.contract.plan import (
    PLAN_SCHEMA_VERSION,
    TP_KEY,
    ComponentKind,
    ForwardPattern,
    TargetKind,
    TaskType,
    TpStyle,
)

from .plan_serialize import plan_document

SCHEMA_VERSION = PLAN_SCHEMA_VERSION

TARGET_KINDS: tuple[str, ...] = typing.get_args(TargetKind)
FORWARD_PATTERNS: tuple[str, ...] = typing.get_args(ForwardPattern)
TP_STYLES: tuple[str, ...] = typing.get_args(TpStyle)
TASK_TYPES: tuple[str, ...] = typing.get_args(TaskType)
COMPONENT_KINDS: tuple[str, ...] = typing.get_args(ComponentKind)

# A TP layer key: the block list (attribute path), `*` for every block, the layer inside a block.
TP_KEY_PATTERN = re.compile(TP_KEY)
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
    # "Sequential": enable() makes the attribute an nn.ModuleList of the same modules first
    container: str = "ModuleList"


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
    # attention classes calling SDPA themselves, routed through cache-dit's CP attention by the
    # standalone module: (class name, "processor" | "module", bare names bound to SDPA)
    sdpa_routes: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    # bare names (among the routes' names) bound to FlashAttention-2's `flash_attn_func`
    flash_names: tuple[str, ...] = ()
    # flags pinned on routed modules so their kernel branch runs: (class, attribute, value)
    kernel_flags: tuple[tuple[str, str, bool], ...] = ()
    not_possible: str | None = None  # why the analysis gave no plan (no plan, not disabled)
    # a mask over separately split streams, permuted into all-to-all order at every block of a
    # list: the list, the blocks' mask parameter and their two stream parameters in the order
    # the attention joins them; None: no reorder
    mask_reorder: MaskReorder | None = None
    # masks split with their stream where every block of a list receives it (the text's mask
    # when the text is split for the cross-attention keys)
    stream_masks: tuple[StreamMask, ...] = ()
    # CP over an input axis some lists hold in the batch and others attend over (None: the
    # token sequence is split)
    axis_split: AxisSplit | None = None


@dataclass(frozen=True)
class AxisSplit:
    """forward's `param` split on `axis` at the root and its output gathered on `gather_axis`
    by the generated module; attention of `routed` lists runs across ranks, of `local` lists
    stays on each rank; `tables` (attribute, axis from the end) are sliced to this rank's rows
    at each call; `guards` (`size <op> value`) must agree for the local and the whole size."""

    param: str
    axis: int
    gather_axis: int
    routed: tuple[str, ...]
    local: tuple[str, ...]
    tables: tuple[tuple[str, int], ...] = ()
    guards: tuple[tuple[str, int], ...] = ()
    # other inputs of forward split with `param`: (parameter, its axis)
    inputs: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class StreamMask:
    """`<list>.*` get `mask` split like `stream` (on the axis of the stream's full length)."""

    list_attr: str
    mask: str
    stream: str


@dataclass(frozen=True)
class MaskReorder:
    """`blocks.*` get `mask` permuted into Ulysses' all-to-all order of `streams`."""

    list_attr: str
    mask: str
    streams: tuple[str, str]


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
        """The document (`PlanDocument`) through the contract codec."""
        return typing.cast(dict[str, Any], to_json(plan_document(self)))


def component_part(index: int) -> str:
    return f"components[{index}]"


def _component_index(part: str) -> int | None:
    match = re.fullmatch(r"components\[(\d+)\]", part)
    return int(match.group(1)) if match else None
