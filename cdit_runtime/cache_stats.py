"""DBCache statistics of a run, one entry per cached block list, and the threshold calibration.

cache-dit stores each cached list's statistics on the list itself (``_cached_steps``,
``_residual_diffs`` …, refreshed on every pipeline call) and repeats one of them on the
transformer; `collect` reads the lists only, under their attribute names, so a model with one
cached list reports one entry. Residual diffs that cache-dit did not measure are dropped: it
records ``-1.0`` when the threshold is >= 1 (every eligible step cached, ``forced``), ``-0.0``
when caching is off and ``-2.0`` on a shape mismatch (kept as ``shapeChangedSteps``).

`calibrate` chooses a residual-diff threshold from the diffs a no-cache control measured, so that
a plumbing check on random weights (whose step-to-step diffs stay high) caches a chosen share of
the steps. Runs in the workers; torch is imported inside the functions.
"""

from __future__ import annotations

import math
from typing import Any

from .contract import CacheOptions

__all__ = ["calibrate", "collect", "executed_steps", "warmup_steps"]


def _cached_lists(pipe: Any) -> list[tuple[str, Any]]:
    import torch

    found = []
    for component in ("transformer", "transformer_2"):
        module = getattr(pipe, component, None)
        if not isinstance(module, torch.nn.Module):
            continue
        lists = [
            (name if component == "transformer" else f"{component}.{name}", child)
            for name, child in module.named_modules()
            if isinstance(child, torch.nn.ModuleList) and hasattr(child, "_cached_steps")
        ]
        if not lists and hasattr(module, "_cached_steps"):
            # lists cached as one (`blocks=a + b`, `dummy_blocks_names`): the joined list is not
            # in the module tree; cache-dit keeps its statistics on the transformer too
            lists = [(component, module)]
        found += lists
    return found


def _measured(diffs: dict[Any, Any]) -> tuple[dict[str, float], bool, list[int]]:
    """(measured diffs by step, forced, steps whose residual changed shape)."""
    out: dict[str, float] = {}
    forced = False
    reshaped: list[int] = []
    for step, value in (diffs or {}).items():
        if isinstance(value, list):  # DBPrune: one diff per block; keep the first (Fn)
            value = value[0] if value else None
        if value is None:
            continue
        value = float(value)
        if value == -1.0:
            forced = True
        elif value == -2.0:
            reshaped.append(int(step))
        elif value >= 0.0 and math.copysign(1.0, value) > 0:
            out[str(step)] = value
    return out, forced, sorted(reshaped)


def collect(pipe: Any) -> list[dict[str, Any]] | None:
    """One ``CacheStats`` document per cached block list (None: nothing was cached here)."""
    lists = _cached_lists(pipe)
    if not lists:
        return None
    out = []
    for name, blocks in lists:
        cached = set(getattr(blocks, "_cached_steps", None) or [])
        cached |= set(getattr(blocks, "_cfg_cached_steps", None) or [])
        diffs, forced, reshaped = _measured(getattr(blocks, "_residual_diffs", None) or {})
        entry: dict[str, Any] = {
            "blocks": name,
            "cachedSteps": sorted(int(s) for s in cached),
            "residualDiffs": diffs,
            "forced": forced,
        }
        if reshaped:
            entry["shapeChangedSteps"] = reshaped
        out.append(entry)
    return out


def executed_steps(pipe: Any) -> int | None:
    """Denoising steps cache-dit counted in the last call (the largest over the cached lists)."""
    counts = [
        getattr(blocks, "_accumulated_executed_steps", None) for _, blocks in _cached_lists(pipe)
    ]
    counts = [c for c in counts if isinstance(c, int)]
    return max(counts) if counts else None


def warmup_steps(options: CacheOptions) -> set[int]:
    """Steps cache-dit never caches: its warmup (``range(0, max_warmup_steps, interval)``)."""
    return set(range(0, max(0, options.max_warmup_steps), max(1, options.warmup_interval)))


def calibrate(
    stats: list[dict[str, Any]] | None, options: CacheOptions, steps: int, share: float
) -> dict[str, Any]:
    """A ``Calibration`` document: the threshold under which about ``share`` of the steps cache.

    Per step the largest diff over the cached lists counts (every list must agree to cache);
    eligible steps are those past the warmup with a measured diff (step 0 has no predecessor).
    The threshold sits halfway between the k-th and (k+1)-th smallest eligible diffs, k =
    round(share x steps). Diffs after a cached step differ a little from the control's, and
    ``maxContinuousCachedSteps`` may stop a streak, so the phase reports what was achieved.
    """
    per_step: dict[int, float] = {}
    for entry in stats or []:
        for step, value in entry["residualDiffs"].items():
            per_step[int(step)] = max(per_step.get(int(step), 0.0), value)
    warm = warmup_steps(options)
    eligible = sorted(s for s in per_step if s >= 1 and s not in warm)
    doc: dict[str, Any] = {
        "targetShare": share,
        "threshold": None,
        "eligibleSteps": eligible,
        "probeDiffs": {str(s): per_step[s] for s in sorted(per_step)},
        "reason": "",
    }
    if not per_step:
        doc["reason"] = "the control measured no residual diff (no cached block list ran)"
        return doc
    if not eligible:
        doc["reason"] = (
            f"no step can be cached: the warmup (maxWarmupSteps {options.max_warmup_steps}, "
            f"interval {options.warmup_interval}) covers all {steps} steps; lower --ws"
        )
        return doc
    k = min(len(eligible), max(1, round(share * steps)))
    values = sorted(per_step[s] for s in eligible)
    low = values[k - 1]
    high = values[k] if k < len(values) else None
    threshold = (low + high) / 2 if high is not None and high > low else low * (1 + 1e-6) + 1e-12
    if threshold >= 1.0:
        # cache-dit treats a threshold >= 1 as "always cache" and stops measuring diffs, and with
        # them its shape check: a step whose stream changed shape must be computed by the mask.
        threshold = 1.0
        how = "diffs reach 1.0, so the threshold forces caching (1.0)"
        reshaped = sorted({s for e in stats or [] for s in e.get("shapeChangedSteps", [])})
        if reshaped:
            doc["computeSteps"] = reshaped
            how += (
                f"; step(s) {', '.join(map(str, reshaped))} changed the stream's shape in the "
                "control and are always computed"
            )
    else:
        how = f"halfway between eligible diffs no. {k} and {k + 1} in ascending order"
    doc["threshold"] = threshold
    doc["reason"] = (
        f"{k} of {len(eligible)} eligible steps have a control diff below {threshold:.6g} "
        f"({how}); target {share:.0%} of {steps} steps"
    )
    return doc
