"""What a pipeline returned, as arrays the controller can compare: the output and the final latents.

`extract` turns a pipeline output into an `Output`: its kind (image, video, audio) and a float32
array, or kind ``latents`` with no array when the output is of a type the runtime does not know
(the phase is then judged on the final latents alone). `save` writes the arrays
(``arrays/<phase>.npy``, ``arrays/<phase>.latents.npy``) and a preview PNG. Runs in the workers;
numpy and Pillow are imported inside the functions.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .images import preview

__all__ = ["Output", "extract", "save"]

_IMAGE_ATTRS = ("images", "frames", "videos", "image", "video")


@dataclass
class Output:
    """A pipeline output: ``kind`` image | video | audio | latents (unknown output type)."""

    kind: str
    array: Any = None
    note: str = ""


def _to_array(value: Any) -> Any:
    import numpy as np

    if hasattr(value, "detach"):
        value = value.detach().float().cpu().numpy()
    if (
        isinstance(value, list)
        and value
        and hasattr(value[0], "size")
        and hasattr(value[0], "mode")
    ):
        value = np.stack([np.asarray(im) for im in value])
    array = np.asarray(value)
    if array.dtype == np.uint8:
        return array.astype(np.float32) / 255.0
    return array.astype(np.float32)


def extract(out: Any) -> Output:
    """The comparable part of a pipeline output (never raises for an unknown type)."""
    value = None
    for attr in _IMAGE_ATTRS:
        value = getattr(out, attr, None)
        if value is not None:
            break
    if value is None and isinstance(out, (tuple, list)) and out:
        value = out[0]
    if value is None:
        return Output("latents", None, f"unknown output type {type(out).__name__}")
    try:
        array = _to_array(value)
    except (TypeError, ValueError) as exc:
        return Output("latents", None, f"output {type(value).__name__} is not an array: {exc}")
    if array.dtype.kind not in "fiu" or array.ndim < 2:
        return Output("latents", None, f"output of shape {array.shape} is not an image")
    return Output("video" if array.ndim == 5 else "image", array)


def _save_npy(path: Path, array: Any) -> None:
    import numpy as np

    tmp = path.with_name(f".{path.name}")
    with open(tmp, "wb") as handle:
        np.save(handle, array)
    os.replace(tmp, path)


def save(out_dir: Path, phase_id: str, output: Output, latents: Any) -> dict[str, str]:
    """Write the output array, its preview and the final latents; the files relative to out_dir."""
    from PIL import Image

    arrays = out_dir / "arrays"
    images = out_dir / "images"
    arrays.mkdir(parents=True, exist_ok=True)
    images.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    if output.array is not None:
        _save_npy(arrays / f"{phase_id}.npy", output.array)
        files["array"] = f"arrays/{phase_id}.npy"
        Image.fromarray(preview(output.array)).save(images / f"{phase_id}.png")
        files["output"] = f"images/{phase_id}.png"
    if latents is not None:
        _save_npy(arrays / f"{phase_id}.latents.npy", latents)
        files["latents"] = f"arrays/{phase_id}.latents.npy"
    return files
