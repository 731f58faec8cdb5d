"""Build a tiny random-weight DemoMMDiT pipeline (no download) for the example workspace.

    python e2e/make_tiny_model.py WORKSPACE [--out tiny-demo-mmdit]

Writes ``WORKSPACE/<out>/`` with ``model_index.json``, each component's config and safetensors
weights, loadable by ``cdit_runtime`` as a local model whose third-party classes come from
``WORKSPACE/models/demo_mmdit.py`` and ``WORKSPACE/pipelines/demo_mmdit_pipeline.py``. Seeded:
the same bytes every time. Takes a few seconds on CPU (most of it importing torch).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

SEED = 0
TEXT_LEN = 256  # DemoMMDiTPipeline.encode_prompt pads every prompt to 256 tokens


def _clip_tokenizer():
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    alphabet = sorted(ByteLevel.alphabet())
    for ch in alphabet:
        vocab.setdefault(ch, len(vocab))
    for ch in alphabet:
        vocab.setdefault(ch + "</w>", len(vocab))
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=TEXT_LEN)


def build(workspace: Path, out: Path) -> Path:
    sys.path[:0] = [str(workspace / "models"), str(workspace / "pipelines")]
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler
    from transformers import CLIPTextConfig, CLIPTextModel

    demo = importlib.import_module("demo_mmdit")
    pipeline_module = importlib.import_module("demo_mmdit_pipeline")

    torch.manual_seed(SEED)
    tokenizer = _clip_tokenizer()
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=TEXT_LEN,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
        )
    )
    transformer = demo.DemoMMDiTTransformer2DModel(
        patch_size=2,
        in_channels=4,
        num_layers=2,
        num_single_layers=4,
        attention_head_dim=8,
        num_attention_heads=8,  # divisible by the CP/TP sizes the pre-flight checks (2, 4, 8)
        joint_attention_dim=32,
        max_image_tokens=64,
    )
    generator = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():  # zero-initialised heads and modulations would hide a wrong integration
        for param in transformer.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8, 8, 8, 8),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        sample_size=64,
    )
    pipe = pipeline_module.DemoMMDiTPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer.eval(),
    )
    out.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(str(out))
    index = json.loads((out / "model_index.json").read_text())
    assert index["transformer"] == ["demo_mmdit", "DemoMMDiTTransformer2DModel"], index
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workspace", type=Path)
    parser.add_argument("--out", default="tiny-demo-mmdit")
    args = parser.parse_args()
    workspace = args.workspace.resolve()
    path = build(workspace, workspace / args.out)
    print(f"tiny DemoMMDiT pipeline: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
