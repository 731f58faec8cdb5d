"""LattePipeline (video): T5 text encoder, image VAE, spatial and temporal block lists.

Latte's forward walks its two lists together (``for i, (spatial_block, temp_block) in
enumerate(zip(self.transformer_blocks, self.temporal_transformer_blocks))``): the suite's model
with two block lists.
"""

from __future__ import annotations

from pathlib import Path

from ._common import SEED, NewModel, perturb, save


def build(path: Path) -> None:
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, LattePipeline, LatteTransformer3DModel
    from transformers import T5Config, T5EncoderModel

    from cdit_runtime.tiny_pipelines import _t5_tokenizer

    torch.manual_seed(SEED)
    tokenizer = _t5_tokenizer()
    text_encoder = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer) + 8,
            d_model=32,
            d_kv=8,
            d_ff=37,
            num_layers=1,
            num_heads=4,
            relative_attention_num_buckets=8,
            is_encoder_decoder=False,
        )
    )
    transformer = LatteTransformer3DModel(
        sample_size=8,
        num_layers=2,
        patch_size=2,
        attention_head_dim=8,
        num_attention_heads=2,
        caption_channels=32,
        in_channels=4,
        cross_attention_dim=16,
        out_channels=8,
        attention_bias=True,
        activation_fn="gelu-approximate",
        num_embeds_ada_norm=1000,
        norm_type="ada_norm_single",
        norm_elementwise_affine=False,
        norm_eps=1e-6,
        video_length=4,
    )
    vae = AutoencoderKL(
        block_out_channels=(8, 16),
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        latent_channels=4,
        norm_num_groups=4,
        sample_size=32,
    )
    pipe = LattePipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder.eval(),
        vae=vae.eval(),
        transformer=perturb(transformer),
        scheduler=DDIMScheduler(),
    )
    save(pipe, path)


MODEL = NewModel(
    name="latte",
    kind="video",
    transformer_class="LatteTransformer3DModel",
    transformer_module="latte_transformer_3d",
    pipeline_module="latte.pipeline_latte",
    build=build,
    request={
        "height": 32,
        "width": 32,
        "steps": 6,
        "extraCallKwargs": {"video_length": 4, "clean_caption": False, "max_sequence_length": 16},
    },
)
