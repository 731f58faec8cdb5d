"""PSNR and SSIM on float images, per-frame minima for video, and verdicts against the thresholds.

PSNR is computed in float64 on the pipeline's float output (``output_type="np"``, values in
[0, 1]), never on uint8 arrays: cache-dit's default "custom" PSNR squares uint8 differences, which
wrap modulo 256, so it cannot go below about 24 dB (two random images read 27.85 dB instead of
7.65 dB). SSIM is scikit-image's ``structural_similarity`` with ``data_range=1``. numpy and
scikit-image are imported inside the functions.

Audio (`compare_audio`) has no fixed range and no SSIM: waveform PSNR takes the reference's
peak-to-peak range (max - min over all its samples) as the peak, so a full-scale [-1, 1] signal is
scored like an image on [0, 1] with twice the scale; SNR is ``10 log10(sum ref^2 / sum (ref -
test)^2)``, the error energy against the signal's own energy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .contract import PARALLEL_KINDS, Thresholds

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "Comparison",
    "LatentComparison",
    "NonFiniteError",
    "compare",
    "compare_audio",
    "compare_latents",
    "control_verdict",
    "non_finite",
    "psnr",
    "snr",
    "ssim",
    "verdict",
]


class NonFiniteError(ValueError):
    """An array to compare holds NaN or infinite values: PSNR and SSIM are undefined.

    Never scored as a number: NaN differences would read as an infinite PSNR ("identical").
    """


def non_finite(array: np.ndarray) -> str | None:
    """``"12 NaN and 3 infinite of 3072 values"`` (None: every value is finite)."""
    import numpy as np

    a = np.asarray(array)
    if a.dtype.kind not in "fc":
        return None
    nan = int(np.isnan(a).sum())
    inf = int(np.isinf(a).sum())
    if not nan and not inf:
        return None
    parts = [f"{nan} NaN"] if nan else []
    parts += [f"{inf} infinite"] if inf else []
    return f"{' and '.join(parts)} of {a.size} values"


def _require_finite(what: str, reference: np.ndarray, test: np.ndarray) -> None:
    problems = [
        f"{who} {what} {bad}"
        for who, array in (("the baseline's", reference), ("the compared", test))
        if (bad := non_finite(array)) is not None
    ]
    if problems:
        raise NonFiniteError(f"non-finite {what}: {'; '.join(problems)}")


def psnr(reference: np.ndarray, test: np.ndarray, data_range: float = 1.0) -> float:
    """Peak signal-to-noise ratio in dB on float64 arrays; ``inf`` when identical."""
    import numpy as np

    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(test, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs {b.shape}")
    mse = float(np.mean((a - b) ** 2))
    if mse == 0.0:
        return math.inf
    return 10.0 * math.log10(data_range**2 / mse)


def ssim(reference: np.ndarray, test: np.ndarray, data_range: float = 1.0) -> float:
    """Structural similarity of two HxWxC (or HxW) float images."""
    import numpy as np
    from skimage.metrics import structural_similarity

    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(test, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs {b.shape}")
    side = min(a.shape[0], a.shape[1])
    win = min(7, side if side % 2 else side - 1)
    if win < 3:
        raise ValueError(f"image {a.shape} too small for SSIM")
    channel_axis = -1 if a.ndim == 3 else None
    return float(
        structural_similarity(a, b, data_range=data_range, channel_axis=channel_axis, win_size=win)
    )


@dataclass(frozen=True)
class Comparison:
    """Metrics of one output against the baseline. Video: averages plus the worst frame.

    Audio: ``ssim`` None, ``snr_db`` set, ``frames`` the number of waveforms.
    """

    psnr_db: float
    ssim: float | None
    min_frame_psnr_db: float | None = None
    min_frame_ssim: float | None = None
    frames: int = 1
    snr_db: float | None = None


def compare(reference: np.ndarray, test: np.ndarray) -> Comparison:
    """Compare pipeline outputs: images ``(B, H, W, C)`` / ``(H, W, C)``, video ``(B, F, H, W, C)``.

    Each image (or frame) is scored on its own; PSNR and SSIM are averaged (PSNR of identical
    frames counts as inf only when every frame is identical), and for video the minima are kept.
    """
    import numpy as np

    a = np.asarray(reference)
    b = np.asarray(test)
    if a.shape != b.shape:
        raise ValueError(f"output shapes differ: baseline {a.shape} vs {b.shape}")
    _require_finite("output", a, b)
    is_video = a.ndim == 5
    frames_a = a.reshape(-1, *a.shape[-3:]) if a.ndim >= 4 else a[None]
    frames_b = b.reshape(-1, *b.shape[-3:]) if b.ndim >= 4 else b[None]
    psnrs = [psnr(x, y) for x, y in zip(frames_a, frames_b, strict=True)]
    ssims = [ssim(x, y) for x, y in zip(frames_a, frames_b, strict=True)]
    finite = [p for p in psnrs if math.isfinite(p)]
    # Mean PSNR over frames through the mean squared error, so one identical frame cannot make
    # the mean infinite while others differ.
    if finite:
        mse = [10 ** (-p / 10) for p in psnrs]  # inf -> 0.0
        mean_psnr = -10 * math.log10(sum(mse) / len(mse))
    else:
        mean_psnr = math.inf
    return Comparison(
        psnr_db=mean_psnr,
        ssim=float(np.mean(ssims)),
        min_frame_psnr_db=min(psnrs) if is_video else None,
        min_frame_ssim=min(ssims) if is_video else None,
        frames=len(psnrs),
    )


def snr(reference: np.ndarray, test: np.ndarray) -> float:
    """Signal-to-noise ratio in dB: ``10 log10(sum ref^2 / sum (ref - test)^2)``.

    ``inf`` when identical; ``-inf`` when the reference is silent (all zero) and the test is not.
    """
    import numpy as np

    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(test, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs {b.shape}")
    noise = float(np.sum((a - b) ** 2))
    if noise == 0.0:
        return math.inf
    signal = float(np.sum(a**2))
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def compare_audio(reference: np.ndarray, test: np.ndarray) -> Comparison:
    """Compare waveforms ``(B, C, T)`` / ``(B, T)`` / ``(T,)``: PSNR and SNR, no SSIM.

    PSNR's peak is the reference's peak-to-peak range (max - min over all samples); a constant
    (silent) reference has none, and the full scale of [-1, 1] audio, 2.0, is used instead.
    """
    import numpy as np

    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(test, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"output shapes differ: baseline {a.shape} vs {b.shape}")
    if a.size == 0:
        raise ValueError("empty waveform")
    _require_finite("output", a, b)
    peak = float(a.max() - a.min()) or 2.0
    return Comparison(
        psnr_db=psnr(a, b, data_range=peak),
        ssim=None,
        frames=a.shape[0] if a.ndim > 1 else 1,
        snr_db=snr(a, b),
    )


@dataclass(frozen=True)
class LatentComparison:
    """The denoiser's final latents against the baseline's (peak = the baseline's range)."""

    psnr_db: float
    max_abs_diff: float


def compare_latents(reference: np.ndarray, test: np.ndarray) -> LatentComparison:
    """PSNR of latents with the reference's value range (max - min) as the peak.

    Latents are not bounded like images; their range plays the role of the image's 1.0, so a
    relative error reads on the same dB scale as the output PSNR.
    """
    import numpy as np

    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(test, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"latent shapes differ: baseline {a.shape} vs {b.shape}")
    _require_finite("final latents", a, b)
    peak = float(a.max() - a.min()) if a.size else 0.0
    diff = float(np.abs(a - b).max()) if a.size else 0.0
    return LatentComparison(psnr_db=psnr(a, b, data_range=peak or 1.0), max_abs_diff=diff)


VerdictName = Literal["pass", "warn", "fail", "garbled"]


def _shown(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2f}"


def verdict(
    kind: str,
    comparison: Comparison | None,
    thresholds: Thresholds,
    with_cache: bool = False,
    *,
    dtype: str = "bfloat16",
    latents: LatentComparison | None = None,
) -> tuple[VerdictName, str]:
    """Verdict and reason for a phase. Video is judged on its worst frame.

    A cache phase (or a parallel phase that also caches) passes above ``cache_psnr_db`` and
    warns down to ``cache_warn_psnr_db``; parallel phases and ``kernels`` phases (other attention
    kernels or ``torch.compile``: the same math) need ``thresholds.parallel_for(dtype)``
    (near-exact in float32). SSIM must exceed ``ssim_min`` where it applies (images, video).
    The final latents, when given, must clear the same PSNR: a decoder can hide a difference.
    ``comparison`` None: the output could not be compared, the latents decide alone. A PSNR that
    looks plausible (>= ``garbled_min_psnr_db``) with SSIM below ``garbled_ssim_below`` is
    "garbled": the image lost its structure.
    """
    if kind not in PARALLEL_KINDS and kind not in ("cache", "kernels"):
        raise ValueError(f"no verdict for phase kind {kind!r}")
    if comparison is None and latents is None:
        raise ValueError("nothing to compare: neither an output nor latents")
    cached = kind == "cache" or with_cache
    need = thresholds.cache_psnr_db if cached else thresholds.parallel_for(dtype)
    # (label, PSNR) pairs that must all clear the bar; SSIM where the output has one.
    checks: list[tuple[str, float]] = []
    s: float | None = None
    which = ""
    if comparison is not None:
        value = comparison.min_frame_psnr_db
        which = "worst frame " if value is not None else ""
        checks.append((f"{which}PSNR", comparison.psnr_db if value is None else value))
        s = comparison.ssim if comparison.min_frame_ssim is None else comparison.min_frame_ssim
    if latents is not None:
        checks.append(("latent PSNR", latents.psnr_db))
    if s is not None and comparison is not None:
        p = checks[0][1]
        if s < thresholds.garbled_ssim_below and p >= thresholds.garbled_min_psnr_db:
            return "garbled", (
                f"{which}PSNR {_shown(p)} dB looks plausible but SSIM {s:.3f} < "
                f"{thresholds.garbled_ssim_below}: the image lost its structure"
            )
    worst = min(p for _, p in checks)
    ssim_ok = s is None or s > thresholds.ssim_min
    shown = ", ".join(f"{label} {_shown(p)} dB" for label, p in checks)
    ssim_text = f" and SSIM {s:.4f} > {thresholds.ssim_min}" if s is not None else ""
    if worst > need and ssim_ok:
        return "pass", f"{shown} > {need}{ssim_text}"
    if cached and worst > thresholds.cache_warn_psnr_db and ssim_ok:
        return "warn", f"{shown}: between {thresholds.cache_warn_psnr_db} and {need}"
    failed = [f"{label} {_shown(p)} dB <= {need}" for label, p in checks if not p > need]
    if not ssim_ok and s is not None:
        failed.append(f"SSIM {s:.4f} <= {thresholds.ssim_min}")
    return "fail", " and ".join(failed)


# a control this close to (or above) the baseline's own rerun is at the pipeline's noise floor
RERUN_FLOOR_MARGIN_DB = 3.0


def _below(value: float, floor: float | None) -> str:
    """Why a control's PSNR below the threshold fails, given the baseline's rerun floor."""
    if floor is None:
        return "the integration changes the math"
    if math.isinf(floor):
        return "the integration changes the math: a rerun of the pipeline is bit-identical"
    if value >= floor - RERUN_FLOOR_MARGIN_DB:
        return (
            f"at the pipeline's own rerun floor: a second baseline run reads {floor:.2f} dB "
            "against the first, so on this device the control cannot tell the integration's "
            "effect apart; verify with --deterministic"
        )
    return (
        f"the integration changes the math: below the pipeline's own rerun floor of {floor:.2f} dB"
    )


def control_verdict(
    comparison: Comparison | None,
    latents: LatentComparison | None,
    thresholds: Thresholds,
    dtype: str,
    *,
    cached_steps: int,
    counted_steps: int | None,
    denoise_steps: int | None,
    transformer_calls: int | None = None,
    rerun_floor: float | None = None,
) -> tuple[Literal["pass", "fail"], str]:
    """Does the no-cache control reproduce the baseline (floating-point tolerance)?

    It runs the same integration with caching disabled, so any difference comes from the
    integration itself (a wrong PatchFunctor, ForwardPattern or block list). cache-dit's own
    step count must also match the pipeline's denoising steps: a wrong ``has_separate_cfg``
    makes it count two steps per step (or one per two) and pair the wrong residuals.

    ``rerun_floor``: the baseline's rerun against it (the lowest PSNR; inf: bit-identical).
    A control below the threshold stays a failure, but at that floor it says that the pipeline
    does not reproduce itself on this device, so the control cannot tell the integration's
    effect apart (and how to make it); with a bit-identical rerun the integration changed it.
    """
    need = thresholds.control_for(dtype)
    problems: list[str] = []
    shown: list[str] = []
    low: list[tuple[str, float]] = []
    for label, value in (
        ("PSNR", comparison.psnr_db if comparison is not None else None),
        ("latent PSNR", latents.psnr_db if latents is not None else None),
    ):
        if value is None:
            continue
        shown.append(f"{label} {_shown(value)} dB")
        if not value > need:
            low.append((f"{label} {_shown(value)} dB", value))
    if low:  # one reading of the floor for both (the lowest)
        worst = min(value for _, value in low)
        problems.append(
            f"{', '.join(text for text, _ in low)} <= {need} ({_below(worst, rerun_floor)})"
        )
    if cached_steps:
        problems.append(f"{cached_steps} step(s) were cached although caching was disabled")
    if counted_steps is not None and denoise_steps is not None and counted_steps != denoise_steps:
        calls = ""
        if transformer_calls:
            per_step = transformer_calls / denoise_steps if denoise_steps else 0
            calls = f" ({transformer_calls} transformer calls, {per_step:g} per step)"
        problems.append(
            f"cache-dit counted {counted_steps} denoising steps for the pipeline's "
            f"{denoise_steps}{calls}: has_separate_cfg does not match the transformer calls per "
            "step in this run (separate CFG means two calls per step; guidance settings and a "
            "negative prompt decide how many the pipeline makes)"
        )
    if not shown:
        problems.append("nothing to compare: the control produced neither output nor latents")
    if problems:
        return "fail", "; ".join(problems)
    return "pass", f"reproduces the baseline: {', '.join(shown)} > {need}"
