"""FIXTURE builder: save a small DemoMMDiT pipeline (third-party classes) with random weights.

The transformer and pipeline classes come from ``tests/fixtures/{models,pipelines}``, imported
the way the runtime imports a user's source files (`cdit_runtime.loading.import_sources`), so
``model_index.json`` records them under the module names the runtime will resolve. The
transformer config is deliberately larger than the runtime's shrink target (3 + 3 layers, 8
heads) so a ``shrink`` run has something to shrink.
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SOURCES = [
    str(FIXTURES / "models" / "demo_mmdit.py"),
    str(FIXTURES / "pipelines" / "demo_mmdit_pipeline.py"),
]


def build(path: Path) -> Path:
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler
    from transformers import CLIPTextConfig, CLIPTextModel

    from cdit_runtime.loading import import_sources
    from cdit_runtime.tiny_pipelines import _clip_tokenizer

    model_module, pipeline_module = import_sources(SOURCES)
    torch.manual_seed(0)
    tokenizer = _clip_tokenizer(max_len=256)
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=1,
            num_attention_heads=4,
            max_position_embeddings=256,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
        )
    )
    transformer = model_module.DemoMMDiTTransformer2DModel(
        patch_size=2,
        in_channels=4,
        num_layers=3,
        num_single_layers=3,
        attention_head_dim=8,
        num_attention_heads=8,
        joint_attention_dim=32,
        max_image_tokens=64,
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8, 8, 8, 8),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        sample_size=32,
    )
    pipe = pipeline_module.DemoMMDiTPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )
    pipe.save_pretrained(str(path))
    return path
