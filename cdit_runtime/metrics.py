"""PSNR and SSIM on float images, per-frame minima for video, and verdicts against the thresholds.

PSNR is computed in float64 on the pipeline's float output (``output_type="np"``, values in
[0, 1]), never on uint8 arrays: cache-dit's default "custom" PSNR squares uint8 differences, which
wrap modulo 256, so it cannot go below about 24 dB (two random images read 27.85 dB instead of
7.65 dB). SSIM is scikit-image's ``structural_similarity`` with ``data_range=1``. numpy and
scikit-image are imported inside the functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .contract import PARALLEL_KINDS, Thresholds

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Comparison", "compare", "psnr", "ssim", "verdict"]


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
    """Metrics of one output against the baseline. Video: averages plus the worst frame."""

    psnr_db: float
    ssim: float
    min_frame_psnr_db: float | None = None
    min_frame_ssim: float | None = None
    frames: int = 1


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


VerdictName = Literal["pass", "warn", "fail", "garbled"]


def verdict(
    kind: str, comparison: Comparison, thresholds: Thresholds, with_cache: bool = False
) -> tuple[VerdictName, str]:
    """Verdict and reason for a phase. Video is judged on its worst frame.

    A cache phase (or a parallel phase that also caches) passes above ``cache_psnr_db`` and
    warns down to ``cache_warn_psnr_db``; parallel phases need ``parallel_psnr_db``. SSIM must
    exceed ``ssim_min`` everywhere. A PSNR that looks plausible (>= ``garbled_min_psnr_db``)
    with SSIM below ``garbled_ssim_below`` is "garbled": the image lost its structure.
    """
    value = comparison.min_frame_psnr_db
    p = comparison.psnr_db if value is None else value
    s = comparison.ssim if comparison.min_frame_ssim is None else comparison.min_frame_ssim
    which = "worst frame " if comparison.min_frame_psnr_db is not None else ""
    cached = kind == "cache" or with_cache
    need = thresholds.cache_psnr_db if cached else thresholds.parallel_psnr_db
    if kind not in PARALLEL_KINDS and kind != "cache":
        raise ValueError(f"no verdict for phase kind {kind!r}")
    shown = "inf" if math.isinf(p) else f"{p:.2f}"
    if s < thresholds.garbled_ssim_below and p >= thresholds.garbled_min_psnr_db:
        return "garbled", (
            f"{which}PSNR {shown} dB looks plausible but SSIM {s:.3f} < "
            f"{thresholds.garbled_ssim_below}: the image lost its structure"
        )
    if p > need and s > thresholds.ssim_min:
        return "pass", f"{which}PSNR {shown} dB > {need} and SSIM {s:.4f} > {thresholds.ssim_min}"
    if cached and p > thresholds.cache_warn_psnr_db and s > thresholds.ssim_min:
        return "warn", (
            f"{which}PSNR {shown} dB is between {thresholds.cache_warn_psnr_db} and {need} "
            f"(SSIM {s:.4f})"
        )
    failed = []
    if not p > need:
        failed.append(f"PSNR {shown} dB <= {need}")
    if not s > thresholds.ssim_min:
        failed.append(f"SSIM {s:.4f} <= {thresholds.ssim_min}")
    return "fail", which + " and ".join(failed)
