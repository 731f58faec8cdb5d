"""The documents that cross a process boundary: `VerificationRequest`, `ProgressEvent`,
`VerificationResult` (editor or CLI <-> runtime), and a worker rank's messages to its controller.

Standard library only: the language server, the extension's Python side and the runtime import it
without torch (the base install has it). Every document carries ``schemaVersion``. JSON keys are
the camelCase form of the field names, through one codec (`codec`). The JSON schema
(``verification.schema.json`` beside this file) is generated from these dataclasses by
`json_schema()`, so defaults — the acceptance thresholds above all — are defined once, here.

Acceptance thresholds (`Thresholds`, the one place they are defined): cache PSNR > 30 dB passes,
25-30 dB warns; CP/TP/TE-P/VAE-P/hybrid PSNR > 35 dB in bfloat16/float16 and a near-exact
threshold in float32 (calibrated: ``docs/verification-thresholds.md``); SSIM > 0.90 always; a
plausible PSNR (>= 20 dB) with SSIM < 0.5 is "garbled". For video the verdict uses the minimum over
frames, not the average. Every verdict also needs the denoiser's final latents to clear the same
threshold, and a cache phase needs its no-cache control (the integration with caching disabled) to
reproduce the baseline; a cache phase that cached no step is ``not_exercised``, never ``pass``, and
so is a parallel phase whose ranks each computed the whole model (`engagement`).

The contract is split by concern; every name stays importable from here:

* `common`: ``SCHEMA_VERSION``, the literal types (phase kinds, statuses, verdicts ...);
* `request`: `VerificationRequest` and its parts, `Thresholds`;
* `results`: `VerificationResult` and its parts, `ProgressEvent`;
* `codec`: `to_json`, `from_json`, `ContractError`;
* `schema`: `json_schema`, `schema_text`;
* `problem`: `Problem`, one error as data (``{code, message, hint, path, line}``), and
  `ProblemError`, which carries it out of a service;
* `validation`: `load_request`;
* `worker`: the messages a worker rank sends its controller (`Ready` ... `Done`), one
  JSON line each (`encode`, `decode`);
* `plan`: the IntegrationPlan document (`PlanDocument`), its schema (`plan_schema`) and
  `document_kind` (a plan or the gate-check answers it is built from).
"""

from __future__ import annotations

from .codec import ContractError, camel, from_json, to_json
from .common import (
    PARALLEL_KINDS,
    PHASE_KINDS,
    SCHEMA_FILE,
    SCHEMA_VERSION,
    SINGLE_KINDS,
    DeviceKind,
    DType,
    EventKind,
    OutputKind,
    PhaseKind,
    PhaseStatus,
    RunStatus,
    Verdict,
)
from .plan import PlanDocument, document_kind, plan_schema
from .problem import Problem, ProblemError
from .request import (
    CacheOptions,
    Integration,
    ModelSource,
    NodeSpec,
    PhaseSpec,
    Thresholds,
    TuneOptions,
    VerificationRequest,
)
from .results import (
    CacheStats,
    Calibration,
    ControlResult,
    Environment,
    ErrorInfo,
    IntegrationInfo,
    LaunchInfo,
    PhaseResult,
    ProgressEvent,
    TunePoint,
    TuneReport,
    VerificationResult,
)
from .schema import json_schema, schema_text
from .validation import load_request

__all__ = [
    "PARALLEL_KINDS",
    "PHASE_KINDS",
    "SCHEMA_FILE",
    "SCHEMA_VERSION",
    "SINGLE_KINDS",
    "CacheOptions",
    "CacheStats",
    "Calibration",
    "ContractError",
    "ControlResult",
    "DType",
    "DeviceKind",
    "Environment",
    "ErrorInfo",
    "EventKind",
    "Integration",
    "IntegrationInfo",
    "LaunchInfo",
    "ModelSource",
    "NodeSpec",
    "OutputKind",
    "PhaseKind",
    "PhaseResult",
    "PhaseSpec",
    "PhaseStatus",
    "PlanDocument",
    "Problem",
    "ProblemError",
    "ProgressEvent",
    "RunStatus",
    "Thresholds",
    "TuneOptions",
    "TunePoint",
    "TuneReport",
    "Verdict",
    "VerificationRequest",
    "VerificationResult",
    "camel",
    "document_kind",
    "from_json",
    "json_schema",
    "load_request",
    "plan_schema",
    "schema_text",
    "to_json",
]
