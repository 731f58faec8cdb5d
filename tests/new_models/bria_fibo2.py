"""BriaFibo2Pipeline (image): Flux2 VAE, a noise-refiner list, a perceiver over the caption and
a main list whose blocks at ``injection_layer_ids`` cross-attend to the caption.

Called on seeded caption features without a text stack (Qwen3-VL, see ``nucleus_moe.py``):
``(1, 1 + injections, tokens, dim)``, one bundle for the perceiver and one per injection block.
"""

from __future__ import annotations

from pathlib import Path

from ._common import EMBEDS_PIPELINES, SEED, NewModel, perturb, prompt_embeds_inputs, save

CAPTION_DIM = 24
INJECTION_LAYERS = (1, 3)  # blocks of `layers` that cross-attend to the caption


def build(path: Path) -> None:
    import torch
    from diffusers import (
        AutoencoderKLFlux2,
        BriaFibo2Transformer2DModel,
        FlowMatchEulerDiscreteScheduler,
    )

    from .embeds_pipelines import BriaFibo2PipelineWithEmbeds

    torch.manual_seed(SEED)
    transformer = BriaFibo2Transformer2DModel(
        in_channels=4,
        patch_size=2,
        dim=32,
        n_layers=4,
        n_refiner_layers=1,
        n_heads=2,
        cap_feat_dim=CAPTION_DIM,
        injection_layer_ids=INJECTION_LAYERS,
        perceiver_num_layers=1,
        min_num_gist_tokens=4,
        max_num_gist_tokens=8,
        gist_step=4,
        gist_min_text_len=4,
        gist_max_text_len=16,
        axes_dims=(4, 6, 6),
        axes_lens=(64, 32, 32),
    )
    vae = AutoencoderKLFlux2(
        block_out_channels=(8, 16),
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        sample_size=32,
    )
    pipe = BriaFibo2PipelineWithEmbeds(
        transformer=perturb(transformer),
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae.eval(),
        text_encoder=None,
        processor=None,
    )
    save(pipe, path)


MODEL = NewModel(
    name="bria-fibo2",
    kind="image",
    transformer_class="BriaFibo2Transformer2DModel",
    transformer_module="transformer_bria_fibo2",
    pipeline_module="bria_fibo2.pipeline_bria_fibo2",
    build=build,
    request={"height": 32, "width": 32, "steps": 6, "extraCallKwargs": {"prompt": None}},
    inputs=prompt_embeds_inputs(CAPTION_DIM, 8, mask=True, groups=1 + len(INJECTION_LAYERS)),
    source_files=(EMBEDS_PIPELINES,),
)
