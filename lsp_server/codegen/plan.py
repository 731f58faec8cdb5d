"""`IntegrationPlan`: the analysis joined with the user's gate-check answers; codegen's input.

The JSON document (``schemaVersion`` 1, camelCase keys) is what the UI edits and what
``cdit-integrate generate PLAN.json`` consumes. `parse_plan` checks it field by field and returns
either a frozen `IntegrationPlan` or every problem as a `FieldError` (``path`` such as
``cache.blockLists[0].forwardPattern``); it never raises on bad input. `IntegrationPlan.to_json`
writes the same shape back: the contract's `PlanDocument` (`cdit_runtime.contract.plan`), through
the contract codec; its JSON Schema is generated from it (`plan_schema`).

Only the shape and the values are checked here; checks against the file system and the target's
registries (does the checkout exist, is the register name shadowed) happen in `generate`.

The plan has independent parts: cache (`cache`), context parallelism (`contextParallel`), tensor
parallelism (`tensorParallel`) and one text-encoder TP or VAE-P part per `components[i]`. Each is
validated on its own: a part with an error is *refused* (`IntegrationPlan.refused`: part -> its
errors) and the others are still generated; a disabled part (`enabled: false`, a component with
`generate: false`) is neither validated nor generated. Errors outside the parts (model, names,
target, example) make the whole plan invalid.

This module is the plan's public face; the code is split by concern:

* `plan_model`: the dataclasses (`IntegrationPlan` and its parts) and the value sets;
* `plan_parse`: `parse_plan` and the plan-wide fields; `plan_parse_parts`: each part's fields;
  `plan_reader`: typed field access that records errors;
* `plan_serialize`: the plan as the contract's `PlanDocument` (`IntegrationPlan.to_json`);
* `plan_answers`: gate-check answers checked against the contract's `AnswersDocument`.
"""

from __future__ import annotations

from .plan_model import (
    CACHE_PART,
    COMPONENT_KINDS,
    CP_PART,
    FORWARD_PATTERNS,
    SCHEMA_VERSION,
    TARGET_KINDS,
    TASK_TYPES,
    TP_KEY_FORM,
    TP_KEY_PATTERN,
    TP_PART,
    TP_STYLES,
    BlockListPlan,
    CachePlan,
    ComponentPlan,
    ContextParallelPlan,
    ExamplePlan,
    FieldError,
    FunctorReason,
    IntegrationPlan,
    MaskReorder,
    ModelInfo,
    Rearrangement,
    Sources,
    StreamMask,
    Target,
    TargetKind,
    TensorParallelPlan,
    component_part,
)
from .plan_parse import parse_plan
from .plan_parse_parts import tp_key_ok

__all__ = [
    "CACHE_PART",
    "COMPONENT_KINDS",
    "CP_PART",
    "FORWARD_PATTERNS",
    "SCHEMA_VERSION",
    "TARGET_KINDS",
    "TASK_TYPES",
    "TP_KEY_FORM",
    "TP_KEY_PATTERN",
    "TP_PART",
    "TP_STYLES",
    "BlockListPlan",
    "CachePlan",
    "ComponentPlan",
    "ContextParallelPlan",
    "ExamplePlan",
    "FieldError",
    "FunctorReason",
    "IntegrationPlan",
    "MaskReorder",
    "ModelInfo",
    "Rearrangement",
    "Sources",
    "StreamMask",
    "Target",
    "TargetKind",
    "TensorParallelPlan",
    "component_part",
    "parse_plan",
    "tp_key_ok",
]
