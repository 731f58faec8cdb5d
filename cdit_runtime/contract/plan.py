"""The IntegrationPlan document: the analysis joined with the gate-check answers; codegen's input.

`PlanDocument` is the JSON the UI edits, `cdit-integrate generate PLAN.json` reads and
`--print-plan` writes (``schemaVersion`` 1; the fields in the document's key order, camelCase
through the contract codec: `to_json`, `from_json`). Its JSON schema is generated from these
dataclasses (`plan_schema`), with the document's name rules (`IDENTIFIER`, `TP_KEY`, ...).

codegen reads a plan written by people with `lsp_server.codegen.parse_plan`, which reports every
problem by field and refuses a part with errors instead of the plan (the codec stops at the first
mismatch); it writes one by turning its `IntegrationPlan` into a `PlanDocument`.

A plan and the gate-check answers it is built from are told apart by `document_kind`: a plan has
`cache`, answers do not (the analysis fills it in).

Standard library only (see `contract`).
"""

# `doc_field(...)` returns `dataclasses.field(...)`; ruff cannot see that through the helper.
# ruff: noqa: RUF009
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from .common import doc_field
from .schema import document_schema

PLAN_SCHEMA_VERSION = 1
PLAN_SCHEMA_ID = "https://cdit-integrator/schemas/integration-plan.json"

DocumentKind = Literal["plan", "answers"]
TargetKind = Literal["standalone", "cache-dit-checkout"]
ForwardPattern = Literal[
    "Pattern_0", "Pattern_1", "Pattern_2", "Pattern_3", "Pattern_4", "Pattern_5"
]
TpStyle = Literal["colwise", "rowwise", "colwise_replicate", "rowwise_replicate_input"]
TaskType = Literal["T2I", "T2V", "I2V", "IE2I", "FLF2V", "VACE"]
ComponentKind = Literal["text_encoder", "vae"]
Container = Literal["ModuleList", "Sequential"]
RouteOwner = Literal["processor", "module"]

# The document's names (regular expressions).
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
SLUG = r"^[a-z][a-z0-9_]*$"
# a block list's module path: an attribute, or a ModuleList held by key in an nn.ModuleDict or
# by index in an nn.ModuleList
LIST_PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\.([A-Za-z_][A-Za-z0-9_]*|[0-9]+))?$"
DOTTED = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
ENV_VAR = r"^[A-Z][A-Z0-9_]*$"
EXAMPLE_NAME = r"^[a-z0-9][a-z0-9_.\-]*$"
# A TP layer key: the block list (attribute path), `*` for every block, the layer inside a block.
TP_KEY = (
    r"^[A-Za-z_][A-Za-z0-9_]*(\.([A-Za-z_][A-Za-z0-9_]*|\d+))*\.\*"
    r"(\.([A-Za-z_][A-Za-z0-9_]*|\d+))+$"
)

_NAME = {"pattern": IDENTIFIER}
_POSITIVE = {"minimum": 1}


def document_kind(data: Mapping[str, Any]) -> DocumentKind:
    """A plan (it has `cache`) or the gate-check answers a plan is built from."""
    return "plan" if "cache" in data else "answers"


@dataclass(frozen=True, kw_only=True)
class PlanSources:
    """Source files the plan was made from: file paths or dotted module names."""

    transformer: str = doc_field("the transformer's source (required)")
    pipeline: str | None = doc_field("the pipeline's source", default=None)
    config: str | None = doc_field("the model's config.json", default=None)
    model_index: str | None = doc_field("the pipeline's model_index.json", default=None)


@dataclass(frozen=True, kw_only=True)
class PlanModel:
    """The gate-check answers about the model."""

    transformer_class: str = doc_field("the transformer class", schema=_NAME)
    transformer_module: str = doc_field("the dotted module the class is imported from")
    pipeline_class: str | None = doc_field("the pipeline class", schema=_NAME, default=None)
    local_path: str | None = doc_field("local model directory (model_index.json)", default=None)
    default_model_id: str | None = doc_field(
        "hub id or path the CLI example defaults to", default=None
    )
    is_diffusers_model: bool = doc_field("a diffusers ModelMixin", default=True)
    sources: PlanSources = doc_field("the source files")


@dataclass(frozen=True, kw_only=True)
class PlanTarget:
    """Where the code goes: one standalone module, or a cache-dit git checkout."""

    JSON_SCHEMA: ClassVar[dict[str, Any]] = {
        "if": {"properties": {"kind": {"const": "standalone"}}},
        "then": {"required": ["path"]},
        "else": {"required": ["root"]},
    }

    kind: TargetKind = doc_field("standalone module or cache-dit checkout")
    path: str | None = doc_field(
        "standalone: the module file to write", default=None, omit_empty=True
    )
    root: str | None = doc_field(
        "checkout: repository root (or the cache_dit package folder)", default=None, omit_empty=True
    )


@dataclass(frozen=True, kw_only=True)
class PlanBlockList:
    """One cached block list: attribute, ForwardPattern and cache-dit's check flags."""

    attr: str = doc_field("the list's module path", schema={"pattern": LIST_PATH})
    forward_pattern: ForwardPattern = doc_field("cache-dit's ForwardPattern")
    check_forward_pattern: bool = doc_field("cache-dit checks the pattern", default=True)
    check_num_outputs: bool = doc_field("cache-dit checks the number of outputs", default=False)
    block_class: str | None = doc_field("the block class", default=None)
    block_class_path: str | None = doc_field("the file defining it", default=None)
    block_class_line: int | None = doc_field("its line", default=None)
    continues: str | None = doc_field(
        "the list whose loop this one continues with the same block call", default=None
    )
    container: Container = doc_field(
        "Sequential: enable() makes it an nn.ModuleList of the same modules", default="ModuleList"
    )


@dataclass(frozen=True, kw_only=True)
class PlanFunctorReason:
    """Why a PatchFunctor is needed (from the analysis), with the transformer source line."""

    kind: str = doc_field("the reason's kind")
    message: str = doc_field("the reason for people", default="")
    line: int = doc_field("line in the transformer source")
    block_list: str | None = doc_field("the block list it is about", default=None)
    severity: str = doc_field("high, medium or low", default="high")


@dataclass(frozen=True, kw_only=True)
class PlanPatchFunctor:
    """Whether a PatchFunctor is generated, and why."""

    enabled: bool = doc_field("generate one", default=False)
    reasons: list[PlanFunctorReason] = doc_field(
        "why (at least one when enabled)", default_factory=list
    )


@dataclass(frozen=True, kw_only=True)
class PlanCache:
    """The cache part: the block lists cache-dit caches."""

    JSON_SCHEMA: ClassVar[dict[str, Any]] = {
        "if": {"properties": {"enabled": {"const": False}}, "required": ["enabled"]},
        "else": {"required": ["blockLists"]},
    }

    block_lists: list[PlanBlockList] = doc_field(
        "the cached lists (required unless the part is disabled)", default_factory=list
    )
    enabled: bool = doc_field("generate the part", default=True)
    has_separate_cfg: bool = doc_field("the pipeline calls the transformer twice", default=False)
    not_cacheable: str | None = doc_field(
        "why no list can be cached (read as the error when there is none)",
        default=None,
        omit_empty=True,
    )
    patch_functor: PlanPatchFunctor = doc_field(
        "the PatchFunctor", default_factory=PlanPatchFunctor
    )


@dataclass(frozen=True, kw_only=True)
class PlanMaskGuard:
    """forward's mask parameters a CP call must leave None, and why."""

    params: list[str] = doc_field("the parameters")
    reason: str = doc_field("why")


@dataclass(frozen=True, kw_only=True)
class PlanSdpaRoute:
    """An attention class calling SDPA itself, routed through cache-dit's CP attention."""

    class_: str = doc_field("the class")
    owner: RouteOwner = doc_field("an attention processor or module")
    names: list[str] = doc_field("bare names bound to SDPA")


@dataclass(frozen=True, kw_only=True)
class PlanKernelFlag:
    """A flag pinned on routed modules so their kernel branch runs."""

    class_: str = doc_field("the class")
    attr: str = doc_field("the attribute")
    value: bool = doc_field("its value")


@dataclass(frozen=True, kw_only=True)
class PlanMaskReorder:
    """`<list>.*` get `mask` permuted into Ulysses' all-to-all order of `streams`."""

    list_: str = doc_field("the block list")
    mask: str = doc_field("the blocks' mask parameter")
    streams: list[str] = doc_field("their two stream parameters, in the attention's order")


@dataclass(frozen=True, kw_only=True)
class PlanStreamMask:
    """`<list>.*` get `mask` split like `stream`."""

    list_: str = doc_field("the block list")
    mask: str = doc_field("the mask parameter")
    stream: str = doc_field("the stream it is split with")


@dataclass(frozen=True, kw_only=True)
class PlanAxisTable:
    """A tensor of the transformer added to the stream along the split axis."""

    attr: str = doc_field("its dotted attribute on the transformer")
    axis: int = doc_field("its axis along the split one, counted from its end (negative)")


@dataclass(frozen=True, kw_only=True)
class PlanAxisInput:
    """Another input of forward split with the latent (its rows follow the split axis)."""

    param: str = doc_field("forward's parameter")
    axis: int = doc_field("its axis split like the latent's")


@dataclass(frozen=True, kw_only=True)
class PlanAxisGuard:
    """`size <op> value`, compared in forward: must agree for the local and the whole size."""

    op: Literal[">", ">=", "<", "<=", "==", "!="] = doc_field("the comparison")
    value: int = doc_field("the literal compared with")


@dataclass(frozen=True, kw_only=True)
class PlanAxisSplit:
    """CP over an input axis (not the token sequence): lists that hold it in the batch keep
    their attention local, lists that attend over it run theirs across ranks."""

    param: str = doc_field("forward's input split at the root")
    axis: int = doc_field("its split axis")
    gather_axis: int = doc_field("the output's axis gathered")
    routed: list[str] = doc_field("block lists attending over the axis")
    local: list[str] = doc_field("block lists holding it in the batch")
    tables: list[PlanAxisTable] = doc_field("tensors sliced per rank", default_factory=list)
    guards: list[PlanAxisGuard] = doc_field("size comparisons checked", default_factory=list)
    inputs: list[PlanAxisInput] = doc_field(
        "other inputs split with it", default_factory=list, omit_empty=True
    )


_SPLIT = {
    "type": "object",
    "properties": {
        "split_dim": {"type": "integer"},
        "expected_dims": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "split_output": {"type": "boolean"},
        "reason": {"type": "string"},
        "line": {"type": "integer"},
    },
    "required": ["split_dim"],
    "additionalProperties": False,
}
_GATHER = {
    "type": "object",
    "properties": {
        "gather_dim": {"type": "integer"},
        "expected_dims": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "outputs": {"type": "integer", "minimum": 1},
        "skip": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "reason": {"type": "string"},
        "line": {"type": "integer"},
    },
    "required": ["gather_dim"],
    "additionalProperties": False,
}
# A module key of the CP plan -> its hooks: a gather at the module's output, or inputs split by
# parameter name (`"0"`, `"1"`: outputs, with `split_output`).
CP_ENTRY: dict[str, Any] = {
    "anyOf": [
        _GATHER,
        {
            "type": "object",
            "not": {"required": ["gather_dim"]},
            "additionalProperties": {
                "anyOf": [
                    _SPLIT,
                    {"type": "array", "items": _SPLIT},
                    {"type": "string"},
                    {"type": "integer"},
                ]
            },
        },
    ]
}


@dataclass(frozen=True, kw_only=True)
class PlanContextParallel:
    """The CP part: cache-dit's hook plan in the analyzer's vocabulary, and what it needs."""

    enabled: bool = doc_field("generate the part", default=False)
    approach: str | None = doc_field("root split, output split, hybrid, ...", default=None)
    plan: dict[str, Any] = doc_field(
        "module key -> split / gather entry",
        schema={"additionalProperties": CP_ENTRY},
        default_factory=dict,
    )
    ulysses_anything: bool = doc_field("use Ulysses Anything Attention", default=False)
    patches: list[str] = doc_field("code the hooks cannot express", default_factory=list)
    ring_unsupported: str | None = doc_field("why ring attention cannot run it", default=None)
    mask_guard: PlanMaskGuard | None = doc_field("mask parameters left None", default=None)
    not_possible: str | None = doc_field("why the analysis gave no plan", default=None)
    ring_masks: bool = doc_field("ring runs through the masked ring steps", default=False)
    sdpa_routes: list[PlanSdpaRoute] = doc_field("SDPA calls routed", default_factory=list)
    flash_names: list[str] = doc_field(
        "names bound to flash_attn_func", default_factory=list, omit_empty=True
    )
    kernel_flags: list[PlanKernelFlag] = doc_field(
        "flags pinned on routed modules", default_factory=list, omit_empty=True
    )
    mask_reorder: PlanMaskReorder | None = doc_field("a mask permuted per block", default=None)
    stream_masks: list[PlanStreamMask] = doc_field(
        "masks split with their stream", default_factory=list
    )
    axis_split: PlanAxisSplit | None = doc_field(
        "a split of an input axis", default=None, omit_empty=True
    )


@dataclass(frozen=True, kw_only=True)
class PlanRearrangement:
    """A fused weight to regroup per rank before sharding."""

    layer: str = doc_field("the layer")
    kind: str = doc_field("packed_gated, fused_out_down, ...")
    reason: str = doc_field("why", default="")
    segments: list[str] = doc_field(
        "its producers, in order", default_factory=list, omit_empty=True
    )


@dataclass(frozen=True, kw_only=True)
class PlanTensorParallel:
    """The TP part: `<list>.*.<path>` -> style, `shard_div_attr` targets, extra steps."""

    enabled: bool = doc_field("generate the part", default=False)
    attention_strategy: str | None = doc_field("mha, gqa_sharded, ...", default=None)
    layers: dict[str, TpStyle] = doc_field(
        "layer key -> style", schema={"propertyNames": {"pattern": TP_KEY}}, default_factory=dict
    )
    shard_div_attrs: list[str] = doc_field("`<list>.*.<path>.<attr>`", default_factory=list)
    conditional_layers: dict[str, str] = doc_field(
        "layer key -> its condition", default_factory=dict
    )
    weight_rearrangement: list[PlanRearrangement] = doc_field(
        "fused weights to regroup", default_factory=list
    )
    distributed_norms: list[str] = doc_field("norms to replace", default_factory=list)
    dtensor_unsafe: list[str] = doc_field("code that takes no DTensor", default_factory=list)


@dataclass(frozen=True, kw_only=True)
class PlanComponent:
    """A text encoder or VAE of the pipeline that cache-dit has no planner for."""

    component: str = doc_field("the pipeline's component name")
    class_: str = doc_field("its class", schema=_NAME)
    kind: ComponentKind = doc_field("text encoder or VAE")
    library: str = doc_field("transformers or diffusers", default="transformers")
    generate: bool = doc_field("generate its planner", default=True)
    source: str | None = doc_field("its source", default=None)


@dataclass(frozen=True, kw_only=True)
class PlanExample:
    """The `cache_dit.generate` CLI example (checkout target only)."""

    name: str = doc_field("the example's name", schema={"pattern": EXAMPLE_NAME})
    env_var: str = doc_field("the model folder's variable", schema={"pattern": ENV_VAR})
    task_type: TaskType = doc_field("the task", default="T2I")
    prompt: str = doc_field("the prompt", default="A cat holding a sign that says hello world")
    height: int | None = doc_field("image height", schema=_POSITIVE, default=None)
    width: int | None = doc_field("image width", schema=_POSITIVE, default=None)
    num_frames: int | None = doc_field("video frames", schema=_POSITIVE, default=None)
    num_inference_steps: int | None = doc_field("steps", schema=_POSITIVE, default=None)
    guidance_scale: float | None = doc_field("guidance", default=None)
    enable_separate_cfg: bool | None = doc_field("cache-dit's separate-CFG flag", default=None)


@dataclass(frozen=True, kw_only=True)
class PlanRefusedPart:
    """A part not generated because of its errors (written, ignored when a plan is read)."""

    part: str = doc_field("cache, contextParallel, tensorParallel or components[i]")
    label: str = doc_field("the part for people")
    reasons: list[str] = doc_field("its errors")


@dataclass(frozen=True, kw_only=True)
class PlanDocument:
    """The analysis joined with the gate-check answers; input of codegen."""

    schema_version: int = doc_field(
        "the document's version", schema={"const": PLAN_SCHEMA_VERSION}, default=1
    )
    model: PlanModel = doc_field("the model")
    register_name: str = doc_field("cache-dit's registration name", schema=_NAME)
    model_slug: str = doc_field("snake_case name of the generated files", schema={"pattern": SLUG})
    target: PlanTarget = doc_field("where the code goes")
    cache: PlanCache = doc_field("the cache part")
    context_parallel: PlanContextParallel = doc_field(
        "the CP part", default_factory=PlanContextParallel
    )
    tensor_parallel: PlanTensorParallel = doc_field(
        "the TP part", default_factory=PlanTensorParallel
    )
    components: list[PlanComponent] = doc_field("text-encoder and VAE parts", default_factory=list)
    example: PlanExample | None = doc_field("the CLI example", default=None)
    provenance: dict[str, Any] = doc_field("where the values came from", default_factory=dict)
    refused: list[PlanRefusedPart] = doc_field("parts refused", default_factory=list)


def plan_schema_text() -> str:
    """The checked-in plan schema file's exact text (`plan.schema.json`)."""
    return json.dumps(plan_schema(), indent=1) + "\n"


def plan_schema() -> dict[str, Any]:
    """The IntegrationPlan's JSON schema, generated from `PlanDocument` (``$defs``)."""
    return document_schema(
        (PlanDocument,),
        schema_id=PLAN_SCHEMA_ID,
        title="IntegrationPlan",
        description=(
            "The analysis joined with the gate-check answers; input of codegen. "
            "Generated by cdit_runtime.contract.plan_schema()."
        ),
        version=PLAN_SCHEMA_VERSION,
    )
