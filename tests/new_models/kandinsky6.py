"""Kandinsky6TI2VAPipeline (video + audio): HunyuanVideo VAE, MMAudio VAE and vocoder, fused
video/audio blocks after a text-encoder list.

Called on seeded Qwen2.5-VL token embeddings and CLIP pooled embeddings without a text stack
(the Qwen2.5-VL processor needs torchvision): ``embeds_pipelines.py``. 5 frames at 24 fps and a
64 Hz audio VAE give 2 audio latent frames, as in diffusers' own tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ._common import EMBEDS_PIPELINES, SEED, NewModel, perturb, save, save_npy

TEXT_DIM = 32
POOLED_DIM = 16


def build(path: Path) -> None:
    import torch
    from diffusers import (
        AutoencoderKLHunyuanVideo,
        FlowMatchEulerDiscreteScheduler,
        Kandinsky6Transformer3DModel,
        MMAudioVAE,
        MMAudioVocoder,
    )

    from .embeds_pipelines import Kandinsky6TI2VAPipelineWithEmbeds

    torch.manual_seed(SEED)
    blocks = ["HunyuanVideoDownBlock3D"] * 3
    vae = AutoencoderKLHunyuanVideo(
        block_out_channels=[8, 8, 8],
        down_block_types=blocks,
        up_block_types=["HunyuanVideoUpBlock3D"] * 3,
        latent_channels=4,
        layers_per_block=1,
        mid_block_add_attention=False,
        norm_num_groups=2,
        spatial_compression_ratio=8,
        temporal_compression_ratio=4,
    )
    audio_vae = MMAudioVAE(
        mel_bins=8,
        latent_channels=4,
        hidden_channels=8,
        channel_multipliers=(1, 2),
        layers_per_block=1,
        sample_rate=64,
        n_fft=16,
        hop_length=4,
    )
    vocoder = MMAudioVocoder(  # upsample_rates multiply to the audio VAE's hop_length
        num_mels=8,
        upsample_initial_channel=8,
        upsample_rates=(2, 2),
        upsample_kernel_sizes=(4, 4),
        resblock_kernel_sizes=(3,),
        resblock_dilation_sizes=((1, 3),),
    )
    transformer = Kandinsky6Transformer3DModel(
        in_visual_dim=4,
        out_visual_dim=4,
        in_text_dim=TEXT_DIM,
        in_text_dim2=POOLED_DIM,
        time_dim=16,
        patch_size=(1, 2, 2),
        model_dim=16,
        ff_dim=32,
        num_text_blocks=1,
        num_visual_blocks=3,
        axes_dims=(4, 2, 2),
        visual_cond=True,
        in_audio_dim=4,
        out_audio_dim=4,
        visual_token_type_num_embeddings=2,
    )
    pipe = Kandinsky6TI2VAPipelineWithEmbeds(
        transformer=perturb(transformer),
        vae=vae.eval(),
        text_encoder=None,
        tokenizer=None,
        text_encoder_2=None,
        tokenizer_2=None,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
        audio_vae=audio_vae.eval(),
        vocoder=vocoder.eval(),
    )
    save(pipe, path)


def _inputs(directory: Path) -> dict[str, str]:
    import torch

    generator = torch.Generator().manual_seed(SEED + 2)
    files = {}
    for prefix in ("", "negative_"):
        embeds = torch.randn(1, 8, TEXT_DIM, generator=generator)
        pooled = torch.randn(1, POOLED_DIM, generator=generator)
        files[f"{prefix}prompt_embeds"] = save_npy(embeds, directory / f"{prefix}embeds.npy")
        files[f"{prefix}pooled_prompt_embeds"] = save_npy(pooled, directory / f"{prefix}pooled.npy")
    return files


INPUTS: Callable[[Path], dict[str, str]] = _inputs

MODEL = NewModel(
    name="kandinsky6",
    kind="video+audio",
    transformer_class="Kandinsky6Transformer3DModel",
    transformer_module="transformer_kandinsky6",
    pipeline_module="kandinsky6.pipeline_kandinsky6_ti2va",
    build=build,
    request={
        "height": 32,
        "width": 32,
        "numFrames": 5,
        "steps": 6,
        "guidanceScale": 5.0,
        "extraCallKwargs": {"prompt": None},
    },
    inputs=INPUTS,
    source_files=(EMBEDS_PIPELINES,),
)
