"""A small trained pixel-space DiT and its diffusers pipeline (the bundled `skimage-dit` model).

`SkimageClassPipeline` samples 64x64 RGB images of one of the natural images that scikit-image
ships, by class label or by a short prompt naming the image ("a photo of a cat": chelsea). Its
transformer is diffusers' own `FluxTransformer2DModel` (double- and single-stream blocks) working
on 4x4 pixel patches (48 channels per token, packed like Flux's latents); `ClassTokens` turns a
class into the text tokens and pooled vector Flux expects; the scheduler is
`FlowMatchEulerDiscreteScheduler` (shift 1).
No VAE: the model denoises pixels in [-1, 1].

Trained weights make cache verdicts mean something: random weights change so much from step to
step that a real threshold caches nothing. `training/train_skimage_dit.py` trains it (seeded, data
from `skimage.data` only); docs/trained-model.md has the provenance and the measurements.
torch and diffusers are imported when this module is.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import torch
from diffusers import DiffusionPipeline, FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.image_processor import VaeImageProcessor
from diffusers.models.modeling_utils import ModelMixin
from diffusers.pipelines.pipeline_utils import ImagePipelineOutput
from torch import nn

__all__ = ["PATCH", "ClassTokens", "SkimageClassPipeline", "class_of", "pack", "unpack"]

PATCH = 4  # pixels per token side: a token holds a PATCH x PATCH x 3 patch (48 channels)


# words a short prompt may use for a class (besides the class name itself)
ALIASES = {
    "cat": "chelsea",
    "kitten": "chelsea",
    "wall": "brick",
    "cameraman": "camera",
    "photographer": "camera",
    "cup": "coffee",
    "coin": "coins",
    "rainbow": "colorwheel",
    "stones": "gravel",
    "galaxy": "hubble_deep_field",
    "galaxies": "hubble_deep_field",
    "stars": "hubble_deep_field",
    "space": "hubble_deep_field",
    "cells": "immunohistochemistry",
    "tissue": "immunohistochemistry",
    "eye": "retina",
    "motorcycle": "stereo_motorcycle",
    "motorbike": "stereo_motorcycle",
}


def class_of(prompt: str, names: list[str]) -> int:
    """The class a short prompt names: the class name itself, else the first word that is a
    class name or an alias of one ("a photo of a cat" -> chelsea)."""
    text = prompt.strip().lower()
    if text in names:
        return names.index(text)
    for word in re.findall(r"[a-z_]+", text):
        name = word if word in names else ALIASES.get(word)
        if name in names:
            return names.index(name)
    raise ValueError(f"the prompt {prompt!r} names no class: use one of {', '.join(names)}")


class ClassTokens(ModelMixin, ConfigMixin):
    """Class label -> (text tokens `(B, num_tokens, dim)`, pooled vector `(B, pooled_dim)`)."""

    @register_to_config
    def __init__(
        self,
        class_names: tuple[str, ...] = (),
        num_tokens: int = 8,
        dim: int = 64,
        pooled_dim: int = 64,
    ) -> None:
        super().__init__()
        count = max(len(class_names), 1)
        self.tokens = nn.Parameter(torch.randn(count, num_tokens, dim) * 0.02)
        self.pooled = nn.Embedding(count, pooled_dim)

    def forward(self, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tokens[labels], self.pooled(labels)


def pack(images: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) pixels -> (B, H/4 * W/4, 48) tokens, in Flux's latent packing order."""
    b, c, h, w = images.shape
    x = images.view(b, c, h // PATCH, PATCH, w // PATCH, PATCH).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // PATCH) * (w // PATCH), c * PATCH * PATCH)


def unpack(tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
    b, _, d = tokens.shape
    c = d // (PATCH * PATCH)
    x = tokens.view(b, height // PATCH, width // PATCH, c, PATCH, PATCH).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c, height, width)


def position_ids(height: int, width: int, device: Any, dtype: Any) -> torch.Tensor:
    """Flux's image ids `(H/4 * W/4, 3)`: (0, row, column) per token."""
    rows, cols = height // PATCH, width // PATCH
    ids = torch.zeros(rows, cols, 3)
    ids[..., 1] = torch.arange(rows)[:, None]
    ids[..., 2] = torch.arange(cols)[None, :]
    return ids.reshape(rows * cols, 3).to(device=device, dtype=dtype)


class SkimageClassPipeline(DiffusionPipeline):
    """Class-conditional pixel-space sampling with a Flux-shaped transformer (no CFG)."""

    model_cpu_offload_seq = "class_embedder->transformer"
    _callback_tensor_inputs: ClassVar[list[str]] = ["latents"]

    def __init__(
        self,
        transformer: FluxTransformer2DModel,
        scheduler: FlowMatchEulerDiscreteScheduler,
        class_embedder: ClassTokens,
    ) -> None:
        super().__init__()
        self.register_modules(
            transformer=transformer, scheduler=scheduler, class_embedder=class_embedder
        )
        self.image_processor = VaeImageProcessor(do_resize=False, do_normalize=True)

    @property
    def class_names(self) -> list[str]:
        return list(self.class_embedder.config.class_names)

    def labels(self, prompt: str | list[str] | None, class_labels: Any, batch: int) -> list[int]:
        """Class indices from `class_labels` (ints) or from `prompt` (class names)."""
        names = self.class_names
        if class_labels is not None:
            labels = [class_labels] if isinstance(class_labels, int) else list(class_labels)
        elif prompt is not None:
            prompts = [prompt] if isinstance(prompt, str) else list(prompt)
            labels = [class_of(p, names) for p in prompts]
        else:
            labels = [0]
        if len(labels) == 1 and batch > 1:
            labels = labels * batch
        bad = [label for label in labels if not 0 <= int(label) < len(names)]
        if bad:
            raise ValueError(f"class label {bad[0]} is not in 0..{len(names) - 1}")
        return [int(label) for label in labels]

    @torch.no_grad()
    def __call__(
        self,
        prompt: str | list[str] | None = None,
        class_labels: int | list[int] | None = None,
        num_images_per_prompt: int = 1,
        height: int = 64,
        width: int = 64,
        num_inference_steps: int = 28,
        generator: torch.Generator | list[torch.Generator] | None = None,
        latents: torch.Tensor | None = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Any = None,
        callback_on_step_end_tensor_inputs: list[str] | None = None,
    ) -> Any:
        if height % PATCH or width % PATCH:
            raise ValueError(f"height and width must be multiples of {PATCH}")
        device = self._execution_device
        dtype = self.transformer.dtype
        labels = self.labels(prompt, class_labels, num_images_per_prompt)
        batch = len(labels)
        tokens, pooled = self.class_embedder(torch.tensor(labels, device=device))
        tokens, pooled = tokens.to(dtype), pooled.to(dtype)
        txt_ids = torch.zeros(tokens.shape[1], 3, device=device, dtype=dtype)
        img_ids = position_ids(height, width, device, dtype)
        if latents is None:
            shape = (batch, 3, height, width)
            if isinstance(generator, list):
                noise = torch.cat([torch.randn(shape[1:], generator=g)[None] for g in generator])
            else:
                noise = torch.randn(shape, generator=generator)
            latents = pack(noise).to(device=device, dtype=dtype)
        self.scheduler.set_timesteps(num_inference_steps, device=device)
        timesteps = self.scheduler.timesteps
        self._num_timesteps = len(timesteps)
        for i, t in enumerate(timesteps):
            timestep = t.expand(batch).to(dtype) / 1000
            velocity = self.transformer(
                hidden_states=latents,
                timestep=timestep,
                guidance=None,
                pooled_projections=pooled,
                encoder_hidden_states=tokens,
                txt_ids=txt_ids,
                img_ids=img_ids,
                return_dict=False,
            )[0]
            latents = self.scheduler.step(velocity, t, latents, return_dict=False)[0]
            if callback_on_step_end is not None:
                names = callback_on_step_end_tensor_inputs or ["latents"]
                values = {"latents": latents}
                out = callback_on_step_end(self, i, t, {n: values[n] for n in names if n in values})
                latents = out.pop("latents", latents) if isinstance(out, dict) else latents
        images = unpack(latents.float(), height, width)
        if output_type == "latent":
            result: Any = latents
        else:
            result = self.image_processor.postprocess(images, output_type=output_type)
        self.maybe_free_model_hooks()
        if not return_dict:
            return (result,)
        return ImagePipelineOutput(images=result)
