"""What a pipeline returned, as arrays the controller can compare: the output and the final latents.

`extract` turns a pipeline output into an `Output`: its kind and a float32 array.

* ``image`` ``(B, H, W, C)`` and ``video`` ``(B, F, H, W, C)``: ``images`` / ``frames`` /
  ``videos`` / ``image`` / ``video`` (PIL images become [0, 1] floats);
* ``audio``: ``audios`` / ``audio`` (StableAudio, AudioLDM2, ACE-Step, LongCat-Audio-DiT, ...):
  waveforms ``(B, C, T)`` or mono ``(B, T)``; ``sample_rate`` read from the pipeline when it is
  given (``vae.config.sampling_rate``, ``vocoder.config.sampling_rate``, ...);
* ``latents`` with no array and a ``note`` saying why, for anything else: an unknown output type
  or an array that is none of the above (the phase is then judged on the final latents alone).

`extract` never raises. `save` writes the arrays (``arrays/<phase>.npy``,
``arrays/<phase>.latents.npy``), a preview PNG (``images/<phase>.png``: the image, three video
frames, or the waveform and spectrogram) and, for audio, a 16-bit PCM WAV of the first waveform
(``audio/<phase>.wav``, clipped to [-1, 1]). Runs in the workers; numpy and Pillow are imported
inside the functions, the WAV is written with the standard library's `wave`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .images import preview

__all__ = ["DEFAULT_SAMPLE_RATE", "Output", "extract", "sample_rate_of", "save", "write_wav"]

_IMAGE_ATTRS = ("images", "frames", "videos", "image", "video")
_AUDIO_ATTRS = ("audios", "audio")
DEFAULT_SAMPLE_RATE = 16000
# (component, attribute path) where diffusers pipelines keep their output sample rate.
_RATE_SOURCES = (
    ("vocoder", "config.output_sampling_rate"),
    ("vocoder", "config.sampling_rate"),
    ("audio_vae", "config.sample_rate"),
    ("vae", "config.sampling_rate"),
    ("vae", "sampling_rate"),
    ("feature_extractor", "sampling_rate"),
    ("unet", "config.sample_rate"),
)


@dataclass
class Output:
    """A pipeline output: ``kind`` image | video | audio | latents (unknown output type).

    ``sample_rate``: audio only, in Hz (None: not known; the WAV then uses
    ``DEFAULT_SAMPLE_RATE``). ``note``: why an output fell back to ``latents``.
    """

    kind: str
    array: Any = None
    note: str = ""
    sample_rate: int | None = None


def _to_array(value: Any) -> Any:
    import numpy as np

    if hasattr(value, "detach"):
        value = value.detach().float().cpu().numpy()
    if isinstance(value, list) and value and hasattr(value[0], "detach"):
        value = [v.detach().float().cpu().numpy() for v in value]
    if isinstance(value, list) and value and all(hasattr(value[0], a) for a in ("size", "mode")):
        value = np.stack([np.asarray(im) for im in value])
    array = np.asarray(value)
    if array.dtype == np.uint8:
        return array.astype(np.float32) / 255.0
    return array.astype(np.float32)


def _field(out: Any, names: tuple[str, ...]) -> tuple[str, Any]:
    for name in names:
        value = out.get(name) if isinstance(out, Mapping) else getattr(out, name, None)
        if value is not None:
            return name, value
    return "", None


def sample_rate_of(pipe: Any) -> int | None:
    """The output sample rate a diffusers audio pipeline declares (None: none found)."""
    if pipe is None:
        return None
    for component, path in _RATE_SOURCES:
        value: Any = getattr(pipe, component, None)
        for part in path.split("."):
            if value is None:
                break
            value = value.get(part) if isinstance(value, Mapping) else getattr(value, part, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return int(value)
    return None


def _audio(value: Any, name: str, pipe: Any) -> Output:
    array = _to_array(value)
    if array.ndim == 1:
        array = array[None]
    if array.ndim not in (2, 3) or array.shape[-1] < 2:
        return Output("latents", None, f"`{name}` of shape {array.shape} is not a waveform")
    return Output("audio", array, sample_rate=sample_rate_of(pipe))


def extract(out: Any, pipe: Any = None) -> Output:
    """The comparable part of a pipeline output (never raises for an unknown type).

    ``pipe``: the pipeline that produced it, for the audio sample rate.
    """
    name = ""
    try:
        name, value = _field(out, _IMAGE_ATTRS)
        if value is None:
            name, value = _field(out, _AUDIO_ATTRS)
            if value is not None:
                return _audio(value, name, pipe)
        if value is None and isinstance(out, (tuple, list)) and out:
            name, value = "output[0]", out[0]
        if value is None:
            return Output("latents", None, f"unknown output type {type(out).__name__}")
        array = _to_array(value)
    except Exception as exc:  # an output we cannot read must not end the phase
        what = f"`{name}` of {type(out).__name__}" if name else type(out).__name__
        return Output("latents", None, f"output {what} is not an array: {exc}")
    if array.dtype.kind not in "fiu" or array.ndim < 2:
        return Output("latents", None, f"`{name}` of shape {array.shape} is not an image")
    return Output("video" if array.ndim == 5 else "image", array)


def _save_npy(path: Path, array: Any) -> None:
    import numpy as np

    tmp = path.with_name(f".{path.name}")
    with open(tmp, "wb") as handle:
        np.save(handle, array)
    os.replace(tmp, path)


def write_wav(path: Path, waveform: Any, sample_rate: int) -> None:
    """Write ``(C, T)`` or ``(T,)`` float samples as 16-bit PCM (clipped to [-1, 1])."""
    import wave

    import numpy as np

    data = np.asarray(waveform, dtype=np.float64)
    if data.ndim == 1:
        data = data[None]
    pcm = np.round(np.clip(data, -1.0, 1.0) * 32767.0).astype("<i2")
    tmp = path.with_name(f".{path.name}")
    with wave.open(str(tmp), "wb") as handle:
        handle.setnchannels(data.shape[0])
        handle.setsampwidth(2)
        handle.setframerate(int(sample_rate))
        handle.writeframes(np.ascontiguousarray(pcm.T).tobytes())  # interleaved frames
    os.replace(tmp, path)


def save(out_dir: Path, phase_id: str, output: Output, latents: Any) -> dict[str, str]:
    """Write the output array, its preview (and WAV) and the final latents (paths under out_dir).

    Keys: ``array``, ``output`` (the preview PNG), ``audio`` (the WAV), ``latents``.
    """
    from PIL import Image

    arrays = out_dir / "arrays"
    images = out_dir / "images"
    arrays.mkdir(parents=True, exist_ok=True)
    images.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    if output.array is not None:
        _save_npy(arrays / f"{phase_id}.npy", output.array)
        files["array"] = f"arrays/{phase_id}.npy"
        Image.fromarray(preview(output.array, output.kind)).save(images / f"{phase_id}.png")
        files["output"] = f"images/{phase_id}.png"
        if output.kind == "audio":
            audio = out_dir / "audio"
            audio.mkdir(parents=True, exist_ok=True)
            first = output.array[0]  # (C, T), or (T,) for mono (B, T) outputs
            write_wav(audio / f"{phase_id}.wav", first, output.sample_rate or DEFAULT_SAMPLE_RATE)
            files["audio"] = f"audio/{phase_id}.wav"
    if latents is not None:
        _save_npy(arrays / f"{phase_id}.latents.npy", latents)
        files["latents"] = f"arrays/{phase_id}.latents.npy"
    return files
