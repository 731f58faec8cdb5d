"""LongCatAudioDiTPipeline (audio): UMT5 text encoder, WAV-VAE, CrossDiT transformer.

The latent length is ``audio_duration_s * sample_rate // downsampling_ratio``: 1 s at a 32 Hz
VAE with ratio 2 gives 16 latent frames (even, for a 2-way split).
"""

from __future__ import annotations

from pathlib import Path

from ._common import SEED, NewModel, perturb, save


def build(path: Path) -> None:
    import torch
    from diffusers import (
        FlowMatchEulerDiscreteScheduler,
        LongCatAudioDiTPipeline,
        LongCatAudioDiTTransformer,
        LongCatAudioDiTVae,
    )
    from transformers import UMT5Config, UMT5EncoderModel

    from cdit_runtime.tiny_pipelines import _t5_tokenizer

    torch.manual_seed(SEED)
    tokenizer = _t5_tokenizer()
    text_encoder = UMT5EncoderModel(
        UMT5Config(d_model=32, num_layers=1, num_heads=4, d_ff=64, vocab_size=len(tokenizer) + 8)
    )
    transformer = LongCatAudioDiTTransformer(
        dit_dim=64, dit_depth=3, dit_heads=4, dit_text_dim=32, latent_dim=8, text_conv=False
    )
    vae = LongCatAudioDiTVae(
        in_channels=1,
        channels=16,
        c_mults=[1, 2],
        strides=[2],
        latent_dim=8,
        encoder_latent_dim=16,
        downsampling_ratio=2,
        sample_rate=32,
    )
    pipe = LongCatAudioDiTPipeline(
        vae=vae.eval(),
        text_encoder=text_encoder.eval(),
        tokenizer=tokenizer,
        transformer=perturb(transformer),
        scheduler=FlowMatchEulerDiscreteScheduler(),
    )
    save(pipe, path)


MODEL = NewModel(
    name="longcat-audio",
    kind="audio",
    transformer_class="LongCatAudioDiTTransformer",
    transformer_module="transformer_longcat_audio_dit",
    pipeline_module="longcat_audio_dit.pipeline_longcat_audio_dit",
    build=build,
    request={"steps": 6, "extraCallKwargs": {"audio_duration_s": 1.0}},
)
