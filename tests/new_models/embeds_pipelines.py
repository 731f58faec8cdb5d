"""Pipelines run on prompt embeddings: the published class with its text stack made optional.

Some text stacks cannot be built small offline (the Qwen-VL processors need torchvision's video
processor). These subclasses change nothing but ``_optional_components``, so the pipeline saves
and loads without a text stack and is called with ``prompt_embeds``. The runtime imports this
file (the request's ``model.sourceFiles``) to resolve the class named in ``model_index.json``.
"""

from __future__ import annotations

from typing import ClassVar

from diffusers import BriaFibo2Pipeline, Kandinsky6TI2VAPipeline, NucleusMoEImagePipeline

_QWEN_VL = ["text_encoder", "processor"]


class NucleusMoEImagePipelineWithEmbeds(NucleusMoEImagePipeline):
    _optional_components: ClassVar[list[str]] = [
        *NucleusMoEImagePipeline._optional_components,
        *_QWEN_VL,
    ]


class BriaFibo2PipelineWithEmbeds(BriaFibo2Pipeline):
    _optional_components: ClassVar[list[str]] = [*BriaFibo2Pipeline._optional_components, *_QWEN_VL]


class Kandinsky6TI2VAPipelineWithEmbeds(Kandinsky6TI2VAPipeline):
    _optional_components: ClassVar[list[str]] = [
        *Kandinsky6TI2VAPipeline._optional_components,
        "text_encoder",
        "tokenizer",
        "text_encoder_2",
        "tokenizer_2",
    ]
