"""Tiny complete pipelines of real diffusers classes with random weights; no download.

Each family builds every component from a small config (transformer, VAE, text encoders) and a
tokenizer constructed in code from a character-level vocabulary (the ``tokenizers`` library's
byte-level alphabet for BPE tokenizers, single characters for the T5 unigram model), then saves
the pipeline with ``save_pretrained`` so the runtime loads it back through the same local-path
code as a real model. Transformer weights are perturbed after init so that zero-initialised
modulations or output heads cannot hide a wrong split.

Families: ``flux`` (FluxPipeline: CLIP + T5), ``wan`` (WanPipeline: UMT5, video),
``qwenimage`` (QwenImagePipeline: Qwen2.5-VL), ``skimage-dit`` (the bundled *trained* model,
copied as it is: see ``bundled_models``), and ``flux1-dev``: not tiny at all, the FLUX.1-dev
configs at full size (11.9 B transformer, T5-XXL, CLIP-L, FLUX VAE) with random weights, built
directly on the GPU in bf16 when one is visible, for benchmarks on real hardware. torch, diffusers
and transformers are imported inside the functions.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FAMILIES", "TinyFamily", "build_tiny", "ensure_tiny", "perturb", "tiny_t5_encoder"]

SEED = 0
_MARKER = "cdit_tiny.json"
_VERSION = 1


@dataclass(frozen=True)
class TinyFamily:
    """Generation defaults that keep a family fast on CPU (and its token counts even)."""

    name: str
    height: int
    width: int
    steps: int
    num_frames: int | None = None
    call_kwargs: dict[str, Any] = field(default_factory=dict)


FAMILIES: dict[str, TinyFamily] = {
    "flux": TinyFamily("flux", 64, 64, 6, call_kwargs={"max_sequence_length": 32}),
    "wan": TinyFamily("wan", 32, 32, 6, num_frames=5, call_kwargs={"max_sequence_length": 16}),
    "qwenimage": TinyFamily("qwenimage", 64, 64, 6, call_kwargs={"max_sequence_length": 64}),
    "flux1-dev": TinyFamily("flux1-dev", 1024, 1024, 28, call_kwargs={"max_sequence_length": 512}),
    # trained, not random: the bundled model (cdit_runtime.bundled_models), copied as it is
    "skimage-dit": TinyFamily("skimage-dit", 64, 64, 28),
}
_TRAINED = frozenset({"skimage-dit"})
_ON_DEVICE = frozenset({"flux1-dev"})  # built on the GPU (seconds instead of minutes on CPU)


def ensure_tiny(family: str, path: str | Path) -> Path:
    """Build the family into ``path`` unless a build of the same version is already there."""
    path = Path(path)
    marker = path / _MARKER
    if marker.is_file():
        try:
            if json.loads(marker.read_text()) == {"family": family, "version": _VERSION}:
                return path
        except ValueError:
            pass
    return build_tiny(family, path)


def build_tiny(family: str, path: str | Path) -> Path:
    """Build, save (``save_pretrained``) and return the directory of a tiny pipeline."""
    if family not in _BUILDERS and family not in _TRAINED:
        known = sorted([*_BUILDERS, *_TRAINED])
        raise ValueError(f"unknown tiny family {family!r}; known: {known}")
    path = Path(path)
    if family in _TRAINED:
        from .bundled_models import bundled_path

        shutil.copytree(bundled_path(family), path, dirs_exist_ok=True)
        (path / _MARKER).write_text(json.dumps({"family": family, "version": _VERSION}))
        return path
    import torch

    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    if family in _ON_DEVICE and torch.cuda.is_available():
        with torch.device("cuda"):
            pipe = _BUILDERS[family]()
        pipe.to(torch.bfloat16)
    else:
        pipe = _BUILDERS[family]()
        perturb(pipe.transformer)
    pipe.save_pretrained(str(path))
    del pipe
    (path / _MARKER).write_text(json.dumps({"family": family, "version": _VERSION}))
    return path


def perturb(model: Any, scale: float = 0.05) -> None:
    """Add seeded noise (``SEED + 1``) to every parameter, in place: zero-initialised modulations
    or output heads must not hide a wrong split. The tests' tiny models use it too."""
    import torch

    generator = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * scale)


# ----------------------------------------------------------------------------------- tokenizers
# Built with the `tokenizers` library and wrapped in `PreTrainedTokenizerFast`, which works the
# same in transformers 4.x and 5.x (the model-specific tokenizer classes changed their
# constructors between them).

_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'-:;()"


def _byte_bpe(specials: tuple[str, ...], bos: str | None, eos: str | None, max_len: int) -> Any:
    """Byte-level BPE without merges: every byte is a token (any text encodes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(specials)}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if bos and eos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A {eos}", special_tokens=[(bos, vocab[bos]), (eos, vocab[eos])]
        )
    tok.add_special_tokens(list(specials))
    end = eos or specials[0]
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=end,
        unk_token=end,
        pad_token=end,
        model_max_length=max_len,
    )


def _clip_tokenizer(max_len: int = 77) -> Any:
    return _byte_bpe(
        ("<|startoftext|>", "<|endoftext|>"), "<|startoftext|>", "<|endoftext|>", max_len
    )


def _t5_tokenizer() -> Any:
    """Unigram over single characters with SentencePiece-style word starts, ``</s>`` appended."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    pieces += [(ch, -3.0) for ch in _CHARS]
    pieces += [("\u2581" + ch, -2.5) for ch in _CHARS]
    tok = Tokenizer(models.Unigram(pieces, unk_id=2))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", 1)]
    )
    tok.add_special_tokens(["<pad>", "</s>", "<unk>"])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=512,
    )


_QWEN_SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)


def _qwen_tokenizer() -> Any:
    return _byte_bpe(_QWEN_SPECIAL, None, None, 2048)


# --------------------------------------------------------------------------------------- builders


def tiny_t5_encoder(tokenizer: Any, umt5: bool = False) -> Any:
    """The tiny T5 text encoder (UMT5 with ``umt5``) of the flux and wan families, random weights
    from the current seed: width 32, 2 layers, 4 heads, FFN 37, for `_t5_tokenizer`'s vocab."""
    from transformers import T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel

    config_class, model_class = (
        (UMT5Config, UMT5EncoderModel) if umt5 else (T5Config, T5EncoderModel)
    )
    return model_class(
        config_class(
            vocab_size=len(tokenizer) + 8,
            d_model=32,
            d_kv=8,
            d_ff=37,
            num_layers=2,
            num_heads=4,
            relative_attention_num_buckets=8,
            is_encoder_decoder=False,
        )
    )


def _flux() -> Any:
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        FluxPipeline,
        FluxTransformer2DModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel

    tokenizer = _clip_tokenizer()
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            projection_dim=32,
            max_position_embeddings=77,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
        )
    )
    tokenizer_2 = _t5_tokenizer()
    text_encoder_2 = tiny_t5_encoder(tokenizer_2)
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=16,
        num_layers=2,
        num_single_layers=2,
        attention_head_dim=16,
        num_attention_heads=4,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        axes_dims_rope=(4, 4, 8),
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(8, 16),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        sample_size=32,
        use_quant_conv=False,
        use_post_quant_conv=False,
        shift_factor=0.0609,
        scaling_factor=1.5035,
    )
    return FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        transformer=transformer,
    )


def _wan() -> Any:
    from diffusers import (
        AutoencoderKLWan,
        FlowMatchEulerDiscreteScheduler,
        WanPipeline,
        WanTransformer3DModel,
    )

    tokenizer = _t5_tokenizer()
    text_encoder = tiny_t5_encoder(tokenizer, umt5=True)
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=4,
        attention_head_dim=8,
        in_channels=4,
        out_channels=4,
        text_dim=32,
        freq_dim=32,
        ffn_dim=32,
        num_layers=2,
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
    return WanPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        transformer=transformer,
    )


def _qwenimage() -> Any:
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImagePipeline,
        QwenImageTransformer2DModel,
    )
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tokenizer = _qwen_tokenizer()
    vocab = len(tokenizer)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in _QWEN_SPECIAL}
    config = Qwen2_5_VLConfig(
        text_config={
            "hidden_size": 16,
            "intermediate_size": 16,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "vocab_size": vocab,
            "max_position_embeddings": 2048,
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "rope_scaling": {"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"},
        },
        vision_config={
            "depth": 2,
            "hidden_size": 16,
            "intermediate_size": 16,
            "num_heads": 2,
            "out_hidden_size": 16,
            "fullatt_block_indexes": [1],
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        vocab_size=vocab,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
    )
    text_encoder = Qwen2_5_VLForConditionalGeneration(config)
    transformer = QwenImageTransformer2DModel(
        patch_size=2,
        in_channels=16,
        out_channels=4,
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=4,
        joint_attention_dim=16,
        axes_dims_rope=(4, 4, 8),
    )
    vae = AutoencoderKLQwenImage(
        base_dim=8,
        z_dim=4,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
        latents_mean=[0.0] * 4,
        latents_std=[1.0] * 4,
    )
    return QwenImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )


def _flux1_dev() -> Any:
    """FLUX.1-dev's published component configs, random weights (no download)."""
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        FluxPipeline,
        FluxTransformer2DModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    tokenizer = _clip_tokenizer()
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=49408,
            hidden_size=768,
            intermediate_size=3072,
            num_hidden_layers=12,
            num_attention_heads=12,
            max_position_embeddings=77,
            projection_dim=768,
            hidden_act="quick_gelu",
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
        )
    )
    tokenizer_2 = _t5_tokenizer()
    text_encoder_2 = T5EncoderModel(
        T5Config(
            vocab_size=32128,
            d_model=4096,
            d_kv=64,
            d_ff=10240,
            num_layers=24,
            num_heads=64,
            relative_attention_num_buckets=32,
            relative_attention_max_distance=128,
            feed_forward_proj="gated-gelu",
            dense_act_fn="gelu_new",
            is_gated_act=True,
            is_encoder_decoder=False,
        )
    )
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=64,
        num_layers=19,
        num_single_layers=38,
        attention_head_dim=128,
        num_attention_heads=24,
        joint_attention_dim=4096,
        pooled_projection_dim=768,
        guidance_embeds=True,
        axes_dims_rope=(16, 56, 56),
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(128, 256, 512, 512),
        layers_per_block=2,
        latent_channels=16,
        norm_num_groups=32,
        sample_size=1024,
        scaling_factor=0.3611,
        shift_factor=0.1159,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
    return FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        transformer=transformer,
    )


_BUILDERS: dict[str, Callable[[], Any]] = {
    "flux": _flux,
    "wan": _wan,
    "qwenimage": _qwenimage,
    "flux1-dev": _flux1_dev,
}
