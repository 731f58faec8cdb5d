"""Pipelines run on prompt embeddings: the published class with its text stack made optional.

Some text stacks cannot be built small offline (the Qwen-VL processors need torchvision's video
processor). These subclasses change nothing but ``_optional_components``, so the pipeline saves
and loads without a text stack and is called with ``prompt_embeds``. One exception: the published
``QwenImage21Pipeline.__init__`` reads the processor (the system prompt's token count, the image-pad
token id, used by prompt encoding only), so its subclass hands ``__init__`` a stand-in for those
reads and then registers the processor as absent. The runtime imports this file (the request's
``model.sourceFiles``) to resolve the class named in ``model_index.json``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from diffusers import (
    BriaFibo2Pipeline,
    Kandinsky6TI2VAPipeline,
    NucleusMoEImagePipeline,
    QwenImage21Pipeline,
)

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


class _NoProcessor:
    """What ``QwenImage21Pipeline.__init__`` reads from its processor (only prompt encoding uses
    the values): an empty system-prompt template and a placeholder image-pad token id."""

    class tokenizer:  # read as ``processor.tokenizer.encode``
        @staticmethod
        def encode(_text: str) -> list[int]:
            return [0]

    @staticmethod
    def apply_chat_template(*_args: Any, **_kwargs: Any) -> list[list[int]]:
        return [[]]


class QwenImage21PipelineWithEmbeds(QwenImage21Pipeline):
    _optional_components: ClassVar[list[str]] = [
        *QwenImage21Pipeline._optional_components,
        *_QWEN_VL,
    ]

    def __init__(
        self,
        scheduler: Any,
        vae: Any,
        text_encoder: Any,
        processor: Any,
        transformer: Any,
        sample_sigmas: list[float] | None = None,
    ) -> None:
        stand_in = processor if processor is not None else _NoProcessor()
        super().__init__(scheduler, vae, text_encoder, stand_in, transformer, sample_sigmas)
        if processor is None:
            self.register_modules(processor=None)
