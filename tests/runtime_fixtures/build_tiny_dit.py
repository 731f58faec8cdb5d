"""FIXTURE builder: a tiny class-conditional DiTPipeline (real diffusers classes, random weights).

DiT reads ``self.transformer_blocks[0]`` after its block loop, so a cache-dit integration needs a
PatchFunctor: the case the mutation tests use for PatchFunctor faults. Classifier-free guidance
is batched (one transformer call per step). Saved with ``save_pretrained`` so the runtime loads it
from a local path like a real model; the call needs ``class_labels`` (a pipeline argument).
"""

from __future__ import annotations

from pathlib import Path

SEED = 0


def build(path: Path) -> Path:
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, DiTPipeline, DiTTransformer2DModel

    from cdit_runtime.tiny_pipelines import perturb

    torch.manual_seed(SEED)
    transformer = DiTTransformer2DModel(
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=4,
        out_channels=8,
        num_layers=3,
        sample_size=8,
        patch_size=2,
        num_embeds_ada_norm=1000,
    )
    perturb(transformer)  # zero-initialised modulations and heads would hide a wrong block read
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(8, 16, 16),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        sample_size=64,
    )
    pipe = DiTPipeline(
        transformer=transformer.eval(),
        vae=vae.eval(),
        scheduler=DDIMScheduler(num_train_timesteps=1000),
        id2label={0: "cat", 1: "dog", 2: "fish"},
    )
    path.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(str(path))
    return path


if __name__ == "__main__":
    import sys

    print(build(Path(sys.argv[1])))
