"""Scoring a finished phase against the baseline: metrics, verdicts and difference images.

The controller scores a phase as soon as both the baseline and the phase output exist (and every
phase again when the baseline finishes). `Baseline` holds the baseline's arrays on disk, loaded
once; `score_phase` fills a `PhaseResult`'s metrics, verdict and notes. numpy and the metrics are
imported inside the functions (the controller imports no torch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import tune
from .contract import (
    CacheStats,
    Calibration,
    ControlResult,
    ErrorInfo,
    PhaseResult,
    PhaseSpec,
    VerificationRequest,
    from_json,
)
from .engagement import judge_engagement

__all__ = [
    "Baseline",
    "ScoringContext",
    "cache_notes",
    "compare_outputs",
    "fill_phase",
    "np_load",
    "score_control",
    "score_phase",
    "tiled_reference",
]

_RANDOM_WEIGHTS = (
    "random weights: they do not converge like trained ones, so cache hit rates and cache "
    "quality say nothing here; the run checks plumbing and numerical equivalence"
)


def np_load(path: Path) -> Any:
    import numpy as np

    return np.load(path)


class Baseline:
    """The baseline's output and final latents on disk (this run's, or a reference run's),
    each loaded once, when first compared."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.latents_path: Path | None = None
        self._array: Any = None
        self._latents: Any = None
        # the lowest PSNR of a rerun of the baseline against it (inf: bit-identical; None: not
        # measured): the floor below which a no-cache control cannot be told apart
        self.rerun_floor: float | None = None

    def use(self, path: Path | None, latents_path: Path | None) -> None:
        """Compare with these files from now on (what was loaded before is dropped)."""
        self.path = path
        self.latents_path = latents_path
        self._array = self._latents = None
        self.rerun_floor = None

    @property
    def missing(self) -> bool:
        """Neither an output nor final latents to compare with."""
        return self.path is None and self.latents_path is None

    def array(self) -> Any:
        if self._array is None:
            self._array = _load(self.path)
        return self._array

    def latent_array(self) -> Any:
        if self._latents is None:
            self._latents = _load(self.latents_path)
        return self._latents

    def non_finite(self) -> str | None:
        """What is not finite in the baseline's output and latents (None: all finite)."""
        from .metrics import non_finite

        problems = []
        for what, array in (
            ("output", self.array()),
            ("final latents", self.latent_array()),
        ):
            bad = non_finite(array) if array is not None else None
            if bad:
                problems.append(f"its {what} {bad}")
        return "; ".join(problems) or None


def _load(path: Path | None) -> Any:
    if path is None or not path.is_file():
        return None
    import numpy as np

    return np.load(path)


@dataclass
class ScoringContext:
    """What scoring a phase needs from its run."""

    out: Path  # the run's output folder (the phases' files are relative to it)
    baseline: Baseline
    request: VerificationRequest
    specs: Mapping[str, PhaseSpec]
    records: Mapping[str, dict[str, Any]]  # the workers' records of the finished phases
    phases: Mapping[str, PhaseResult]
    dtype: str | None  # the run's dtype (resolved)
    baseline_latency: float | None


# ------------------------------------------------------------------------------- worker records


def fill_phase(phase: PhaseResult, record: dict[str, Any]) -> None:
    """A phase's measurements, files and cache statistics from its worker record."""
    phase.status = record["status"]
    phase.config = record.get("config") or {}
    phase.setup_s = record.get("setupS")
    phase.first_call_s = record.get("firstCallS")
    phase.latencies_s = list(record.get("latenciesS") or [])
    phase.latency_s = sum(phase.latencies_s) / len(phase.latencies_s) if phase.latencies_s else None
    phase.peak_memory_gib = record.get("peakMemoryGiB")
    if (record.get("config") or {}).get("compile") and phase.first_call_s and phase.latency_s:
        phase.compile_s = max(0.0, phase.first_call_s - phase.latency_s)
    phase.notes = list(record.get("notes") or [])
    phase.error = from_json(ErrorInfo, record["error"]) if record.get("error") else None
    files = record.get("files") or {}
    phase.images = {k: v for k, v in files.items() if k not in ("array", "latents")}
    for key in ("array", "latents"):
        if files.get(key):
            phase.images[key] = files[key]
    phase.output_kind = record.get("outputKind")
    phase.latent_source = record.get("latentSource")
    phase.steps = record.get("steps")
    if record.get("cacheStats") is not None:
        phase.cache_stats = [from_json(CacheStats, s) for s in record["cacheStats"]]
        cached = {step for stats in phase.cache_stats for step in stats.cached_steps}
        phase.cached_steps = len(cached)
    if record.get("calibration") is not None:
        phase.calibration = from_json(Calibration, record["calibration"])


def cache_notes(phase: PhaseResult, request: VerificationRequest) -> None:
    """The remarks every cache phase gets (random weights, forced caching)."""
    if request.model.source in ("tiny", "shrink"):
        phase.notes.append(_RANDOM_WEIGHTS)
    if any(s.forced for s in phase.cache_stats or []):
        phase.notes.append(
            "residual-diff threshold >= 1 forces caching without measuring diffs; the "
            "no-cache control's measured diffs are in calibration.probeDiffs with "
            "--calibrate-rdt"
        )


# ------------------------------------------------------------------------------------- compare


def compare_outputs(
    out: Path,
    baseline: Baseline,
    files: dict[str, str],
    kind: str | None,
    reference: Any = None,
) -> tuple[Any, Any]:
    """(output comparison or None, latent comparison or None) of a run's files.

    ``reference``: the output to compare with instead of the baseline's (VAE-P: the baseline
    decoded with tiling); the latents are always compared with the baseline's.
    """
    from .metrics import NonFiniteError, compare, compare_audio, compare_latents, non_finite

    comparison = latents = None
    if reference is None:
        reference = baseline.array()
    output = np_load(out / files["array"]) if files.get("array") else None
    final = np_load(out / files["latents"]) if files.get("latents") else None
    reference_latents = baseline.latent_array()
    # NaN or inf in the output or the latents (or the baseline's): a failure of its own,
    # both checked before any metric (NaN differences would read as an infinite PSNR).
    problems = [
        f"{who} {what} {bad}"
        for what, pair in (
            ("output", (reference, output if kind != "latents" else None)),
            ("final latents", (reference_latents, final)),
        )
        for who, array in zip(("the baseline's", "its"), pair, strict=True)
        if array is not None and (bad := non_finite(array)) is not None
    ]
    if problems:
        raise NonFiniteError(
            f"non-finite values: {'; '.join(problems)} (PSNR and SSIM are undefined)"
        )
    if reference is not None and output is not None and kind != "latents":
        compare_output = compare_audio if kind == "audio" else compare
        comparison = compare_output(reference, output)
    if reference_latents is not None and final is not None:
        latents = compare_latents(reference_latents, final)
    return comparison, latents


def tiled_reference(
    phase: PhaseResult, record: dict[str, Any], out: Path, baseline: Baseline
) -> Any:
    """VAE-P: the baseline decoded with tiling on one process (None: compare as usual)."""
    files = record.get("tiledReference") or {}
    if phase.kind != "vae_p" or not files.get("array"):
        return None
    reference = np_load(out / files["array"])
    untiled = baseline.array()
    note = (
        "output compared with the baseline decoded by the same VAE with tiling on one process "
        "(VAE-P always decodes in tiles)"
    )
    if untiled is not None and untiled.shape == reference.shape:
        from .metrics import psnr

        value = psnr(untiled, reference)
        shown = "inf" if math.isinf(value) else f"{value:.2f}"
        note += f"; tiled vs untiled decode of the baseline: {shown} dB"
    phase.notes.append(note)
    if files.get("output"):
        phase.images["reference"] = files["output"]
    return reference


# --------------------------------------------------------------------------------------- score


def score_phase(phase: PhaseResult, run: ScoringContext) -> None:
    """Speedup, metrics against the baseline, verdict and its reason, notes, difference image."""
    from .metrics import verdict

    if phase.status != "ok":
        return
    if phase.kind == "baseline":
        _score_baseline(phase, run.baseline)
        _score_rerun(phase, run)
        return
    if run.baseline_latency and phase.latency_s:
        phase.speedup = run.baseline_latency / phase.latency_s
    if run.baseline.missing:
        return
    spec = run.specs[phase.name]
    record = run.records.get(phase.name, {})
    dtype = run.dtype or "bfloat16"
    reference = tiled_reference(phase, record, run.out, run.baseline)
    try:
        comparison, latents = compare_outputs(
            run.out, run.baseline, phase.images, phase.output_kind, reference
        )
        if comparison is None and latents is None:
            raise ValueError("neither the output nor the final latents could be compared")
    except ValueError as exc:
        phase.verdict = "fail"
        phase.verdict_reason = str(exc)
        return
    _record_metrics(phase, comparison, latents)
    phase.verdict, phase.verdict_reason = verdict(
        phase.kind,
        comparison,
        run.request.thresholds,
        with_cache=spec.cache,
        dtype=dtype,
        latents=latents,
    )
    if spec.kind == "cache" or spec.cache:
        _judge_cache(phase, spec, record, run, dtype)
    judge_engagement(phase, spec, record, run.records, run.specs)
    if reference is not None and phase.verdict in ("pass", "warn"):
        _judge_vae_tiling(phase, reference, run.baseline)
    if comparison is not None and "array" in phase.images:
        _save_diff(phase, comparison, reference, run)


def _score_baseline(phase: PhaseResult, baseline: Baseline) -> None:
    """The reference every other phase is compared with, unless it is not finite."""
    phase.verdict = "reference"
    phase.speedup = 1.0
    phase.verdict_reason = "the reference every other phase is compared with"
    bad = baseline.non_finite()
    if bad:
        phase.verdict = "fail"
        phase.verdict_reason = (
            f"non-finite values: {bad}: no phase can be compared with this baseline"
        )


def _score_rerun(phase: PhaseResult, run: ScoringContext) -> None:
    """The baseline's rerun (its first warmup) against it: how well the pipeline reproduces
    itself on this device, the floor a no-cache control is judged against."""
    files = run.records.get(phase.name, {}).get("rerunFiles")
    if not files or phase.verdict != "reference":
        return
    try:
        comparison, latents = compare_outputs(run.out, run.baseline, files, phase.output_kind)
    except ValueError as exc:
        phase.notes.append(f"its rerun could not be compared: {exc}")
        return
    phase.rerun_psnr_db = comparison.psnr_db if comparison is not None else None
    phase.rerun_latent_psnr_db = latents.psnr_db if latents is not None else None
    values = [v for v in (phase.rerun_psnr_db, phase.rerun_latent_psnr_db) if v is not None]
    if not values:
        return
    finite = [float(v) for v in values if math.isfinite(float(v))]
    run.baseline.rerun_floor = min(finite) if finite else math.inf
    note = (
        f"a rerun of the pipeline (same inputs and seed) reads {min(finite):.2f} dB against it: "
        "the pipeline does not reproduce itself bit for bit on this device (--deterministic "
        "makes it)"
        if finite
        else "a rerun of the pipeline (same inputs and seed) is bit-identical"
    )
    if note not in phase.notes:
        phase.notes.append(note)


def _record_metrics(phase: PhaseResult, comparison: Any, latents: Any) -> None:
    if comparison is not None:
        phase.psnr_db = comparison.psnr_db
        phase.ssim = comparison.ssim
        phase.snr_db = comparison.snr_db
        phase.min_frame_psnr_db = comparison.min_frame_psnr_db
        phase.min_frame_ssim = comparison.min_frame_ssim
    if latents is not None:
        phase.latent_psnr_db = latents.psnr_db
        phase.latent_max_abs_diff = latents.max_abs_diff


def _judge_cache(
    phase: PhaseResult,
    spec: PhaseSpec,
    record: dict[str, Any],
    run: ScoringContext,
    dtype: str,
) -> None:
    """A cached phase: its no-cache control (or its donor's) must pass, and a step be cached."""
    if record.get("control") is not None:
        phase.control = score_control(
            record["control"], dtype, phase.output_kind, run.out, run.baseline, run.request
        )
        if phase.control.verdict != "pass":
            phase.verdict = "fail"
            phase.verdict_reason = f"no-cache control: {phase.control.reason}"
    donor = tune.control_donor(run.request, spec)
    if donor is not None:
        control = run.phases[donor].control
        if control is None or control.verdict != "pass":
            phase.verdict = "fail"
            why = control.reason if control is not None else "it did not run"
            phase.verdict_reason = f"the no-cache control of {donor} (same split): {why}"
        else:
            phase.notes.append(f"the integration is checked by the no-cache control of {donor}")
    if phase.cached_steps == 0 and phase.verdict in ("pass", "warn"):
        phase.verdict = "not_exercised"
        phase.verdict_reason = (
            "no step was cached (the warmup covers the run or every residual diff stayed "
            "above the threshold), so caching itself was not verified; "
            "use --calibrate-rdt SHARE for a plumbing check on random weights"
        )


def _judge_vae_tiling(phase: PhaseResult, reference: Any, baseline: Baseline) -> None:
    """VAE-P on an output below the VAE's tile size split nothing: not exercised."""
    untiled = baseline.array()
    if untiled is not None and untiled.shape == reference.shape:
        import numpy as np

        if np.array_equal(untiled, reference):
            phase.verdict = "not_exercised"
            phase.verdict_reason = (
                "the VAE decoded this output without tiling (it is below the VAE's tile "
                "size), so VAE-P had nothing to split across ranks"
            )


def _save_diff(phase: PhaseResult, comparison: Any, reference: Any, run: ScoringContext) -> None:
    """The difference image against the baseline (or the tiled reference), with a note."""
    from .images import save_diff

    diff = f"images/{phase.name}.diff.png"
    peak = save_diff(
        run.baseline.array() if reference is None else reference,
        np_load(run.out / phase.images["array"]),
        run.out / diff,
        phase.output_kind,
    )
    phase.images["diff"] = diff
    if math.isinf(comparison.psnr_db):
        phase.notes.append("bit-identical to the baseline")
    elif peak > 0:
        phase.notes.append(f"largest pixel difference {peak:.4f} (diff image stretched to it)")


def score_control(
    record: dict[str, Any],
    dtype: str,
    kind: str | None,
    out: Path,
    baseline: Baseline,
    request: VerificationRequest,
) -> ControlResult:
    """The no-cache control of a cache phase: does it reproduce the baseline?"""
    from .metrics import control_verdict

    control = ControlResult(status=record.get("status", "ok"), latency_s=record.get("latencyS"))
    files = record.get("files") or {}
    try:
        comparison, latents = compare_outputs(out, baseline, files, kind)
    except ValueError as exc:
        control.verdict, control.reason = "fail", str(exc)
        return control
    if comparison is not None:
        control.psnr_db = comparison.psnr_db
        control.ssim = comparison.ssim
    if latents is not None:
        control.latent_psnr_db = latents.psnr_db
        control.latent_max_abs_diff = latents.max_abs_diff
    cached = {step for stats in record.get("cacheStats") or [] for step in stats["cachedSteps"]}
    control.cached_steps = len(cached)
    control.verdict, control.reason = control_verdict(
        comparison,
        latents,
        request.thresholds,
        dtype,
        cached_steps=len(cached),
        counted_steps=record.get("executedSteps"),
        denoise_steps=record.get("denoiseSteps"),
        transformer_calls=record.get("transformerCalls"),
        rerun_floor=baseline.rerun_floor,
    )
    return control
