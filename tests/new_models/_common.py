"""What every builder shares: the model spec, seeding, weight perturbation and saving."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SEED = 0
_T = "diffusers.models.transformers."
_P = "diffusers.pipelines."
EMBEDS_PIPELINES = str(Path(__file__).with_name("embeds_pipelines.py"))


@dataclass(frozen=True)
class NewModel:
    """One tiny pipeline: where its sources are, how to build it and how to call it.

    ``request``: keys merged into the VerificationRequest (camelCase, e.g. ``numFrames``,
    ``extraCallKwargs``); ``inputs``: writes call-argument files (``.npy`` tensors such as prompt
    embeddings) into a directory and returns name -> path for the request's ``inputs``.
    """

    name: str
    kind: str  # image | video | audio
    transformer_class: str
    transformer_module: str  # dotted, under diffusers.models.transformers
    pipeline_module: str  # dotted, under diffusers.pipelines
    build: Callable[[Path], None]
    request: dict[str, Any] = field(default_factory=dict)
    inputs: Callable[[Path], dict[str, str]] | None = None
    source_files: tuple[str, ...] = ()  # imported by the runtime to resolve the pipeline class

    @property
    def transformer_path(self) -> str:
        return _T + self.transformer_module

    @property
    def pipeline_path(self) -> str:
        return _P + self.pipeline_module


def perturb(model: Any, scale: float = 0.05) -> Any:
    """Add seeded noise to every weight: zero-initialised gates or heads must not hide a fault."""
    import torch

    generator = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * scale)
    return model.eval()


def save(pipe: Any, path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(str(path))


def save_npy(tensor: Any, path: Path) -> str:
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, tensor.detach().numpy())
    return str(path)


def prompt_embeds_inputs(
    dim: int, tokens: int, mask: bool, groups: int | None = None
) -> Callable[[Path], dict[str, str]]:
    """Call-argument files for pipelines called with embeddings instead of a text encoder:
    ``prompt_embeds`` / ``negative_prompt_embeds`` (seeded, ``(1, tokens, dim)``, or
    ``(1, groups, tokens, dim)``) and, with ``mask``, their all-true boolean ``*_mask``."""

    def write(directory: Path) -> dict[str, str]:
        import torch

        generator = torch.Generator().manual_seed(SEED + 2)
        files = {}
        for name in ("prompt_embeds", "negative_prompt_embeds"):
            shape = (1, tokens, dim) if groups is None else (1, groups, tokens, dim)
            embeds = torch.randn(*shape, generator=generator)
            files[name] = save_npy(embeds, directory / f"{name}.npy")
            if mask:
                ones = torch.ones(1, tokens, dtype=torch.bool)
                files[f"{name}_mask"] = save_npy(ones, directory / f"{name}_mask.npy")
        return files

    return write
