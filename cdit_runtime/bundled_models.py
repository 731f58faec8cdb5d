"""Models shipped with the runtime: trained weights, small enough to run on CPU in seconds.

`skimage-dit` (`cdit_runtime/bundled/skimage-dit`): a class-conditional pixel-space DiT (diffusers'
`FluxTransformer2DModel`, 3.4 M parameters, bfloat16 weights) trained on the images scikit-image
ships; its pipeline is `cdit_runtime.skimage_pipeline.SkimageClassPipeline`. Trained weights
are what make a cache verdict a statement about quality (docs/trained-model.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

BUNDLED = Path(__file__).resolve().parent / "bundled"
NAMES = ("skimage-dit",)


def bundled_path(name: str = "skimage-dit") -> Path:
    """The saved pipeline folder of bundled model `name`."""
    if name not in NAMES:
        raise ValueError(f"no bundled model {name!r}: one of {', '.join(NAMES)}")
    return BUNDLED / name


def load(name: str = "skimage-dit", device: str = "cpu") -> Any:
    """The bundled pipeline in float32 on `device` (progress bar off)."""
    import torch

    from .skimage_pipeline import SkimageClassPipeline

    pipe = SkimageClassPipeline.from_pretrained(str(bundled_path(name)), torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(device)


def untrained_copy(pipe: Any, seed: int = 0) -> Any:
    """The same pipeline with a freshly initialised transformer (seeded): the control that shows
    a cache measurement depends on the training, not on the plumbing."""
    import copy

    import torch
    from diffusers import FluxTransformer2DModel

    other = copy.deepcopy(pipe)
    torch.manual_seed(seed)
    device = pipe.transformer.device
    other.transformer = FluxTransformer2DModel.from_config(pipe.transformer.config).to(device)
    return other


def sample_with_cache(
    pipe: Any, *, label: int, steps: int, threshold: float | None, warmup: int = 4
) -> tuple[Any, int]:
    """One sample (float64 array `(H, W, 3)` in [0, 1], seed 0) and the steps cache-dit cached,
    with DBCache (Fn 1, Bn 0) at `threshold` on both block lists cached as one, or uncached for
    None. The pipeline is copied: `pipe` stays uncached."""
    import copy

    import numpy as np
    import torch

    pipe = copy.deepcopy(pipe)
    if threshold is not None:
        import cache_dit

        t = pipe.transformer
        # the two lists as one, as cache-dit's own Flux adapter and the generated one cache them
        cache_dit.enable_cache(
            cache_dit.BlockAdapter(
                pipe=pipe,
                transformer=t,
                blocks=t.transformer_blocks + t.single_transformer_blocks,
                blocks_name="transformer_blocks",
                dummy_blocks_names=["single_transformer_blocks"],
                forward_pattern=cache_dit.ForwardPattern.Pattern_1,
            ),
            cache_config=cache_dit.DBCacheConfig(
                num_inference_steps=steps,
                Fn_compute_blocks=1,
                Bn_compute_blocks=0,
                max_warmup_steps=warmup,
                residual_diff_threshold=threshold,
            ),
        )
    image = pipe(
        class_labels=label,
        num_inference_steps=steps,
        generator=torch.Generator().manual_seed(0),
        output_type="np",
    ).images[0]
    cached = set(getattr(pipe.transformer, "_cached_steps", None) or [])
    return np.asarray(image, dtype=np.float64), len(cached)
