"""New models at their published size on one GPU (issue 18, part 2, the single-GPU half).

Three models of ``tests/new_models/`` (LongCat-AudioDiT, Motif-Video, NucleusMoE-Image) are built at
their published configuration size with random weights, saved with ``save_pretrained`` and verified
through their generated standalone modules (zero edits) with the phases baseline and cache (its
no-cache control runs automatically) in bfloat16 on one GPU. Ulysses-2, Ring-2 and TP-2 need two
GPUs (``--phases baseline,cache,ulysses,ring,tp`` on such a machine).

Two stages, because the GPU machine has neither libcst nor pygls (the analysis and the code
generator) and this machine has no GPU:

    # here (CPU): the transformer config.json (meta device, no weights), analysis and generation
    # through tests/new_models/suite.py's own functions; writes <workdir>/<model>/...
    .venv/bin/python -m benchmarks.new_models_gpu prepare [--workdir .cdit/gpu-new-models]

    # on the GPU machine (torch, transformers, diffusers, cache-dit; no lsp_server): builds the
    # weights on the GPU, saves them, writes the request, runs `python -m cdit_runtime verify`
    python3 -m benchmarks.new_models_gpu run --workdir .cdit/gpu-new-models --out $OUT

``--tiny`` (both stages) builds small configurations of the same structure and runs on the CPU:
the whole flow tested before any GPU time is spent (``--device cpu --dtype bfloat16`` by default
with ``--tiny``, so dtype faults show up too).

Configurations (``CONFIG_NOTES`` below says where each comes from): LongCat-AudioDiT and the VAEs
use their classes' ``__init__`` defaults; NucleusMoE-Image uses the published transformer
config.json (``NucleusAI/NucleusMoE-Image``, read from a public mirror); Motif-Video's
``__init__`` defaults describe a 12.5 B model, not the published 2 B one, so it uses the documented
layer counts (12 dual + 16 single + 8 DDT decoder, shared cross-attention) with 12 heads of 128
(2.15 B). Text encoders are stand-ins with the published output width (the transformer only sees
their output), or absent where the suite passes prompt embeddings.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_WORKDIR = REPO / ".cdit" / "gpu-new-models"
SEED = 0

# ------------------------------------------------------------------------------- configurations

# The published NucleusMoE-Image transformer config (transformer/config.json of
# NucleusAI/NucleusMoE-Image, as mirrored at huggingface.co/FenomAI/Nucleus-Image).
NUCLEUS_PUBLISHED: dict[str, Any] = {
    "patch_size": 2,
    "in_channels": 64,
    "out_channels": 16,
    "num_layers": 32,
    "attention_head_dim": 128,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "joint_attention_dim": 4096,
    "axes_dims_rope": [16, 56, 56],
    "mlp_ratio": 4.0,
    "moe_enabled": True,
    "dense_moe_strategy": "leave_first_three_blocks_dense",
    "num_experts": 64,
    "moe_intermediate_dim": 1344,
    "capacity_factors": [0.0, 0.0, 0.0, 4.0, 4.0] + [2.0] * 27,
    "use_sigmoid": False,
    "route_scale": 2.5,
    "use_grouped_mm": True,
}

# Motif-Video 2B: the documented structure (diffusers' pipeline docs and the model card: 12
# dual-stream + 16 single-stream + 8 DDT decoder layers, Shared Cross-Attention); the head count is
# not documented offline: 12 heads of 128 gives 2.15 B parameters (the published "2B").
MOTIF_PUBLISHED: dict[str, Any] = {
    "num_attention_heads": 12,
    "attention_head_dim": 128,
    "num_layers": 12,
    "num_single_layers": 24,
    "num_decoder_layers": 8,
    "enable_text_cross_attention_dual": True,
    "enable_text_cross_attention_single": True,
}

CONFIG_NOTES = {
    "longcat-audio": "transformer: LongCatAudioDiTTransformer() __init__ defaults "
    "(= LongCat-AudioDiT-1B); VAE: LongCatAudioDiTVae() defaults (published size, 24 kHz); "
    "text encoder: UMT5-base-shaped encoder (12 layers, d_model 768) with a character "
    "tokenizer (small vocabulary)",
    "motif-video": "transformer: documented Motif-Video-2B structure (12 dual + 16 single + "
    "8 decoder layers, shared cross-attention), 12 heads x 128 (the __init__ defaults are a "
    "12.5 B model); "
    "VAE: AutoencoderKLWan() defaults (Wan 2.1 VAE, published size); text encoder: 1-layer "
    "T5Gemma2 stand-in with the transformer's text width (4096), byte tokenizer",
    "nucleus-moe": "transformer: published NucleusMoE-Image config.json (32 layers, 16 heads / "
    "4 KV heads, 64 experts, grouped-mm); VAE: AutoencoderKLQwenImage() defaults (published size); "
    "no text encoder: seeded prompt embeddings (1, 128, 4096) as in the suite",
}


def _tiny(full: bool, big: dict[str, Any], small: dict[str, Any]) -> dict[str, Any]:
    return big if full else small


def longcat_transformer_config(full: bool) -> dict[str, Any]:
    return _tiny(
        full,
        {},
        dict(dit_dim=64, dit_depth=3, dit_heads=4, dit_text_dim=32, latent_dim=8, text_conv=False),
    )


def motif_transformer_config(full: bool) -> dict[str, Any]:
    small = dict(
        in_channels=9,
        out_channels=4,
        num_attention_heads=2,
        attention_head_dim=12,
        num_layers=2,
        num_single_layers=3,
        num_decoder_layers=1,
        mlp_ratio=2.0,
        patch_size=1,
        patch_size_t=1,
        text_embed_dim=32,
        rope_axes_dim=(4, 4, 4),
        enable_text_cross_attention_dual=True,
        enable_text_cross_attention_single=True,
    )
    return _tiny(full, MOTIF_PUBLISHED, small)


def nucleus_transformer_config(full: bool, device: str = "cuda") -> dict[str, Any]:
    small = dict(
        patch_size=2,
        in_channels=16,
        out_channels=4,
        num_layers=5,
        attention_head_dim=16,
        num_attention_heads=4,
        num_key_value_heads=2,
        joint_attention_dim=16,
        axes_dims_rope=(8, 4, 4),
        moe_enabled=True,
        dense_moe_strategy="leave_first_three_blocks_dense",
        num_experts=4,
        moe_intermediate_dim=24,
        capacity_factors=[0.0, 0.0, 0.0, 4.0, 2.0],
        use_grouped_mm=device != "cpu",
    )
    return _tiny(full, NUCLEUS_PUBLISHED, small)


# ----------------------------------------------------------------------------------- weights


def _init_weights(model: Any, seed: int) -> Any:
    """Random weights that hide no fault: uninitialised expert tensors (``torch.empty``) get
    N(0, 1/(3 fan_in)) like a default ``nn.Linear``; all-zero parameters (zero-initialised gates,
    output heads, norm biases) get N(0, 0.02^2), so no block is an identity map."""
    import torch

    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("gate_up_proj", "down_proj")) and param.dim() == 3:
                std = 1.0 / math.sqrt(3 * param.shape[1])
                param.copy_(
                    torch.randn(param.shape, generator=generator, device=param.device) * std
                )
            elif param.numel() and not bool(param.any()):
                param.copy_(
                    torch.randn(param.shape, generator=generator, device=param.device) * 0.02
                )
    return model.eval()


def _new(cls: Any, config: dict[str, Any], device: str, dtype: Any, seed: int) -> Any:
    import torch

    torch.manual_seed(seed)
    with torch.device(device):
        model = cls(**config)
    model = _init_weights(model, seed + 1)
    return model.to(dtype)


def _params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------- builders


def build_longcat(path: Path, full: bool, device: str, dtype: Any) -> dict[str, Any]:
    from diffusers import (
        FlowMatchEulerDiscreteScheduler,
        LongCatAudioDiTPipeline,
        LongCatAudioDiTTransformer,
        LongCatAudioDiTVae,
    )
    from transformers import UMT5Config, UMT5EncoderModel

    from cdit_runtime.tiny_pipelines import _t5_tokenizer

    tokenizer = _t5_tokenizer()
    vocab = len(tokenizer) + 8
    if full:
        text_config = UMT5Config(
            d_model=768,
            num_layers=12,
            num_heads=12,
            d_kv=64,
            d_ff=2048,
            feed_forward_proj="gated-gelu",
            vocab_size=vocab,
        )
        vae_config: dict[str, Any] = {}
    else:
        text_config = UMT5Config(d_model=32, num_layers=1, num_heads=4, d_ff=64, vocab_size=vocab)
        vae_config = dict(
            in_channels=1,
            channels=16,
            c_mults=[1, 2],
            strides=[2],
            latent_dim=8,
            encoder_latent_dim=16,
            downsampling_ratio=2,
            sample_rate=32,
        )
    transformer = _new(
        LongCatAudioDiTTransformer, longcat_transformer_config(full), device, dtype, SEED
    )
    vae = _new(LongCatAudioDiTVae, vae_config, device, dtype, SEED + 10)
    text_encoder = _new(UMT5EncoderModel, {"config": text_config}, device, dtype, SEED + 20)
    pipe = LongCatAudioDiTPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(),
    )
    pipe.save_pretrained(str(path))
    return {
        "transformer": _params(transformer),
        "vae": _params(vae),
        "text_encoder": _params(text_encoder),
    }


def build_motif(path: Path, full: bool, device: str, dtype: Any) -> dict[str, Any]:
    from diffusers import (
        AdaptiveProjectedGuidance,
        AutoencoderKLWan,
        FlowMatchEulerDiscreteScheduler,
        MotifVideoPipeline,
        MotifVideoTransformer3DModel,
    )
    from transformers import T5Gemma2Encoder, T5Gemma2EncoderConfig, T5Gemma2TextConfig

    from cdit_runtime.tiny_pipelines import _byte_bpe

    config = motif_transformer_config(full)
    text_dim = config.get("text_embed_dim", 4096)
    tokenizer = _byte_bpe(("<pad>", "<eos>", "<bos>"), "<bos>", "<eos>", 512 if full else 64)
    text_config = T5Gemma2TextConfig(
        hidden_size=text_dim,
        num_hidden_layers=1,
        num_attention_heads=32 if full else 2,
        intermediate_size=2 * text_dim,
        vocab_size=len(tokenizer),
        max_position_embeddings=1024 if full else 128,
        head_dim=128 if full else 16,
        num_key_value_heads=8 if full else 2,
        dropout_rate=0.0,
    )
    if full:
        vae_config: dict[str, Any] = {}
    else:
        z = 4
        vae_config = dict(
            base_dim=8,
            z_dim=z,
            dim_mult=[1, 1, 1, 1],
            num_res_blocks=1,
            temperal_downsample=[False, True, True],
            latents_mean=[0.0] * z,
            latents_std=[1.0] * z,
        )
    transformer = _new(MotifVideoTransformer3DModel, config, device, dtype, SEED)
    vae = _new(AutoencoderKLWan, vae_config, device, dtype, SEED + 10)
    text_encoder = _new(
        T5Gemma2Encoder,
        {"config": T5Gemma2EncoderConfig(text_config=text_config)},
        device,
        dtype,
        SEED + 20,
    )
    pipe = MotifVideoPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        guider=AdaptiveProjectedGuidance(),
    )
    pipe.save_pretrained(str(path))
    return {
        "transformer": _params(transformer),
        "vae": _params(vae),
        "text_encoder": _params(text_encoder),
    }


def build_nucleus(path: Path, full: bool, device: str, dtype: Any) -> dict[str, Any]:
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        NucleusMoEImageTransformer2DModel,
    )

    from tests.new_models.embeds_pipelines import NucleusMoEImagePipelineWithEmbeds

    if full:
        vae_config: dict[str, Any] = {}
    else:
        vae_config = dict(
            base_dim=8,
            z_dim=4,
            dim_mult=[1, 2, 4],
            num_res_blocks=1,
            temperal_downsample=[False, True],
            latents_mean=[0.0] * 4,
            latents_std=[1.0] * 4,
        )
    transformer = _new(
        NucleusMoEImageTransformer2DModel,
        nucleus_transformer_config(full, device),
        device,
        dtype,
        SEED,
    )
    vae = _new(AutoencoderKLQwenImage, vae_config, device, dtype, SEED + 10)
    pipe = NucleusMoEImagePipelineWithEmbeds(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=None,
        processor=None,
    )
    pipe.save_pretrained(str(path))
    return {"transformer": _params(transformer), "vae": _params(vae), "text_encoder": 0}


def nucleus_inputs(full: bool, dtype_name: str) -> Callable[[Path], dict[str, str]]:
    """Seeded prompt embeddings (and all-true masks) as ``.npy`` files, as the suite writes them
    (float32: ``.npy`` has no bfloat16)."""

    def write(directory: Path) -> dict[str, str]:
        import numpy as np
        import torch

        dim, tokens = (4096, 128) if full else (16, 8)
        directory.mkdir(parents=True, exist_ok=True)
        generator = torch.Generator().manual_seed(SEED + 2)
        files = {}
        for name in ("prompt_embeds", "negative_prompt_embeds"):
            embeds = torch.randn(1, tokens, dim, generator=generator)
            np.save(directory / f"{name}.npy", embeds.numpy())
            np.save(directory / f"{name}_mask.npy", np.ones((1, tokens), dtype=bool))
            files[name] = str(directory / f"{name}.npy")
            files[f"{name}_mask"] = str(directory / f"{name}_mask.npy")
        return files

    return write


# ------------------------------------------------------------------------------------- specs


@dataclass
class Spec:
    name: str  # the suite's model name
    module: str  # tests.new_models.<module> (its MODEL: sources, classes)
    transformer_config: Callable[..., dict[str, Any]]
    build: Callable[[Path, bool, str, Any], dict[str, Any]]
    request_full: dict[str, Any]
    request_tiny: dict[str, Any]
    inputs: Callable[[bool, str], Callable[[Path], dict[str, str]]] | None = None
    source_files: tuple[str, ...] = ()
    cache: dict[str, Any] = field(default_factory=dict)

    def suite_model(self) -> Any:
        import importlib

        return importlib.import_module(f"tests.new_models.{self.module}").MODEL


SPECS: dict[str, Spec] = {
    s.name: s
    for s in (
        Spec(
            "longcat-audio",
            "longcat_audio",
            longcat_transformer_config,
            build_longcat,
            # 10.24 s at 24 kHz / 2048: 120 latent frames (even, for the later 2-way splits)
            {"steps": 16, "extraCallKwargs": {"audio_duration_s": 10.24}},
            {"steps": 6, "extraCallKwargs": {"audio_duration_s": 1.0}},
        ),
        Spec(
            "motif-video",
            "motif_video",
            motif_transformer_config,
            build_motif,
            {
                "height": 480,
                "width": 832,
                "numFrames": 49,
                "steps": 20,
                "prompt": "a red fox running through fresh snow at dawn, cinematic",
                "negativePrompt": "blurry, low quality",
                "extraCallKwargs": {"max_sequence_length": 256},
            },
            {
                "height": 32,
                "width": 32,
                "numFrames": 5,
                "steps": 6,
                "prompt": "a cat",
                "negativePrompt": "blurry",
                "extraCallKwargs": {"max_sequence_length": 16},
            },
        ),
        Spec(
            "nucleus-moe",
            "nucleus_moe",
            nucleus_transformer_config,
            build_nucleus,
            {"height": 1024, "width": 1024, "steps": 28, "extraCallKwargs": {"prompt": None}},
            {"height": 32, "width": 32, "steps": 6, "extraCallKwargs": {"prompt": None}},
            inputs=nucleus_inputs,
            source_files=("tests/new_models/embeds_pipelines.py",),
        ),
    )
}


# ----------------------------------------------------------------------------- stage 1: CPU


def prepare(names: list[str], workdir: Path, full: bool) -> list[dict[str, Any]]:
    """Per model: the transformer config.json (meta device), analysis and the generated
    standalone module, through the suite's own ``analyze`` / ``generate_integration``."""
    import torch

    from tests.new_models import suite

    rows = []
    for name in names:
        spec = SPECS[name]
        model = spec.suite_model()
        out = workdir / name
        config_dir = out / "model" / "transformer"
        config_dir.mkdir(parents=True, exist_ok=True)
        import diffusers

        cls = getattr(diffusers, model.transformer_class)
        with torch.device("meta"):
            transformer = cls(**spec.transformer_config(full))
        transformer.save_config(str(config_dir))
        params = _params(transformer)
        row = suite.Row(model.name, model.kind, model.transformer_class)
        integration = suite.generate_integration(model, out, row)
        info = {
            "model": name,
            "full": full,
            "transformerParameters": params,
            "config": CONFIG_NOTES[name] if full else "tiny",
            "integration": str(integration.relative_to(workdir)) if integration else None,
            "row": row.to_json(),
        }
        (out / "prepared.json").write_text(json.dumps(info, indent=1))
        rows.append(info)
        print(
            f"[{name}] {params / 1e9:.3f} B parameters; refused: {row.refused or 'nothing'}; "
            f"block lists: {row.block_lists}; functor: {row.functor}; "
            f"module: {info['integration']}",
            flush=True,
        )
    return rows


# ----------------------------------------------------------------------------- stage 2: GPU


def _phase(kind: str) -> dict[str, Any]:
    """``rerun``: the plain pipeline once more (a ``kernels`` phase with no backend and no
    compile), judged like a parallel phase: how far the pipeline alone reproduces itself."""
    if kind == "rerun":
        return {"kind": "kernels", "name": "rerun"}
    return {"kind": kind} if kind in ("baseline", "cache") else {"kind": kind, "size": 2}


def _request(
    spec: Spec,
    out: Path,
    integration: Path,
    full: bool,
    args: argparse.Namespace,
    phases: list[str],
) -> dict[str, Any]:
    """`args.floor`: full-step warmups, so the baseline's warmup is a rerun (its rerunPsnrDb);
    `args.deterministic`: the request's deterministic algorithms."""
    request: dict[str, Any] = {
        "model": {
            "source": "local",
            "path": str(out / "model"),
            "sourceFiles": [str(REPO / f) for f in spec.source_files],
        },
        "outputDir": str(out / "verify"),
        "integration": {"kind": "standalone", "path": str(integration)},
        "phases": [_phase(k) for k in phases],
        "cache": {"maxWarmupSteps": 4 if full else 1, "calibrateShare": 0.5},
        "device": args.device,
        "dtype": args.dtype,
        "deterministic": bool(args.deterministic),
        "warmup": 1 if full or args.floor else 0,
        "warmupSteps": None if args.floor else 2,
        "repeat": 1,
        "timeoutS": 420,
        "launchTimeoutS": 420,
        **(spec.request_full if full else spec.request_tiny),
    }
    if spec.inputs is not None:
        request["inputs"] = spec.inputs(full, args.dtype)(out / "inputs")
    return request


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if value == "inf":
        return "inf"
    return f"{value:.{digits}f}"


def summarize(name: str, results: dict[str, Any]) -> dict[str, Any]:
    phases = {p["name"]: p for p in results.get("phases", [])}
    base = phases.get("baseline", {})
    cache = phases.get("cache", {})
    control = cache.get("control") or {}
    calib = cache.get("calibration") or {}

    def err(p: dict[str, Any]) -> str:
        e = p.get("error") or {}
        return f"{e.get('code', '')} {e.get('message', '')}".strip()

    others = {
        n: {
            k: p.get(k)
            for k in (
                "status",
                "verdict",
                "verdictReason",
                "latencyS",
                "psnrDb",
                "ssim",
                "latentPsnrDb",
                "latentMaxAbsDiff",
            )
        }
        for n, p in phases.items()
        if n not in ("baseline", "cache")
    }
    return {
        "model": name,
        "others": others,
        "baseline": {
            "status": base.get("status"),
            "latencyS": base.get("latencyS"),
            "peakMemoryGib": base.get("peakMemoryGib"),
            "steps": base.get("steps"),
            "outputKind": base.get("outputKind"),
            "rerunPsnrDb": base.get("rerunPsnrDb"),
            "rerunLatentPsnrDb": base.get("rerunLatentPsnrDb"),
            "deterministic": bool((base.get("config") or {}).get("deterministic")),
            "error": err(base),
        },
        "cache": {
            "status": cache.get("status"),
            "verdict": cache.get("verdict"),
            "verdictReason": cache.get("verdictReason"),
            "latencyS": cache.get("latencyS"),
            "speedup": cache.get("speedup"),
            "peakMemoryGib": cache.get("peakMemoryGib"),
            "cachedSteps": cache.get("cachedSteps"),
            "steps": cache.get("steps"),
            "psnrDb": cache.get("psnrDb"),
            "ssim": cache.get("ssim"),
            "snrDb": cache.get("snrDb"),
            "latentPsnrDb": cache.get("latentPsnrDb"),
            "threshold": calib.get("threshold"),
            "error": err(cache),
        },
        "control": {
            "status": control.get("status"),
            "verdict": control.get("verdict"),
            "psnrDb": control.get("psnrDb"),
            "ssim": control.get("ssim"),
            "latentPsnrDb": control.get("latentPsnrDb"),
            "latentMaxAbsDiff": control.get("latentMaxAbsDiff"),
            "latencyS": control.get("latencyS"),
            "reason": control.get("reason"),
        },
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| model | params (B) | build+save s | baseline s | peak GiB | cache s | cached | "
        "cache PSNR / SSIM | control PSNR / latent PSNR | cache verdict |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        s = r.get("summary")
        if s is None:
            lines.append(f"| {r['model']} | — | — | not run: {r.get('error', '')} |||||||")
            continue
        b, c, k = s["baseline"], s["cache"], s["control"]
        peak = b["peakMemoryGib"][0] if b.get("peakMemoryGib") else None
        verdict = c["verdict"] or f"{c['status']}: {c['error']}"
        lines.append(
            f"| {r['model']} | {_num(r['params']['transformer'] / 1e9, 3)} | "
            f"{_num(r.get('buildS'), 0)} | {_num(b['latencyS'])} | {_num(peak, 1)} | "
            f"{_num(c['latencyS'])} | {c['cachedSteps']}/{c['steps']} | "
            f"{_num(c['psnrDb'])} / {_num(c['ssim'], 4)} | "
            f"{_num(k['psnrDb'])} / {_num(k['latentPsnrDb'])} | {verdict} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import torch

    full = not args.tiny
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    out_dir = Path(args.out) if args.out else args.workdir / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    env_info = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
    }
    try:
        import cache_dit
        import diffusers
        import transformers

        env_info.update(
            diffusers=diffusers.__version__,
            cache_dit=cache_dit.__version__,
            transformers=transformers.__version__,
        )
    except Exception as exc:  # reported, the verify run will say more
        env_info["importError"] = str(exc)
    print(json.dumps(env_info), flush=True)
    rows: list[dict[str, Any]] = []
    summary_path = out_dir / "summary.json"
    for name in args.names or list(SPECS):
        spec = SPECS[name]
        out = args.workdir / name
        row: dict[str, Any] = {"model": name}
        rows.append(row)
        left = args.deadline_s - (time.monotonic() - started)
        if left < args.min_left_s.get(name, 60):
            row["error"] = f"skipped: {left:.0f} s left of the deadline"
            print(f"[{name}] {row['error']}", flush=True)
            continue
        prepared = json.loads((out / "prepared.json").read_text())
        row["config"] = prepared["config"]
        if prepared["integration"] is None:
            row["error"] = f"generation refused: {prepared['row']['refused']}"
            continue
        integration = args.workdir / prepared["integration"]
        model_dir = out / "model"
        t0 = time.monotonic()
        if (model_dir / "model_index.json").is_file() and args.keep:
            row["params"] = json.loads((out / "params.json").read_text())
        else:
            row["params"] = spec.build(model_dir, full, args.device, dtype)
            (out / "params.json").write_text(json.dumps(row["params"]))
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        row["buildS"] = time.monotonic() - t0
        print(f"[{name}] built and saved in {row['buildS']:.1f} s: {row['params']}", flush=True)
        # as the suite does: Ulysses runs as UAA where the analysis advises it
        uaa = bool(prepared["row"].get("uaa"))
        phases = ["uaa" if k == "ulysses" and uaa else k for k in args.phases]
        request = _request(spec, out, integration, full, args, phases)
        shutil.rmtree(out / "verify", ignore_errors=True)
        request_path = out / "request.json"
        request_path.write_text(json.dumps(request, indent=1))
        env = dict(os.environ)
        paths = [str(REPO), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        t0 = time.monotonic()
        log_path = out_dir / f"{name}.log"
        with log_path.open("w") as log:
            try:
                proc = subprocess.run(
                    [sys.executable, "-m", "cdit_runtime", "verify", str(request_path)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=REPO,
                    env=env,
                    timeout=max(60.0, args.deadline_s - (time.monotonic() - started) - 20),
                    check=False,
                )
                row["exit"] = proc.returncode
            except subprocess.TimeoutExpired:
                row["exit"] = "timeout"
        row["verifyS"] = time.monotonic() - t0
        results = out / "verify" / "results.json"
        if results.is_file():
            data = json.loads(results.read_text())
            row["summary"] = summarize(name, data)
            row["results"] = data
        else:
            row["error"] = f"no results.json (exit {row['exit']}); see {log_path.name}"
        print(f"[{name}] verify done in {row['verifyS']:.1f} s (exit {row['exit']})", flush=True)
        if not args.keep:
            shutil.rmtree(model_dir, ignore_errors=True)
        summary_path.write_text(json.dumps({"env": env_info, "rows": rows}, indent=1))
    summary_path.write_text(json.dumps({"env": env_info, "rows": rows}, indent=1))
    text = table(rows)
    (out_dir / "table.md").write_text(text + "\n")
    print(text, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.new_models_gpu")
    parser.add_argument("stage", choices=("prepare", "run"))
    parser.add_argument("names", nargs="*", help=f"models (default: all): {', '.join(SPECS)}")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--tiny", action="store_true", help="small configs of the same structure")
    parser.add_argument("--device", default=None, help="run: cuda (default) or cpu (--tiny)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--phases", default="baseline,cache")
    parser.add_argument("--out", default=None, help="run: summary, table and logs go here")
    parser.add_argument("--deadline-s", type=float, default=560.0, help="run: whole-run budget")
    parser.add_argument("--keep", action="store_true", help="run: keep the saved weights")
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="run: the request's deterministic algorithms (verify --deterministic)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="run: full-step warmups, so the baseline's warmup measures the pipeline's rerun floor",
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in SPECS]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(SPECS)}")
    args.workdir = args.workdir.resolve()
    args.phases = [p for p in args.phases.split(",") if p]
    args.device = args.device or ("cpu" if args.tiny else "cuda")
    # the least time a model needs to be started (build, save, load, three runs)
    args.min_left_s = {"longcat-audio": 60, "motif-video": 120, "nucleus-moe": 240}
    if args.tiny:
        args.min_left_s = {}
    if args.stage == "prepare":
        prepare(args.names or list(SPECS), args.workdir, not args.tiny)
        return 0
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
