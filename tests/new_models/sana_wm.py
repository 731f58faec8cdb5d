"""SanaWMPipeline (video): camera-controlled image-to-video; Gemma2 text encoder, LTX-2 VAE and a
GDN/softmax camera-attention (UCPE) video DiT.

The tokenizer is the byte-level BPE of ``sana_video.py`` (no Gemma vocabulary offline). The LTX-2
VAE is the one of diffusers' own tests (2x spatial and 2x temporal compression, one block). The
first frame is a seeded RGB PNG (the request's ``inputs``: ``image``), the trajectory the action
string ``w-4`` (4 forward steps plus the anchor: 5 poses, so 5 frames, 3 latent frames), the
intrinsics ``[fx, fy, cx, cy]`` of that 48x40 image. Blocks alternate GDN and softmax attention
(``softmax_every_n=2``); a short ``chi_prompt`` replaces the release's long instruction prefix.
"""

from __future__ import annotations

from pathlib import Path

from ._common import SEED, NewModel, perturb, save

TEXT_DIM = 16


def build(path: Path) -> None:
    import torch
    from diffusers import (
        AutoencoderKLLTX2Video,
        FlowMatchEulerDiscreteScheduler,
        SanaWMPipeline,
        SanaWMTransformer3DModel,
    )
    from transformers import Gemma2Config, Gemma2Model

    from cdit_runtime.tiny_pipelines import _byte_bpe

    torch.manual_seed(SEED)
    tokenizer = _byte_bpe(("<pad>", "<eos>", "<bos>"), "<bos>", "<eos>", 512)
    text_encoder = Gemma2Model(
        Gemma2Config(
            vocab_size=len(tokenizer),
            hidden_size=TEXT_DIM,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            head_dim=8,
            max_position_embeddings=512,
            pad_token_id=0,
        )
    )
    vae = AutoencoderKLLTX2Video(
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        block_out_channels=(8,),
        decoder_block_out_channels=(8,),
        layers_per_block=(1,),
        decoder_layers_per_block=(1, 1),
        spatio_temporal_scaling=(True,),
        decoder_spatio_temporal_scaling=(True,),
        decoder_inject_noise=(False, False),
        downsample_type=("spatial",),
        upsample_residual=(False,),
        upsample_factor=(1,),
        timestep_conditioning=False,
        patch_size=1,
        patch_size_t=1,
        encoder_causal=True,
        decoder_causal=False,
    )
    transformer = SanaWMTransformer3DModel(
        in_channels=4,
        num_layers=3,
        hidden_size=32,
        num_attention_heads=2,
        softmax_every_n=2,
        linear_head_dim=16,
        t_kernel_size=3,
        conv_kernel_size=4,
        caption_channels=TEXT_DIM,
        mlp_ratio=2.0,
        # Plücker rays are packed per VAE temporal chunk: 6 dims * temporal compression.
        chunk_plucker_channels=6 * vae.temporal_compression_ratio,
        chunk_plucker_post_attn_blocks=3,
    )
    pipe = SanaWMPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder.eval(),
        vae=vae.eval(),
        transformer=perturb(transformer),
        scheduler=FlowMatchEulerDiscreteScheduler(),
    )
    save(pipe, path)


def _inputs(directory: Path) -> dict[str, str]:
    """The first frame: a seeded 48x40 RGB PNG (non-square, so the resize + crop runs)."""
    import numpy as np
    from PIL import Image

    directory.mkdir(parents=True, exist_ok=True)
    pixels = np.random.RandomState(SEED).randint(0, 256, size=(40, 48, 3), dtype=np.uint8)
    image = directory / "first_frame.png"
    Image.fromarray(pixels).save(image)
    return {"image": str(image)}


MODEL = NewModel(
    name="sana-wm",
    kind="video",
    transformer_class="SanaWMTransformer3DModel",
    transformer_module="transformer_sana_wm",
    pipeline_module="sana_wm.pipeline_sana_wm",
    build=build,
    request={
        "height": 32,
        "width": 32,
        "numFrames": 5,
        "steps": 6,
        "guidanceScale": 5.0,
        "extraCallKwargs": {
            "action": "w-4",
            "intrinsics": [40.0, 40.0, 24.0, 20.0],
            "chi_prompt": ["Describe the scene: "],
            "max_sequence_length": 16,
        },
    },
    inputs=_inputs,
)
