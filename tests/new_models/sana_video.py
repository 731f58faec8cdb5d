"""SanaVideoPipeline (video): Gemma2 text encoder, Wan VAE, linear-attention video DiT.

Called with ``frames`` (this pipeline's name for the frame count), no resolution binning and no
complex human instruction (which would prepend hundreds of tokens).
"""

from __future__ import annotations

from pathlib import Path

from ._common import SEED, NewModel, perturb, save


def build(path: Path) -> None:
    import torch
    from diffusers import (
        AutoencoderKLWan,
        DPMSolverMultistepScheduler,
        SanaVideoPipeline,
        SanaVideoTransformer3DModel,
    )
    from transformers import Gemma2Config, Gemma2Model

    from cdit_runtime.tiny_pipelines import _byte_bpe

    torch.manual_seed(SEED)
    tokenizer = _byte_bpe(("<pad>", "<eos>", "<bos>"), "<bos>", "<eos>", 512)
    text_encoder = Gemma2Model(
        Gemma2Config(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            head_dim=8,
            max_position_embeddings=512,
            pad_token_id=0,
        )
    )
    transformer = SanaVideoTransformer3DModel(
        in_channels=4,
        out_channels=4,
        num_attention_heads=2,
        attention_head_dim=8,
        num_layers=3,
        num_cross_attention_heads=2,
        cross_attention_head_dim=8,
        cross_attention_dim=16,
        caption_channels=16,
        mlp_ratio=2.0,
        sample_size=8,
        patch_size=(1, 2, 2),
        rope_max_seq_len=32,
    )
    vae = AutoencoderKLWan(
        base_dim=8,
        z_dim=4,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
        latents_mean=[0.0] * 4,
        latents_std=[1.0] * 4,
    )
    scheduler = DPMSolverMultistepScheduler(
        algorithm_type="dpmsolver++",
        flow_shift=8.0,
        prediction_type="flow_prediction",
        use_flow_sigmas=True,
    )
    pipe = SanaVideoPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder.eval(),
        vae=vae.eval(),
        transformer=perturb(transformer),
        scheduler=scheduler,
    )
    save(pipe, path)


MODEL = NewModel(
    name="sana-video",
    kind="video",
    transformer_class="SanaVideoTransformer3DModel",
    transformer_module="transformer_sana_video",
    pipeline_module="sana_video.pipeline_sana_video",
    build=build,
    request={
        "height": 64,
        "width": 64,
        "steps": 6,
        "extraCallKwargs": {
            "frames": 5,
            "use_resolution_binning": False,
            "complex_human_instruction": None,
            "max_sequence_length": 16,
        },
    },
)
