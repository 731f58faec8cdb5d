"""Ideogram4Pipeline (image): Qwen3-VL text features tapped at 13 layers, Flux2 VAE, and two
transformers (``transformer`` for the prompt, ``unconditional_transformer`` for guidance: one
call of each per step). The tokenizer is the runtime's byte-level BPE with a plain chat template.
"""

from __future__ import annotations

from pathlib import Path

from ._common import SEED, NewModel, perturb, save

TEXT_HIDDEN = 16
TAPPED_LAYERS = 13  # QWEN3_VL_ACTIVATION_LAYERS of the pipeline: 0, 3, ..., 33, 35
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% for c in m['content'] %}{{ c['text'] }}{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _transformer(latent_channels: int) -> object:
    from diffusers import Ideogram4Transformer2DModel

    return perturb(
        Ideogram4Transformer2DModel(
            in_channels=4 * latent_channels,  # 2x2 patches of the VAE latents
            num_layers=3,
            attention_head_dim=24,
            num_attention_heads=2,
            intermediate_size=64,
            adaln_dim=16,
            llm_features_dim=TAPPED_LAYERS * TEXT_HIDDEN,
            mrope_section=(2, 2, 2),  # sums to attention_head_dim / 4
        )
    )


def build(path: Path) -> None:
    import torch
    from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Ideogram4Pipeline
    from transformers import Qwen3VLConfig, Qwen3VLModel

    from cdit_runtime.tiny_pipelines import _QWEN_SPECIAL, _qwen_tokenizer

    torch.manual_seed(SEED)
    tokenizer = _qwen_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in _QWEN_SPECIAL}
    config = Qwen3VLConfig(
        text_config={
            "hidden_size": TEXT_HIDDEN,
            "intermediate_size": 16,
            "num_hidden_layers": 36,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "vocab_size": len(tokenizer),
            "rope_scaling": {"rope_type": "default", "mrope_section": [1, 1, 2]},
        },
        vision_config={"depth": 1, "hidden_size": 16, "intermediate_size": 16, "num_heads": 2,
                       "out_hidden_size": TEXT_HIDDEN, "deepstack_visual_indexes": []},
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
    )  # fmt: skip
    text_encoder = Qwen3VLModel(config)
    vae = AutoencoderKLFlux2(
        block_out_channels=(8, 16),
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        sample_size=32,
    )
    pipe = Ideogram4Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae.eval(),
        text_encoder=text_encoder.eval(),
        tokenizer=tokenizer,
        transformer=_transformer(4),
        unconditional_transformer=_transformer(4),
    )
    save(pipe, path)


MODEL = NewModel(
    name="ideogram4",
    kind="image",
    transformer_class="Ideogram4Transformer2DModel",
    transformer_module="transformer_ideogram4",
    pipeline_module="ideogram4.pipeline_ideogram4",
    build=build,
    request={
        "height": 32,
        "width": 32,
        "steps": 6,
        "guidanceScale": 4.0,
        "extraCallKwargs": {"guidance_schedule": None, "max_sequence_length": 96},
    },
)
