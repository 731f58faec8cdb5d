"""The role of a pipeline `__call__` parameter, guessed structurally from its name's words, its
annotation and its default (no table of pipelines): `resolution`, `frames`, `duration`, `steps`,
`guidance`, or `input` (a file input: image / video / audio / mask, its `inputKind`)."""

from __future__ import annotations

import re
from typing import Any

from .call_defaults import NO_VALUE

# Annotation words of values that are data (files, tensors), never a size or a count.
_MEDIA_TYPES = re.compile(
    r"PipelineImageInput|PipelineVideoInput|ImageInput|VideoInput|AudioInput|PIL\b|"
    r"Image\.Image|\bImage\b|ndarray|Tensor\b|FloatTensor|LongTensor"
)
_SCALAR_TYPES = re.compile(
    r"^(?:int|float|bool|str)(?:\s*\|\s*None)?$|^Optional\[(?:int|float|bool|str)\]$"
)
_MEDIA_WORDS = {
    "image": "image",
    "images": "image",
    "img": "image",
    "picture": "image",
    "video": "video",
    "videos": "video",
    "frames": "video",
    "audio": "audio",
    "audios": "audio",
    "waveform": "audio",
    "waveforms": "audio",
    "wav": "audio",
    "mask": "mask",
    "masks": "mask",
}
# Words that make a media-named parameter something else: a count, a size, an embedding, a rate.
_NOT_MEDIA_WORDS = {
    "num",
    "per",
    "embeds",
    "embeddings",
    "embed",
    "latents",
    "latent",
    "scale",
    "strength",
    "size",
    "height",
    "width",
    "rate",
    "sampling",
    "kwargs",
    "attention",
    "guidance",
    "steps",
    "id",
    "ids",
    "index",
    "type",
    "in",
    "s",
    "fps",
    "processor",
    "encoder",
    "length",
    "len",
    "seq",
    "max",
    "min",
    "start",
    "end",
    "ratio",
    "mode",
    "interpolation",
    "noise",
    "tokens",
    "token",
    "grid",
}
_RESOLUTION_SIZE_WORDS = {"image", "output", "video", "target", "sample", "frame"}
_FRAME_NAMES = {"video_length", "frame_num", "num_frame", "nframes", "length_frames"}
_DURATION_WORDS = {"duration", "seconds", "secs", "sec"}
_STEP_WORDS = {"inference", "num", "sample", "sampling", "denoising", "diffusion"}


def guess_role(
    name: str, annotation: str | None, default: Any = NO_VALUE
) -> tuple[str | None, str | None]:
    """(role, inputKind) of a call parameter from its name's words, annotation and default."""
    words = [w for w in re.split(r"_+|(?<=[a-z])(?=[A-Z])", name.lower()) if w]
    word_set = set(words)
    ann = annotation or ""
    media_type = bool(_MEDIA_TYPES.search(ann))
    scalar = bool(_SCALAR_TYPES.match(ann.strip())) if ann else False
    if not scalar and default is not NO_VALUE and default is not None:
        scalar = isinstance(default, bool | int | float | str)
    kind = _input_kind(words, ann)
    # 1. file inputs: a media annotation, or a media word in the name that is not a count/size
    derived = word_set & {"embeds", "embeddings", "latents", "latent", "grid"}
    if ("PipelineImageInput" in ann or "PipelineVideoInput" in ann) and not derived:
        return "input", kind or ("video" if "Video" in ann else "image")
    if kind and not (word_set & _NOT_MEDIA_WORDS) and not scalar and (media_type or not ann):
        return "input", kind
    if media_type and not scalar:
        return None, None  # a tensor that is not a media input (latents, embeddings)
    if re.match(r"^(?:bool|Optional\[bool\])(?:\s*\|\s*None)?$", ann.strip()) or isinstance(
        default, bool
    ):
        return None, None  # a switch (use_resolution_binning), not a size or a count
    # 2. scalars by their words
    if (
        word_set & _DURATION_WORDS
        or name.endswith("_in_s")
        or (words[-1:] == ["s"] and word_set & {"length", "end", "time", "audio"})
    ):
        return "duration", None
    if (
        "frames" in word_set
        or name in _FRAME_NAMES
        or ("frame" in word_set and word_set & {"num", "n", "count"})
    ):
        return "frames", None
    last = words[-1] if words else ""
    if (
        word_set & {"height", "width", "resolution"} and last not in {"scale", "ratio", "factor"}
    ) or (last == "size" and (len(words) == 1 or words[-2] in _RESOLUTION_SIZE_WORDS)):
        return "resolution", None
    if last == "steps" and (len(words) == 1 or words[-2] in _STEP_WORDS):
        return "steps", None
    if word_set & {"guidance", "cfg"} and (
        last in {"scale", "rescale", "cfg"} or (last.isdigit() and "scale" in word_set)
    ):
        return "guidance", None
    return None, None


def _input_kind(words: list[str], ann: str) -> str | None:
    kinds = [_MEDIA_WORDS[w] for w in words if w in _MEDIA_WORDS]
    if "mask" in kinds:
        return "mask"
    if kinds:
        return kinds[-1]
    if "Video" in ann:
        return "video"
    if "Audio" in ann:
        return "audio"
    if "Image" in ann or "PIL" in ann:
        return "image"
    return None
