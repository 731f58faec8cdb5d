"""The runtime's JSON contract: `VerificationRequest`, `ProgressEvent`, `VerificationResult`.

Standard library only: the language server and the extension read these documents without torch.
Every document carries ``schemaVersion``. JSON keys are the camelCase form of the field names.
The JSON schema (``cdit_runtime/verification.schema.json``) is generated from these dataclasses by
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

* `contract_common`: ``SCHEMA_VERSION``, the literal types (phase kinds, statuses, verdicts ...);
* `contract_request`: `VerificationRequest` and its parts, `Thresholds`;
* `contract_results`: `VerificationResult` and its parts, `ProgressEvent`;
* `contract_json`: `to_json`, `from_json`, `ContractError`;
* `contract_schema`: `json_schema`, `schema_text`;
* `contract_validation`: `load_request`;
* `contract_worker`: the messages a worker rank sends its controller (`Ready` ... `Done`), one
  JSON line each (`encode`, `decode`).
"""

from __future__ import annotations

from .contract_common import (
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
from .contract_json import ContractError, camel, from_json, to_json
from .contract_request import (
    CacheOptions,
    Integration,
    ModelSource,
    NodeSpec,
    PhaseSpec,
    Thresholds,
    TuneOptions,
    VerificationRequest,
)
from .contract_results import (
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
from .contract_schema import json_schema, schema_text
from .contract_validation import load_request

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
    "from_json",
    "json_schema",
    "load_request",
    "schema_text",
    "to_json",
]
