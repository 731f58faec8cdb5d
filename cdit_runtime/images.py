"""Preview and difference PNGs of pipeline outputs (numpy and Pillow, imported lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["preview", "save_diff"]


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


def preview(array: np.ndarray) -> np.ndarray:
    """The uint8 image shown for an output (values in [0, 1] -> 0..255)."""
    import numpy as np

    return (np.clip(_frame(array), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def save_diff(reference: np.ndarray, test: np.ndarray, path: Path) -> float:
    """Write |test - reference| (channel mean, stretched to the largest difference) as a PNG.

    Returns the largest absolute difference (0.0: identical, the PNG is black).
    """
    import numpy as np
    from PIL import Image

    diff = np.abs(_frame(test).astype(np.float64) - _frame(reference).astype(np.float64))
    if diff.ndim == 3:
        diff = diff.mean(axis=-1)
    peak = float(diff.max()) if diff.size else 0.0
    scaled = diff / peak if peak > 0 else diff
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray((scaled * 255.0 + 0.5).astype(np.uint8)).save(path)
    return peak
