"""FIXTURE builder: a tiny StableAudioPipeline of real diffusers classes with random weights.

Components: `StableAudioDiTModel` (2 blocks, 4 query heads and 2 key/value heads: GQA in the
cross-attention, as in the real model), `AutoencoderOobleck` (2 down/up stages, stereo), the
runtime's tiny `T5EncoderModel` (`tiny_t5_encoder`) with its character-level T5 tokenizer,
`StableAudioProjectionModel` and `EDMDPMSolverMultistepScheduler` (the pipeline's documented
scheduler; the published model's cosine variant needs ``torchsde``). Saved with
``save_pretrained``, so the runtime loads it back like any local model (no download).

Sizes keep every sequence even for a 2-way context-parallel split: the latent has
``SAMPLE_SIZE`` = 31 frames, plus the global (timing) token -> 32 tokens through the blocks; the
cross-attention context is ``TEXT_TOKENS`` = 30 prompt tokens + 2 timing tokens. The decoder
upsamples by 4 at ``SAMPLING_RATE`` = 64 Hz: 124 samples, at most 1.9375 s of audio per channel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SAMPLE_SIZE = 31
TEXT_TOKENS = 30
SAMPLING_RATE = 64
DOWNSAMPLING = (2, 2)
MAX_SECONDS = SAMPLE_SIZE * DOWNSAMPLING[0] * DOWNSAMPLING[1] / SAMPLING_RATE


def pipeline() -> Any:
    """The tiny pipeline, in memory (seeded: the same weights every time)."""
    import torch
    from diffusers import (
        AutoencoderOobleck,
        EDMDPMSolverMultistepScheduler,
        StableAudioDiTModel,
        StableAudioPipeline,
    )
    from diffusers.pipelines.stable_audio.modeling_stable_audio import (
        StableAudioProjectionModel,
    )

    from cdit_runtime.tiny_pipelines import _t5_tokenizer, perturb, tiny_t5_encoder

    torch.manual_seed(0)
    tokenizer = _t5_tokenizer()
    tokenizer.model_max_length = TEXT_TOKENS
    text_encoder = tiny_t5_encoder(tokenizer)  # the tiny Flux family's T5
    conditioning_dim = 16
    projection_model = StableAudioProjectionModel(
        text_encoder_dim=32, conditioning_dim=conditioning_dim, min_value=0, max_value=32
    )
    transformer = StableAudioDiTModel(
        sample_size=SAMPLE_SIZE,
        in_channels=8,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=4,
        num_key_value_attention_heads=2,
        out_channels=8,
        cross_attention_dim=16,
        time_proj_dim=16,
        global_states_input_dim=2 * conditioning_dim,
        cross_attention_input_dim=conditioning_dim,
    )
    perturb(transformer)  # zero-initialised heads or gates must not hide a wrong split
    vae = AutoencoderOobleck(
        encoder_hidden_size=16,  # 2 x the latent channels: mean and scale
        downsampling_ratios=list(DOWNSAMPLING),
        channel_multiples=[1, 2],
        decoder_channels=8,
        decoder_input_channels=8,
        audio_channels=2,
        sampling_rate=SAMPLING_RATE,
    )
    # The published model uses CosineDPMSolverMultistepScheduler, which needs torchsde.
    scheduler = EDMDPMSolverMultistepScheduler(
        solver_order=2, prediction_type="v_prediction", sigma_data=1.0, sigma_schedule="exponential"
    )
    return StableAudioPipeline(
        vae=vae,
        text_encoder=text_encoder,
        projection_model=projection_model,
        tokenizer=tokenizer,
        transformer=transformer,
        scheduler=scheduler,
    )


def build(path: Path) -> Path:
    """Save the tiny pipeline into ``path`` (``save_pretrained``) and return it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    pipeline().save_pretrained(str(path))
    return path


if __name__ == "__main__":
    import sys

    print(build(Path(sys.argv[1])))
