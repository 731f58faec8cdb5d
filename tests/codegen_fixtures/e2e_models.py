"""Tiny seeded random-weight diffusers transformers for the codegen end-to-end checks.

Shared by `tests/test_codegen_e2e.py` (single process) and `gloo_worker.py` (2-process CP run):
both build the same model and inputs from the same seed. Each case names where the analyzer reads
the model (transformer module, class, pipeline module) and how to vary the inputs per denoising
step (timestep) and per CFG branch (another text embedding for the unconditional call).
torch/diffusers are imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SEED = 0


@dataclass(frozen=True)
class Case:
    name: str
    module: str  # dotted transformer module (diffusers.models.transformers.*)
    class_name: str
    pipeline: str | None  # dotted pipeline module, for has_separate_cfg
    build: Callable[[], tuple[Any, dict[str, Any]]]
    timestep: Callable[[int], Any]  # step -> timestep tensor
    text_key: str | None = "encoder_hidden_states"  # what the unconditional branch changes
    cp: bool = True  # the hook plan runs without processor patches


def _randomize(model: Any) -> Any:
    """Perturb every parameter so zero-initialised heads/modulations cannot hide a mistake (the
    runtime's tiny pipelines do the same: `cdit_runtime.tiny_pipelines.perturb`)."""
    from cdit_runtime.tiny_pipelines import perturb

    perturb(model)
    return model.eval()


def _generator() -> Any:
    import torch

    return torch.Generator().manual_seed(SEED + 2)


def _float_t(step: int) -> Any:
    import torch

    return torch.tensor([1.0 - 0.1 * step])


def _int_t(step: int) -> Any:
    import torch

    return torch.tensor([900 - 100 * step])


def build_flux() -> tuple[Any, dict[str, Any]]:
    import torch
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(SEED)
    model = FluxTransformer2DModel(
        patch_size=1,
        in_channels=4,
        num_layers=2,
        num_single_layers=2,
        attention_head_dim=16,
        num_attention_heads=4,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        axes_dims_rope=(4, 4, 8),
    )
    g = _generator()
    height = width = 4
    img_ids = torch.zeros(height, width, 3)
    img_ids[..., 1] = torch.arange(height)[:, None]
    img_ids[..., 2] = torch.arange(width)[None, :]
    inputs = {
        "hidden_states": torch.randn(1, height * width, 4, generator=g),
        "encoder_hidden_states": torch.randn(1, 8, 32, generator=g),
        "pooled_projections": torch.randn(1, 32, generator=g),
        "timestep": torch.tensor([1.0]),
        "img_ids": img_ids.reshape(-1, 3),
        "txt_ids": torch.zeros(8, 3),
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_wan() -> tuple[Any, dict[str, Any]]:
    import torch
    from diffusers import WanTransformer3DModel

    torch.manual_seed(SEED)
    model = WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=4,
        attention_head_dim=12,
        in_channels=4,
        out_channels=4,
        text_dim=16,
        freq_dim=32,
        ffn_dim=32,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32,
    )
    g = _generator()
    inputs = {
        "hidden_states": torch.randn(1, 4, 2, 8, 8, generator=g),
        "encoder_hidden_states": torch.randn(1, 12, 16, generator=g),
        "timestep": torch.tensor([900]),
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_qwenimage() -> tuple[Any, dict[str, Any]]:
    import torch
    from diffusers import QwenImageTransformer2DModel

    torch.manual_seed(SEED)
    model = QwenImageTransformer2DModel(
        patch_size=2,
        in_channels=16,
        out_channels=4,
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=4,
        joint_attention_dim=16,
        guidance_embeds=False,
        axes_dims_rope=(8, 4, 4),
    )
    g = _generator()
    inputs = {
        "hidden_states": torch.randn(1, 16, 16, generator=g),
        "encoder_hidden_states": torch.randn(1, 8, 16, generator=g),
        "timestep": torch.tensor([1.0]),
        "img_shapes": [[(1, 4, 4)]],
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_dit() -> tuple[Any, dict[str, Any]]:
    import torch
    from diffusers import DiTTransformer2DModel

    torch.manual_seed(SEED)
    model = DiTTransformer2DModel(
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=4,
        out_channels=8,
        num_layers=3,
        sample_size=8,
        patch_size=2,
        num_embeds_ada_norm=1000,
    )
    g = _generator()
    inputs = {
        "hidden_states": torch.randn(1, 4, 8, 8, generator=g),
        "timestep": torch.tensor([900]),
        "class_labels": torch.tensor([3]),
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_cogvideox() -> tuple[Any, dict[str, Any]]:
    import torch
    from diffusers import CogVideoXTransformer3DModel

    torch.manual_seed(SEED)
    model = CogVideoXTransformer3DModel(
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=4,
        out_channels=4,
        time_embed_dim=8,
        text_embed_dim=16,
        num_layers=2,
        sample_width=8,
        sample_height=8,
        sample_frames=9,
        patch_size=2,
        temporal_compression_ratio=4,
        max_text_seq_length=8,
    )
    g = _generator()
    inputs = {
        "hidden_states": torch.randn(1, 3, 4, 8, 8, generator=g),
        "encoder_hidden_states": torch.randn(1, 8, 16, generator=g),
        "timestep": torch.tensor([900]),
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_ernie() -> tuple[Any, dict[str, Any]]:
    import torch
    from diffusers import ErnieImageTransformer2DModel

    torch.manual_seed(SEED)
    model = ErnieImageTransformer2DModel(
        hidden_size=32,
        num_attention_heads=2,
        num_layers=2,
        ffn_hidden_size=48,
        in_channels=4,
        out_channels=4,
        patch_size=1,
        text_in_dim=16,
        rope_axes_dim=(4, 6, 6),
    )
    g = _generator()
    inputs = {
        "hidden_states": torch.randn(1, 4, 4, 4, generator=g),
        "timestep": torch.tensor([900.0]),
        "text_bth": torch.randn(1, 6, 16, generator=g),
        "text_lens": torch.tensor([6]),
        "return_dict": False,
    }
    return _randomize(model), inputs


_T = "diffusers.models.transformers."
_P = "diffusers.pipelines."

CASES: dict[str, Case] = {
    case.name: case
    for case in (
        Case(
            "flux",
            _T + "transformer_flux",
            "FluxTransformer2DModel",
            _P + "flux.pipeline_flux",
            build_flux,
            _float_t,
        ),
        Case(
            "wan",
            _T + "transformer_wan",
            "WanTransformer3DModel",
            _P + "wan.pipeline_wan",
            build_wan,
            _int_t,
        ),
        Case(
            "qwenimage",
            _T + "transformer_qwenimage",
            "QwenImageTransformer2DModel",
            _P + "qwenimage.pipeline_qwenimage",
            build_qwenimage,
            _float_t,
        ),
        Case(
            "dit",
            _T + "dit_transformer_2d",
            "DiTTransformer2DModel",
            _P + "dit.pipeline_dit",
            build_dit,
            _int_t,
            text_key=None,
            cp=False,  # AttnProcessor2_0 calls SDPA directly: CP needs a processor patch
        ),
        Case(
            "cogvideox",
            _T + "cogvideox_transformer_3d",
            "CogVideoXTransformer3DModel",
            _P + "cogvideo.pipeline_cogvideox",
            build_cogvideox,
            _int_t,
            cp=False,  # its processor calls SDPA directly: CP needs a processor patch
        ),
        Case(
            "ernie",
            _T + "transformer_ernie_image",
            "ErnieImageTransformer2DModel",
            _P + "ernie_image.pipeline_ernie_image",
            build_ernie,
            _float_t,
            text_key="text_bth",
            cp=False,  # not checked here (text/image concatenation inside forward)
        ),
    )
}


def output(result: Any) -> Any:
    """The sample tensor of a transformer call."""
    return result[0] if isinstance(result, tuple | list) else result.sample
