"""QwenImage21Pipeline (image): Qwen-Image 2.1 VAE (16x, RGBA), single-stream block-causal DiT
over unpatched latents, with the text keys and values cached after the first step.

No text encoder: the Qwen3-VL processor needs torchvision (see ``nucleus_moe.py``), so the
pipeline is saved without its text stack (``embeds_pipelines.py``; its ``__init__`` reads the
processor's chat template, which gets a stand-in) and called with seeded prompt embeddings,
``prompt: null``. ``true_cfg_scale`` 4 with negative embeddings runs true CFG (off by default).
The VAE has five ``dim_mult`` stages: four 2x downsamples, the 16x the pipeline hard-codes, so
64x64 pixels are 4x4 latent tokens.
"""

from __future__ import annotations

from pathlib import Path

from ._common import EMBEDS_PIPELINES, SEED, NewModel, perturb, prompt_embeds_inputs, save

TEXT_DIM = 16
LATENT_DIM = 4


def build(path: Path) -> None:
    import torch
    from diffusers import (
        AutoencoderKLQwenImage21,
        FlowMatchEulerDiscreteScheduler,
        QwenImage21Transformer2DModel,
    )

    from .embeds_pipelines import QwenImage21PipelineWithEmbeds

    torch.manual_seed(SEED)
    transformer = QwenImage21Transformer2DModel(
        in_channels=LATENT_DIM,
        out_channels=LATENT_DIM,
        num_layers=3,
        attention_head_dim=16,
        num_attention_heads=2,
        context_in_dim=TEXT_DIM,
        mlp_ratio=2,
        axes_dims_rope=(4, 6, 6),
    )
    vae = AutoencoderKLQwenImage21(
        base_dim=4,
        decoder_base_dim=4,
        z_dim=LATENT_DIM,
        dim_mult=[1, 1, 1, 1, 1],
        num_res_blocks=1,
        latents_mean=[0.0] * LATENT_DIM,
        latents_std=[1.0] * LATENT_DIM,
    )
    pipe = QwenImage21PipelineWithEmbeds(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae.eval(),
        text_encoder=None,
        processor=None,
        transformer=perturb(transformer),
    )
    save(pipe, path)


MODEL = NewModel(
    name="qwenimage21",
    kind="image",
    transformer_class="QwenImage21Transformer2DModel",
    transformer_module="transformer_qwenimage21",
    pipeline_module="qwenimage21.pipeline_qwenimage21",
    build=build,
    request={
        "height": 64,
        "width": 64,
        "steps": 6,
        "extraCallKwargs": {"prompt": None, "true_cfg_scale": 4.0},
    },
    inputs=prompt_embeds_inputs(TEXT_DIM, 8, mask=True),
    source_files=(EMBEDS_PIPELINES,),
)
