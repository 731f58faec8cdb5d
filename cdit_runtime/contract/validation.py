"""Loading a `VerificationRequest`: the schema, then the values no run can use.

Standard library only (see `contract`). Everything is checked before anything launches; a
`ContractError` carries a readable message of the first problems.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from .codec import ContractError, camel, from_json
from .request import INTEGRATION_KIND_ALIASES, VerificationRequest
from .schema import json_schema


def load_request(data: Mapping[str, Any]) -> VerificationRequest:
    """Validate and build a request; raises `ContractError` with a readable message."""
    from .schema_check import validate

    data = _current_names(data)
    problems = validate(data, json_schema(), "VerificationRequest")
    if problems:
        raise ContractError("; ".join(problems[:5]))
    request: VerificationRequest = from_json(VerificationRequest, data)
    ids = [p.id for p in request.phases]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ContractError(f"phases: duplicate phase ids {duplicates}; give them names")
    if request.model.source in ("local", "shrink") and not request.model.path:
        raise ContractError(f"model: source {request.model.source!r} needs a path")
    if request.model.source == "tiny" and not request.model.family:
        raise ContractError(
            "model: source 'tiny' needs a family (flux | wan | qwenimage | flux1-dev | skimage-dit)"
        )
    if request.integration.kind == "standalone" and not request.integration.path:
        raise ContractError("integration: 'standalone' needs the module path")
    problems = _bad_values(request)
    if problems:
        raise ContractError("; ".join(problems[:3]))
    return request


def _current_names(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The request with an earlier spelling of the integration kind ("checkout") renamed."""
    integration = data.get("integration") if isinstance(data, Mapping) else None
    if not isinstance(integration, Mapping):
        return data
    kind = integration.get("kind")
    if not isinstance(kind, str) or kind not in INTEGRATION_KIND_ALIASES:
        return data
    return {**data, "integration": {**integration, "kind": INTEGRATION_KIND_ALIASES[kind]}}


def _bad_values(request: VerificationRequest) -> list[str]:
    """Values the schema's types allow but no run can use (checked before anything launches)."""
    problems: list[str] = []

    def at_least(where: str, value: float | None, low: float) -> None:
        if value is not None and not value >= low:
            problems.append(f"{where} must be >= {low:g} (got {value!r})")

    def seconds(where: str, value: float | None) -> None:
        if value is not None and not (math.isfinite(value) and value > 0):
            problems.append(f"{where} must be a finite number of seconds > 0 (got {value!r})")

    def finite(where: str, value: float | None) -> None:
        if value is not None and not math.isfinite(value):
            problems.append(f"{where} must be a finite number (got {value!r})")

    if not request.output_dir.strip():
        problems.append("outputDir is empty")
    for i, phase in enumerate(request.phases):
        at_least(f"phases[{i}].size", phase.size, 1)
        at_least(f"phases[{i}].cpSize", phase.cp_size, 1)
        at_least(f"phases[{i}].tpSize", phase.tp_size, 1)
        seconds(f"phases[{i}].timeoutS", phase.timeout_s)
    for key in ("height", "width", "num_frames", "steps", "warmup_steps", "repeat"):
        at_least(camel(key), getattr(request, key), 1)
    at_least("warmup", request.warmup, 0)
    seconds("timeoutS", request.timeout_s)
    seconds("launchTimeoutS", request.launch_timeout_s)
    finite("guidanceScale", request.guidance_scale)
    cache = request.cache
    at_least("cache.fn", cache.fn, 0)
    at_least("cache.bn", cache.bn, 0)
    at_least("cache.maxWarmupSteps", cache.max_warmup_steps, 0)
    at_least("cache.warmupInterval", cache.warmup_interval, 1)
    at_least("cache.maxCachedSteps", cache.max_cached_steps, -1)
    at_least("cache.maxContinuousCachedSteps", cache.max_continuous_cached_steps, -1)
    finite("cache.residualDiffThreshold", cache.residual_diff_threshold)
    at_least("cache.residualDiffThreshold", cache.residual_diff_threshold, 0)
    share = cache.calibrate_share
    if share is not None and not 0 <= share <= 1:
        problems.append(f"cache.calibrateShare must be between 0 and 1 (got {share!r})")
    tune = request.tune
    if tune is not None:
        for key in ("fn", "bn", "residual_diff_thresholds"):
            if not getattr(tune, key):
                problems.append(f"tune.{camel(key)} is empty")
        for i, value in enumerate(tune.fn):
            at_least(f"tune.fn[{i}]", value, 0)
        for i, value in enumerate(tune.bn):
            at_least(f"tune.bn[{i}]", value, 0)
        for i, value in enumerate(tune.residual_diff_thresholds):
            finite(f"tune.residualDiffThresholds[{i}]", value)
            at_least(f"tune.residualDiffThresholds[{i}]", value, 0)
        for i, value in enumerate(tune.max_warmup_steps or []):
            at_least(f"tune.maxWarmupSteps[{i}]", value, 0)
        if tune.attention_backends is not None and not tune.attention_backends:
            problems.append("tune.attentionBackends is empty (null: those available)")
        if tune.compile is not None and not tune.compile:
            problems.append("tune.compile is empty (null: the default)")
        at_least("tune.combine", tune.combine, 0)
        seconds("tune.budgetS", tune.budget_s)
    for field_ in dataclasses.fields(request.thresholds):
        finite(f"thresholds.{camel(field_.name)}", getattr(request.thresholds, field_.name))
    return problems
