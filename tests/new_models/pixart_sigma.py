"""PixArtSigmaPipeline (image): T5 text encoder, KL VAE, PixArt DiT (`AttnProcessor2_0`).

Not a new model (cache-dit has an adapter for it): a check of routed SDPA on a real diffusers
pipeline. PixArt's attention processor calls `F.scaled_dot_product_attention` itself; the
generated module routes the self-attention of the split blocks through cache-dit's CP attention,
while the cross-attention to the (padded, masked) prompt stays local.
"""

from __future__ import annotations

from pathlib import Path

from ._common import SEED, NewModel, perturb, save


def build(path: Path) -> None:
    import torch
    from diffusers import (
        AutoencoderKL,
        DDIMScheduler,
        PixArtSigmaPipeline,
        PixArtTransformer2DModel,
    )
    from transformers import T5Config, T5EncoderModel

    from cdit_runtime.tiny_pipelines import _t5_tokenizer

    torch.manual_seed(SEED)
    tokenizer = _t5_tokenizer()
    text_encoder = T5EncoderModel(
        T5Config(
            d_model=32, num_layers=1, num_heads=4, d_ff=64, d_kv=8, vocab_size=len(tokenizer) + 8
        )
    )
    transformer = PixArtTransformer2DModel(
        sample_size=8,
        num_layers=2,
        patch_size=2,
        attention_head_dim=8,
        num_attention_heads=4,
        caption_channels=32,
        in_channels=4,
        cross_attention_dim=32,
        out_channels=8,
        attention_bias=True,
        activation_fn="gelu-approximate",
        num_embeds_ada_norm=1000,
        norm_type="ada_norm_single",
        norm_elementwise_affine=False,
        norm_eps=1e-6,
    )
    vae = AutoencoderKL(block_out_channels=(16,), norm_num_groups=8, latent_channels=4)
    pipe = PixArtSigmaPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder.eval(),
        vae=vae.eval(),
        transformer=perturb(transformer),
        scheduler=DDIMScheduler(),
    )
    save(pipe, path)


MODEL = NewModel(
    name="pixart-sigma",
    kind="image",
    transformer_class="PixArtTransformer2DModel",
    transformer_module="pixart_transformer_2d",
    pipeline_module="pixart_alpha.pipeline_pixart_sigma",
    build=build,
    request={
        "height": 16,
        "width": 16,
        "steps": 6,
        "extraCallKwargs": {"use_resolution_binning": False, "max_sequence_length": 16},
    },
)
