"""File inputs of a pipeline call (``verify --input name=path``), loaded by their extension.

* images (``.png .jpg .jpeg .webp .bmp .tif .tiff``): ``diffusers.utils.load_image`` -> RGB
  ``PIL.Image``;
* videos (``.gif .mp4 .mov .avi .mkv .webm``): ``diffusers.utils.load_video`` -> a list of RGB
  ``PIL.Image`` frames (GIFs through Pillow, the others through imageio + ffmpeg);
* audio (``.wav``): the standard library's `wave` (8/16/24/32-bit PCM) -> a float32
  ``torch.Tensor`` ``(1, channels, samples)`` in [-1, 1], the batched layout diffusers' audio
  pipelines take (StableAudio's ``initial_audio_waveforms``, Stable Audio 3's ``audio``); other
  formats (``.flac .ogg .mp3``) through ``soundfile`` or ``torchaudio`` when one is installed. The
  sample rate is not passed on: give it with ``--call-arg`` when the pipeline wants it (e.g.
  ``initial_audio_sampling_rate``);
* arrays (``.npy``): ``numpy.load`` (no pickles) -> a ``torch.Tensor`` of the stored shape (the
  way to pass any other layout, e.g. ACE-Step's unbatched ``(channels, samples)``); floating
  arrays are cast to the run's dtype (numpy has no bfloat16, and a pipeline that only moves given
  prompt embeddings to its device would otherwise run float32 activations into bfloat16 layers),
  integer and boolean ones (masks, ids) keep theirs.

`check_inputs` runs in the controller before anything is launched (files exist, are readable and
have a known extension; no import beyond the standard library); `load_inputs` runs in the
workers. Both raise `RunFailure` with code ``BAD_INPUT`` and a one-line message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import RunFailure

__all__ = ["EXTENSIONS", "check_inputs", "input_kind", "load_audio", "load_inputs"]

EXTENSIONS: dict[str, tuple[str, ...]] = {
    "image": (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff"),
    "video": (".gif", ".mp4", ".mov", ".avi", ".mkv", ".webm"),
    "audio": (".wav", ".flac", ".ogg", ".mp3"),
    "array": (".npy",),
}
_HINT = (
    "Pass --input NAME=PATH with an existing, readable file: image "
    f"({' '.join(EXTENSIONS['image'])}), video ({' '.join(EXTENSIONS['video'])}), audio "
    f"({' '.join(EXTENSIONS['audio'])}) or a numpy array (.npy)."
)


def _bad(message: str) -> RunFailure:
    return RunFailure("BAD_INPUT", message, _HINT)


def input_kind(path: str | Path, name: str = "") -> str:
    """``image`` | ``video`` | ``audio`` | ``array`` by extension (`RunFailure` if unknown)."""
    suffix = Path(path).suffix.lower()
    for kind, suffixes in EXTENSIONS.items():
        if suffix in suffixes:
            return kind
    which = f"input {name!r}: " if name else "input "
    raise _bad(f"{which}{path}: unknown file type {suffix or '(no extension)'!r}")


def _missing_reader(path: Path) -> str | None:
    """What reading ``path`` would need that is not installed (None: nothing)."""
    from importlib.util import find_spec

    suffix = path.suffix.lower()
    no_audio_library = find_spec("soundfile") is None and find_spec("torchaudio") is None
    if suffix in EXTENSIONS["audio"] and suffix != ".wav" and no_audio_library:
        return f"reading {suffix} audio needs soundfile or torchaudio, neither is installed"
    ffmpeg = find_spec("imageio_ffmpeg") is not None or bool(os.environ.get("IMAGEIO_FFMPEG_EXE"))
    if suffix in EXTENSIONS["video"] and suffix != ".gif" and not (find_spec("imageio") and ffmpeg):
        return f"reading {suffix} video needs imageio and imageio-ffmpeg (diffusers' load_video)"
    return None


def check_inputs(inputs: Mapping[str, str]) -> None:
    """Every input exists, is a readable file of a known type whose reader is installed.

    Standard library only (the controller calls it before launching anything).
    """
    for name, raw in inputs.items():
        path = Path(raw).expanduser()
        if not name.isidentifier():
            raise _bad(f"input {name!r}: not a valid argument name")
        if not path.is_file():
            raise _bad(f"input {name!r}: {path} does not exist or is not a file")
        if not os.access(path, os.R_OK):
            raise _bad(f"input {name!r}: {path} is not readable")
        input_kind(path, name)
        missing = _missing_reader(path)
        if missing:
            raise _bad(f"input {name!r}: {missing}")


def load_audio(path: str | Path) -> tuple[Any, int]:
    """A float32 ``torch.Tensor`` ``(channels, samples)`` in [-1, 1] and the sample rate."""
    import numpy as np
    import torch

    path = Path(path)
    if path.suffix.lower() == ".wav":
        import wave

        try:
            with wave.open(str(path), "rb") as handle:
                channels = handle.getnchannels()
                width = handle.getsampwidth()
                rate = handle.getframerate()
                raw = handle.readframes(handle.getnframes())
        except (wave.Error, EOFError) as exc:
            # wave reads PCM only; float or compressed WAVs go through soundfile below.
            return _load_audio_library(path, f"wave: {exc}")
        if width == 1:  # 8-bit PCM is unsigned
            samples = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
        elif width == 3:
            b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
            value = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
            value = np.where(value >= 1 << 23, value - (1 << 24), value)
            samples = value.astype(np.float32) / float(1 << 23)
        elif width in (2, 4):
            dtype = "<i2" if width == 2 else "<i4"
            samples = np.frombuffer(raw, dtype=dtype).astype(np.float32) / float(
                1 << (8 * width - 1)
            )
        else:
            raise _bad(f"{path}: {8 * width}-bit WAV samples are not supported")
        data = samples.reshape(-1, channels).T
        return torch.from_numpy(np.ascontiguousarray(data)), rate
    return _load_audio_library(path, None)


def _load_audio_library(path: Path, why: str | None) -> tuple[Any, int]:
    import numpy as np
    import torch

    try:
        import soundfile
    except ImportError:
        soundfile = None
    if soundfile is not None:
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)  # (T, C)
        return torch.from_numpy(np.ascontiguousarray(data.T)), int(rate)
    try:
        import torchaudio
    except ImportError:
        torchaudio = None
    if torchaudio is not None:
        waveform, rate = torchaudio.load(str(path))
        return waveform.float(), int(rate)
    reason = f" ({why})" if why else ""
    raise _bad(
        f"{path}: reading {path.suffix} audio needs soundfile or torchaudio, neither is "
        f"installed{reason}"
    )


def _load_one(name: str, path: Path, dtype: Any = None) -> Any:
    kind = input_kind(path, name)
    if kind == "image":
        from diffusers.utils import load_image

        return load_image(str(path))
    if kind == "video":
        from diffusers.utils import load_video

        return load_video(str(path))
    if kind == "audio":
        return load_audio(path)[0][None]
    import numpy as np
    import torch

    tensor = torch.from_numpy(np.load(path, allow_pickle=False))
    if dtype is not None and tensor.is_floating_point():
        tensor = tensor.to(dtype)
    return tensor


def load_inputs(inputs: Mapping[str, str], dtype: Any = None) -> dict[str, Any]:
    """Load every input into a pipeline call argument (``name -> object``); see the module doc.
    ``dtype``: the run's torch dtype, for floating ``.npy`` arrays."""
    check_inputs(inputs)
    loaded: dict[str, Any] = {}
    for name, raw in inputs.items():
        path = Path(raw).expanduser()
        try:
            loaded[name] = _load_one(name, path, dtype)
        except RunFailure:
            raise
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise _bad(
                f"input {name!r}: cannot read {path}: {type(exc).__name__}: {first}"[:500]
            ) from exc
    return loaded
