"""MotifVideoPipeline (video): T5Gemma2 encoder, Wan VAE, a guider (one transformer call per
condition), dual-stream then single-stream blocks.
"""

from __future__ import annotations

from pathlib import Path

from ._common import SEED, NewModel, perturb, save

Z_DIM = 4


def build(path: Path) -> None:
    import torch
    from diffusers import (
        AdaptiveProjectedGuidance,
        AutoencoderKLWan,
        FlowMatchEulerDiscreteScheduler,
        MotifVideoPipeline,
        MotifVideoTransformer3DModel,
    )
    from transformers import T5Gemma2Encoder, T5Gemma2EncoderConfig, T5Gemma2TextConfig

    from cdit_runtime.tiny_pipelines import _byte_bpe

    torch.manual_seed(SEED)
    tokenizer = _byte_bpe(("<pad>", "<eos>", "<bos>"), "<bos>", "<eos>", 64)
    text_config = T5Gemma2TextConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=len(tokenizer),
        max_position_embeddings=128,
        head_dim=16,
        num_key_value_heads=2,
        dropout_rate=0.0,
    )
    text_encoder = T5Gemma2Encoder(T5Gemma2EncoderConfig(text_config=text_config))
    transformer = MotifVideoTransformer3DModel(
        in_channels=2 * Z_DIM + 1,  # noisy latents, condition latents, mask
        out_channels=Z_DIM,
        num_attention_heads=2,
        attention_head_dim=12,
        num_layers=2,
        num_single_layers=2,
        mlp_ratio=2.0,
        patch_size=1,
        patch_size_t=1,
        qk_norm="rms_norm",
        text_embed_dim=32,
        rope_axes_dim=(4, 4, 4),
    )
    vae = AutoencoderKLWan(
        base_dim=8,
        z_dim=Z_DIM,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
        latents_mean=[0.0] * Z_DIM,
        latents_std=[1.0] * Z_DIM,
    )
    pipe = MotifVideoPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
        vae=vae.eval(),
        text_encoder=text_encoder.eval(),
        tokenizer=tokenizer,
        transformer=perturb(transformer),
        guider=AdaptiveProjectedGuidance(),
    )
    save(pipe, path)


MODEL = NewModel(
    name="motif-video",
    kind="video",
    transformer_class="MotifVideoTransformer3DModel",
    transformer_module="transformer_motif_video",
    pipeline_module="motif_video.pipeline_motif_video",
    build=build,
    request={
        "height": 32,
        "width": 32,
        "numFrames": 5,
        "steps": 6,
        # shorter than max_sequence_length: the text mask has padding, so the joint attention
        # mask matters (under Ulysses it must be permuted into all-to-all order)
        "prompt": "a cat",
        "negativePrompt": "blurry",
        "extraCallKwargs": {"max_sequence_length": 16},
    },
)
