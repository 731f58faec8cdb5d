"""NucleusMoEImagePipeline (image): Qwen-Image VAE, MoE image DiT with GQA attention.

No text encoder: the Qwen3-VL encoder needs a processor (image/video processors, chat template)
that cannot be built small offline, so the pipeline is saved without its text stack
(``embeds_pipelines.py``) and called with seeded prompt embeddings (``inputs``), ``prompt: null``.
Experts are off (``moe_enabled=False``): dense blocks, as in diffusers' tests.
"""

from __future__ import annotations

from pathlib import Path

from ._common import EMBEDS_PIPELINES, SEED, NewModel, perturb, prompt_embeds_inputs, save

TEXT_DIM = 16


def build(path: Path) -> None:
    import torch
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        NucleusMoEImageTransformer2DModel,
    )

    from .embeds_pipelines import NucleusMoEImagePipelineWithEmbeds

    torch.manual_seed(SEED)
    transformer = NucleusMoEImageTransformer2DModel(
        patch_size=2,
        in_channels=16,
        out_channels=4,
        num_layers=3,
        attention_head_dim=16,
        num_attention_heads=4,
        num_key_value_heads=2,
        joint_attention_dim=TEXT_DIM,
        axes_dims_rope=(8, 4, 4),
        moe_enabled=False,
        capacity_factors=[8.0, 8.0, 8.0],
    )
    vae = AutoencoderKLQwenImage(
        base_dim=8,
        z_dim=4,
        dim_mult=[1, 2, 4],
        num_res_blocks=1,
        temperal_downsample=[False, True],
        latents_mean=[0.0] * 4,
        latents_std=[1.0] * 4,
    )
    pipe = NucleusMoEImagePipelineWithEmbeds(
        transformer=perturb(transformer),
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae.eval(),
        text_encoder=None,
        processor=None,
    )
    save(pipe, path)


MODEL = NewModel(
    name="nucleus-moe",
    kind="image",
    transformer_class="NucleusMoEImageTransformer2DModel",
    transformer_module="transformer_nucleusmoe_image",
    pipeline_module="nucleusmoe_image.pipeline_nucleusmoe_image",
    build=build,
    request={"height": 32, "width": 32, "steps": 6, "extraCallKwargs": {"prompt": None}},
    inputs=prompt_embeds_inputs(TEXT_DIM, 8, mask=True),
    source_files=(EMBEDS_PIPELINES,),
)
