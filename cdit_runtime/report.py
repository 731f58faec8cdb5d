"""The results table (Markdown) of a `VerificationResult`: one row per phase."""

from __future__ import annotations

import math

from .contract import PhaseResult, TuneReport, VerificationResult

__all__ = ["render_checks", "render_table", "render_tune"]


def _num(value: float | str | None, fmt: str) -> str:
    if value is None:
        return "-"
    if value == "inf" or (isinstance(value, float) and math.isinf(value)):
        return "inf"
    return format(value, fmt)


def render_table(result: VerificationResult) -> str:
    """Phase, status, latency, speedup, PSNR, SSIM, peak GiB per device and verdict per row."""
    rows = [
        "| Phase | Status | Latency (s) | Speedup | PSNR (dB) | SSIM | Peak GiB per device "
        "| Verdict |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for phase in result.phases:
        psnr = _num(phase.psnr_db, ".2f")
        if phase.min_frame_psnr_db is not None:
            psnr += f" (min {_num(phase.min_frame_psnr_db, '.2f')})"
        ssim = _num(phase.ssim, ".4f")
        if phase.min_frame_ssim is not None:
            ssim += f" (min {_num(phase.min_frame_ssim, '.4f')})"
        memory = (
            " / ".join(f"{m:.2f}" for m in phase.peak_memory_gib) if phase.peak_memory_gib else "-"
        )
        verdict = phase.verdict or "-"
        if phase.error is not None and phase.status != "ok":
            verdict = f"{phase.error.code}: {phase.error.message}"
        rows.append(
            f"| {phase.name} | {phase.status} | {_num(phase.latency_s, '.3f')} | "
            f"{_num(phase.speedup, '.2f')} | {psnr} | {ssim} | {memory} | "
            f"{verdict.replace('|', '/')} |"
        )
    return "\n".join(rows) + "\n"


def _control(phase: PhaseResult) -> str:
    control = phase.control
    if control is None:
        return "-"
    if control.status != "ok" and control.error is not None:
        return f"{control.status}: {control.error.code}: {control.error.message}"
    if control.verdict == "fail":
        return f"fail: {control.reason}"
    return control.verdict or control.status


def render_checks(result: VerificationResult) -> str:
    """The evidence the verdicts also rest on: final latents, cached steps, no-cache control.

    Empty when no judged phase has any of them.
    """
    rows = [
        "| Phase | Output | Latent PSNR (dB) | Latent max abs diff | Cached steps "
        "| No-cache control | Control PSNR (dB) | Control latent PSNR (dB) |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for phase in result.phases:
        if phase.verdict in (None, "reference"):
            continue
        control = phase.control
        cached = "-" if phase.cached_steps is None else f"{phase.cached_steps}/{phase.steps}"
        diff = "-" if phase.latent_max_abs_diff is None else f"{phase.latent_max_abs_diff:.3g}"
        rows.append(
            f"| {phase.name} | {phase.output_kind or '-'} | {_num(phase.latent_psnr_db, '.2f')} "
            f"| {diff} | {cached} | {_control(phase).replace('|', '/')} "
            f"| {_num(control.psnr_db, '.2f') if control else '-'} "
            f"| {_num(control.latent_psnr_db, '.2f') if control else '-'} |"
        )
    return "\n".join(rows) + "\n" if len(rows) > 2 else ""


def render_tune(tune: TuneReport) -> str:
    """The tune's points (front marked, recommendation first), its notes and the advice."""
    rows = [
        "| Point | Stage | Latency (s) | Compile (s) | Speedup | PSNR (dB) | SSIM | Cached "
        "| Verdict | Front |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for point in tune.points:
        mark = "recommended" if point.phase == tune.recommended else ""
        mark = mark or ("front" if point.on_front else "")
        verdict = point.verdict or point.status
        cached = "-" if point.cached_steps is None else str(point.cached_steps)
        rows.append(
            f"| {point.phase} | {point.stage} | {_num(point.latency_s, '.3f')} "
            f"| {_num(point.compile_s, '.1f')} | {_num(point.speedup, '.2f')} "
            f"| {_num(point.psnr_db, '.2f')} | {_num(point.ssim, '.4f')} | {cached} "
            f"| {verdict} | {mark} |"
        )
    lines = ["", "Tune:", "\n".join(rows)]
    lines += [f"- {note}" for note in tune.notes]
    if tune.recommended:
        lines += ["", f"Recommended: {tune.recommended}", "", tune.python.rstrip(), "", tune.cli]
    return "\n".join(lines) + "\n"
