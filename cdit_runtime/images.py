"""Preview and difference PNGs of pipeline outputs (numpy and Pillow, imported lazily).

Images and video: the first image (or the first, middle and last frames side by side), values in
[0, 1]. Audio (``kind="audio"``: waveforms ``(B, C, T)`` or ``(B, T)``): the first waveform, one
panel per channel drawn on a fixed [-1, 1] scale (so two previews compare by eye), above a
log-magnitude spectrogram of the channel mean. A 3-D array whose last axis is longer than 4 cannot
be an ``(H, W, C)`` image and is drawn as audio when no kind is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["is_audio", "preview", "save_diff"]

_AUDIO_WIDTH = 512
_CHANNEL_HEIGHT = 96
_SPECTRUM_HEIGHT = 128
_SPECTRUM_RANGE_DB = 80.0


def is_audio(array: np.ndarray, kind: str | None = None) -> bool:
    """Whether ``array`` is drawn as audio: ``kind`` says so, or (no kind) its shape does."""
    if kind is not None:
        return kind == "audio"
    return array.ndim == 3 and array.shape[-1] > 4


def _frame(array: np.ndarray) -> np.ndarray:
    """First image, or first/middle/last frames of the first video side by side (float)."""
    import numpy as np

    if array.ndim == 5:
        frames = array[0]
        picks = sorted({0, len(frames) // 2, len(frames) - 1})
        return np.concatenate([frames[i] for i in picks], axis=1)
    if array.ndim == 4:
        return array[0]
    return array


def _waveform(array: np.ndarray) -> np.ndarray:
    """The first waveform of an audio array as ``(C, T)`` float64."""
    import numpy as np

    a = np.asarray(array, dtype=np.float64)
    if a.ndim == 1:
        return a[None]
    if a.ndim == 2:  # (B, T): mono waveforms
        return a[:1]
    return a.reshape(-1, *a.shape[-2:])[0]


def _envelope(signal: np.ndarray, width: int, low: float, high: float, height: int) -> np.ndarray:
    """A ``(height, width)`` float mask: the min..max envelope of ``signal`` per column."""
    import numpy as np

    n = len(signal)
    image = np.zeros((height, width))
    if n == 0:
        return image
    edges = np.linspace(0, n, width + 1)
    starts = np.minimum(np.floor(edges[:-1]).astype(int), n - 1)
    # Each column also reaches the next sample, so sparse signals draw as a connected line.
    stops = np.minimum(np.maximum(np.ceil(edges[1:]).astype(int) + 1, starts + 1), n)
    clipped = np.clip(signal, low, high)
    lo = np.array([clipped[s:e].min() for s, e in zip(starts, stops, strict=True)])
    hi = np.array([clipped[s:e].max() for s, e in zip(starts, stops, strict=True)])
    scale = (height - 1) / (high - low)
    top = np.round((high - hi) * scale).astype(int)
    bottom = np.round((high - lo) * scale).astype(int)
    rows = np.arange(height)[:, None]
    image[(rows >= top[None]) & (rows <= bottom[None])] = 1.0
    return image


def _spectrogram(signal: np.ndarray, width: int, height: int) -> np.ndarray:
    """A ``(height, width)`` log-magnitude STFT in [0, 1] (low frequencies at the bottom)."""
    import numpy as np
    from PIL import Image

    n = len(signal)
    n_fft = int(min(512, max(16, 2 ** int(np.log2(max(n, 2) / 4)))))
    hop = max(1, n_fft // 4)
    pad = (n_fft // 2, n_fft // 2 + max(0, n_fft - n))
    padded = np.pad(signal, pad, mode="reflect" if n > max(pad) else "constant")
    count = 1 + (len(padded) - n_fft) // hop
    frames = np.stack([padded[i * hop : i * hop + n_fft] for i in range(count)])
    magnitude = np.abs(np.fft.rfft(frames * np.hanning(n_fft), axis=-1)).T  # (freq, time)
    db = 20.0 * np.log10(np.maximum(magnitude, 1e-10))
    top = float(db.max())
    scaled = np.clip((db - (top - _SPECTRUM_RANGE_DB)) / _SPECTRUM_RANGE_DB, 0.0, 1.0)[::-1]
    resized = Image.fromarray((scaled * 255.0).astype(np.uint8)).resize(
        (width, height), Image.Resampling.BILINEAR
    )
    return np.asarray(resized, dtype=np.float64) / 255.0


def _colour(values: np.ndarray) -> np.ndarray:
    """[0, 1] -> RGB uint8 on a dark-blue, magenta, yellow ramp."""
    import numpy as np

    stops = np.array([[0.02, 0.02, 0.10], [0.60, 0.15, 0.55], [1.00, 0.90, 0.30]])
    x = np.clip(values, 0.0, 1.0) * (len(stops) - 1)
    i = np.minimum(x.astype(int), len(stops) - 2)
    t = (x - i)[..., None]
    rgb = stops[i] * (1 - t) + stops[i + 1] * t
    return (rgb * 255.0 + 0.5).astype(np.uint8)


def _audio_preview(wave: np.ndarray, *, one_sided: bool = False) -> np.ndarray:
    """Waveform panels (one per channel of ``(C, T)``) above a spectrogram, RGB uint8."""
    import numpy as np

    low = 0.0 if one_sided else -1.0
    panels = []
    for channel in wave:
        mask = _envelope(channel, _AUDIO_WIDTH, low, 1.0, _CHANNEL_HEIGHT)
        panel = np.empty((*mask.shape, 3), dtype=np.uint8)
        panel[:] = (16, 18, 28)
        if not one_sided:
            panel[_CHANNEL_HEIGHT // 2] = (60, 64, 80)  # zero line
        panel[mask > 0] = (120, 220, 255)
        panels.append(panel)
        panels.append(np.full((2, _AUDIO_WIDTH, 3), 90, dtype=np.uint8))
    spectrum = _colour(_spectrogram(wave.mean(axis=0), _AUDIO_WIDTH, _SPECTRUM_HEIGHT))
    return np.concatenate([*panels, spectrum], axis=0)


def preview(array: np.ndarray, kind: str | None = None) -> np.ndarray:
    """The uint8 image shown for an output (images: values in [0, 1] -> 0..255)."""
    import numpy as np

    if is_audio(array, kind):
        return _audio_preview(_waveform(array))
    return (np.clip(_frame(array), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def save_diff(
    reference: np.ndarray, test: np.ndarray, path: Path, kind: str | None = None
) -> float:
    """Write |test - reference| (channel mean, stretched to the largest difference) as a PNG.

    Audio: the difference waveform's envelope per channel (stretched the same way) and its
    spectrogram. Returns the largest absolute difference (0.0: identical, the PNG is blank).
    """
    import numpy as np
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    if is_audio(reference, kind):
        diff = np.abs(_waveform(test) - _waveform(reference))
        peak = float(diff.max()) if diff.size else 0.0
        scaled = diff / peak if peak > 0 else diff
        Image.fromarray(_audio_preview(scaled, one_sided=True)).save(path)
        return peak
    diff = np.abs(_frame(test).astype(np.float64) - _frame(reference).astype(np.float64))
    if diff.ndim == 3:
        diff = diff.mean(axis=-1)
    peak = float(diff.max()) if diff.size else 0.0
    scaled = diff / peak if peak > 0 else diff
    Image.fromarray((scaled * 255.0 + 0.5).astype(np.uint8)).save(path)
    return peak
