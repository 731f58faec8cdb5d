"""Tiny random-weight diffusers transformers and their inputs for the 2-process CP check.

Shared by the test (single-process baseline) and `worker.py` (gloo ranks): both build the same
model and inputs from the same seed. torch/diffusers are imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

SEED = 0


@dataclass(frozen=True)
class Case:
    """One model under test: where the analyzer reads it and how to build it."""

    name: str
    module_file: str  # relative to the diffusers package
    class_name: str
    build: Callable[[], tuple[Any, dict[str, Any]]]
    # run the generated standalone module's `enable()` (its hooks, mask reorder and local
    # attention included) instead of the analysis' hook plan alone
    generated: bool = False


def _randomize(model: Any) -> Any:
    """Perturb every parameter so zero-initialised heads/modulations cannot hide a wrong split."""
    import torch

    generator = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for param in model.parameters():
            noise = torch.randn(param.shape, generator=generator, dtype=param.dtype)
            param.add_(noise * 0.05)
    return model.eval()


def _generator() -> Any:
    import torch

    return torch.Generator().manual_seed(SEED + 2)


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
    text_len = 8
    img_ids = torch.zeros(height, width, 3)
    img_ids[..., 1] = torch.arange(height)[:, None]
    img_ids[..., 2] = torch.arange(width)[None, :]
    inputs = {
        "hidden_states": torch.randn(1, height * width, 4, generator=g),
        "encoder_hidden_states": torch.randn(1, text_len, 32, generator=g),
        "pooled_projections": torch.randn(1, 32, generator=g),
        "timestep": torch.tensor([0.5]),
        "img_ids": img_ids.reshape(-1, 3),
        "txt_ids": torch.zeros(text_len, 3),
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
        # 2 frames x (8/2) x (8/2) = 32 tokens
        "hidden_states": torch.randn(1, 4, 2, 8, 8, generator=g),
        "encoder_hidden_states": torch.randn(1, 12, 16, generator=g),
        "timestep": torch.tensor([500]),
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_skyreels() -> tuple[Any, dict[str, Any]]:
    """Single split point with cross-attention keys split at every block (`blocks.*`)."""
    import torch
    from diffusers import SkyReelsV2Transformer3DModel

    torch.manual_seed(SEED)
    model = SkyReelsV2Transformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=4,
        attention_head_dim=12,
        in_channels=4,
        out_channels=4,
        text_dim=16,
        freq_dim=32,
        ffn_dim=32,
        num_layers=2,
        rope_max_seq_len=32,
    )
    g = _generator()
    inputs = {
        "hidden_states": torch.randn(1, 4, 2, 8, 8, generator=g),
        "encoder_hidden_states": torch.randn(1, 12, 16, generator=g),
        "timestep": torch.tensor([500]),
        "return_dict": False,
    }
    return _randomize(model), inputs


def _qwen(with_mask: bool) -> tuple[Any, dict[str, Any]]:
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
    height = width = 4
    text_len = 8
    inputs: dict[str, Any] = {
        "hidden_states": torch.randn(1, height * width, 16, generator=g),
        "encoder_hidden_states": torch.randn(1, text_len, 16, generator=g),
        "timestep": torch.tensor([0.5]),
        "img_shapes": [[(1, height, width)]],
        "return_dict": False,
    }
    if with_mask:
        # the pipeline passes a mask when prompts are padded: last 3 text tokens are padding
        mask = torch.ones(1, text_len, dtype=torch.long)
        mask[:, -3:] = 0
        inputs["encoder_hidden_states_mask"] = mask
    return _randomize(model), inputs


def build_qwen() -> tuple[Any, dict[str, Any]]:
    return _qwen(with_mask=False)


def build_qwen_masked() -> tuple[Any, dict[str, Any]]:
    return _qwen(with_mask=True)


def build_ltx() -> tuple[Any, dict[str, Any]]:
    import torch
    from diffusers import LTXVideoTransformer3DModel

    torch.manual_seed(SEED)
    model = LTXVideoTransformer3DModel(
        in_channels=8,
        out_channels=8,
        patch_size=1,
        patch_size_t=1,
        num_attention_heads=4,
        attention_head_dim=8,
        cross_attention_dim=32,
        num_layers=2,
        caption_channels=16,
    )
    g = _generator()
    frames, height, width = 2, 4, 4
    text_len = 8
    mask = torch.ones(1, text_len, dtype=torch.long)
    mask[:, -3:] = 0  # T5 prompts are padded: the pipeline always passes the mask
    inputs = {
        "hidden_states": torch.randn(1, frames * height * width, 8, generator=g),
        "encoder_hidden_states": torch.randn(1, text_len, 16, generator=g),
        "timestep": torch.tensor([500]),
        "encoder_attention_mask": mask,
        "num_frames": frames,
        "height": height,
        "width": width,
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_duet_mask(cls: str = "DuetMaskDiT") -> tuple[Any, dict[str, Any]]:
    """An invented dual-stream DiT whose joint `[text, image]` mask must be permuted into
    all-to-all order, with attention after the gather (tests/fixtures/models/duet_mask_dit.py);
    the text mask is padded, so a wrong order changes the output. `DuetJoinDiT`: the blocks join
    the streams in their own forward instead of the attention processor."""
    import torch

    from tests.module_loading import load_module

    module = load_module("duet_mask_dit", Path(DUET_MASK))
    torch.manual_seed(SEED)
    model = getattr(module, cls)(in_channels=4, text_dim=8, dim=32, heads=4)
    g = _generator()
    mask = torch.ones(1, 8, dtype=torch.long)
    mask[:, 5:] = 0
    inputs = {
        "hidden_states": torch.randn(1, 16, 4, generator=g),
        "encoder_hidden_states": torch.randn(1, 8, 8, generator=g),
        "encoder_attention_mask": mask,
    }
    return _randomize(model), inputs


def build_packed_segment() -> tuple[Any, dict[str, Any]]:
    """An invented DiT of images packed into one sequence, attending within its own image through
    a block-diagonal mask forward builds from the caller's `segment_ids`
    (tests/fixtures/models/packed_segment_dit.py). The segments (5, 11, 8 tokens) straddle the
    two ranks' shards: under ring, queries meet key shards with every key masked."""
    import torch

    from tests.module_loading import load_module

    module = load_module("packed_segment_dit", Path(PACKED_SEGMENT))
    torch.manual_seed(SEED)
    model = module.PackedSegmentDiT(in_channels=4, dim=32, heads=4, depth=2)
    g = _generator()
    segment_ids = torch.tensor([[0] * 5 + [1] * 11 + [2] * 8])
    inputs = {
        "hidden_states": torch.randn(1, 24, 4, generator=g),
        "timestep": torch.tensor([0.5]),
        "segment_ids": segment_ids,
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_plain_sdpa() -> tuple[Any, dict[str, Any]]:
    """An invented serving-framework DiT whose plain attention modules call SDPA themselves (a
    bare `sdpa` alias; tests/fixtures/models/plain_sdpa_dit.py): the generated module routes the
    self-attention through cache-dit's CP attention, the cross-attention to the text stays
    local."""
    import torch

    from tests.module_loading import load_module

    module = load_module("plain_sdpa_dit", Path(PLAIN_SDPA))
    torch.manual_seed(SEED)
    model = module.PlainSdpaDiT(in_channels=4, patch=2, dim=32, heads=4, depth=2, text_dim=16)
    g = _generator()
    inputs = {
        "latents": torch.randn(1, 4, 8, 8, generator=g),
        "timestep": torch.tensor([0.5]),
        "context": torch.randn(1, 6, 16, generator=g),
        "return_dict": False,
    }
    return _randomize(model), inputs


def _third_party(path: str, cls: str) -> tuple[Any, dict[str, Any]]:
    """A fixture of tests/fixtures/models/third_party/ built seeded with its `example_inputs`,
    passed by the names of its forward's parameters."""
    import inspect

    import torch

    from tests.module_loading import load_module

    module = load_module(Path(path).stem, Path(path))
    torch.manual_seed(SEED)
    model = getattr(module, cls)()
    values = module.example_inputs(model, _generator())
    names = list(inspect.signature(model.forward).parameters)
    return _randomize(model), dict(zip(names, values, strict=False))


def build_keyword_mmdit() -> tuple[Any, dict[str, Any]]:
    """Two block lists whose blocks take every argument by keyword only, with a `(cos, sin)`
    rotary table from a plain method of the transformer (keyword_mmdit.py)."""
    return _third_party(KEYWORD_MMDIT, "KeywordMMDiT")


def build_sequential_dit() -> tuple[Any, dict[str, Any]]:
    """Blocks kept in an nn.Sequential that forward iterates (sequential_dit.py)."""
    return _third_party(SEQUENTIAL_DIT, "SequentialDiT")


def build_output_dict_dit() -> tuple[Any, dict[str, Any]]:
    """Blocks returning a dict, the loop keeping one entry (output_dict_dit.py)."""
    return _third_party(OUTPUT_DICT_DIT, "OutputDictDiT")


def build_ref_mmdit() -> tuple[Any, dict[str, Any]]:
    """An MMDiT written as reference code and serving frameworks write it (ref_mmdit.py): a
    plain nn.Module, per-token position ids passed beside the tokens, attention as a free
    function calling SDPA on (B, H, L, D)."""
    return _third_party(REF_MMDIT, "RefMMDiT")


def build_sit_like() -> tuple[Any, dict[str, Any]]:
    """A class-conditional DiT in the original research code's shape (sit_dit.py): a
    third-party class named `Attention` calling SDPA, a fixed position table added before the
    blocks, a 4-D latent patchified in forward."""
    return _third_party(SIT_DIT, "SiTLike")


def build_tide_video() -> tuple[Any, dict[str, Any]]:
    """A Wan-style research-code video DiT (tide_video.py): CP is refused (whole grid sizes
    reach the blocks); its TP runs the module's own planner (a plain nn.Module) with
    distributed RMSNorms over the sharded q/k width."""
    return _third_party(TIDE_VIDEO, "TideVideoModel")


def _build_flash(cls: str) -> tuple[Any, dict[str, Any]]:
    """flash_dit.py with the CPU stand-in for flash-attn (tests/fakes/flash_attn) importable,
    so its attention runs `flash_attn_func`."""
    import sys

    fakes = str(Path(__file__).resolve().parents[1] / "fakes")
    if fakes not in sys.path:
        sys.path.insert(0, fakes)
    model, inputs = _third_party(FLASH_DIT, cls)
    assert sys.modules["flash_dit"].HAS_FLASH
    return model, inputs


def build_flash() -> tuple[Any, dict[str, Any]]:
    """Attention calling `flash_attn_func` itself: the module rebinds it to a routed one."""
    return _build_flash("FlashDiT")


def build_flash_fallback() -> tuple[Any, dict[str, Any]]:
    """Attention through a function of the file taking flash-attn when installed."""
    return _build_flash("FlashFallbackDiT")


def build_cis() -> tuple[Any, dict[str, Any]]:
    """LLaMA-style complex rotary table cut to the stream's length in forward (cis_dit.py)."""
    return _third_party(CIS_DIT, "CisDiT")


def build_cis_kw() -> tuple[Any, dict[str, Any]]:
    """The LLaMA-style table handed to the blocks in a keyword dict (`layer(x, **kw)`)."""
    return _third_party(CIS_DIT, "CisKwDiT")


def build_frame_cond(cls: str) -> tuple[Any, dict[str, Any]]:
    """Per-frame / per-token conditioning expanded to one row per token (frame_cond_dit.py)."""
    return _third_party(FRAME_COND_DIT, cls)


def build_timm_flag() -> tuple[Any, dict[str, Any]]:
    """timm's attention with its run-time `fused_attn` switch off (hand-computed attention)."""
    return _third_party(TIMM_FLAG_DIT, "TimmFlagDiT")


def build_runner() -> tuple[Any, dict[str, Any]]:
    """PixArt-alpha-shaped DiT whose loop hands each block to `auto_grad_checkpoint`."""
    return _third_party(RUNNER_DIT, "RunnerDiT")


def build_method_runner() -> tuple[Any, dict[str, Any]]:
    """The same blocks run through a method of the model (`self._run(block, x, y, t0)`)."""
    return _third_party(RUNNER_DIT, "MethodRunnerDiT")


def build_valid_frames() -> tuple[Any, dict[str, Any]]:
    """An invented DiT over a padded batch of clips (tests/fixtures/models/valid_frames_dit.py):
    one mask is the attention's key mask and a per-token multiply in every block. The clips
    hold 13 and 6 real frames of 16: rank 1's keys are all padding for the second clip."""
    import torch

    from tests.module_loading import load_module

    module = load_module("valid_frames_dit", Path(VALID_FRAMES))
    torch.manual_seed(SEED)
    model = module.ValidFramesDiT(in_channels=8, dim=32, heads=4, depth=2)
    g = _generator()
    frame_mask = torch.arange(16)[None, :] < torch.tensor([[13], [6]])
    inputs = {
        "frames": torch.randn(2, 16, 8, generator=g),
        "timestep": torch.tensor([0.5, 0.5]),
        "frame_mask": frame_mask,
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_register_tokens() -> tuple[Any, dict[str, Any]]:
    """An invented DiT with register tokens joined before the blocks and dropped after them,
    and a rotary angle table built inline from `arange` over the image length
    (tests/fixtures/models/register_tokens_dit.py): split at the first block, the table split
    where each block receives it, gathered before the registers are dropped."""
    import torch

    from tests.module_loading import load_module

    module = load_module("register_tokens_dit", Path(REGISTER_TOKENS))
    torch.manual_seed(SEED)
    model = module.RegisterTokensDiT(in_channels=4, patch=2, dim=32, heads=4, depth=2, registers=4)
    g = _generator()
    inputs = {
        "sample": torch.randn(1, 4, 8, 8, generator=g),
        "timestep": torch.tensor([0.5]),
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_inline_rope() -> tuple[Any, dict[str, Any]]:
    """An invented sequence DiT whose rotary angles forward builds inline from `arange` over
    the token count (tests/fixtures/models/inline_rope_seq_dit.py)."""
    import torch

    from tests.module_loading import load_module

    module = load_module("inline_rope_seq_dit", Path(INLINE_ROPE))
    torch.manual_seed(SEED)
    model = module.SeqRopeDiT(in_dim=8, dim=32, heads=4, depth=2)
    g = _generator()
    inputs = {
        "x": torch.randn(1, 16, 8, generator=g),
        "t": torch.tensor([0.5]),
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_dit() -> tuple[Any, dict[str, Any]]:
    """diffusers' DiT: `AttnProcessor2_0` calls SDPA itself (the generated module routes it);
    the tiny DiT of the codegen end-to-end tests."""
    from tests.codegen_fixtures.e2e_models import build_dit as build

    return build()


def build_sd3() -> tuple[Any, dict[str, Any]]:
    """diffusers' SD3: `JointAttnProcessor2_0` calls SDPA itself, handed to `Attention` as a
    local built just above (`processor=processor`); the generated module routes that class."""
    import torch
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(SEED)
    model = SD3Transformer2DModel(
        sample_size=8,
        patch_size=2,
        in_channels=4,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=4,
        joint_attention_dim=16,
        caption_projection_dim=32,
        pooled_projection_dim=16,
        out_channels=4,
        pos_embed_max_size=16,
    )
    g = _generator()
    inputs = {
        "hidden_states": torch.randn(1, 4, 8, 8, generator=g),
        "encoder_hidden_states": torch.randn(1, 6, 16, generator=g),
        "pooled_projections": torch.randn(1, 16, generator=g),
        "timestep": torch.tensor([500]),
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_echo_rope() -> tuple[Any, dict[str, Any]]:
    """An invented DiT whose rotary table is read again after the cached loop (a refiner loop
    over a list slice runs on the whole sequence): the table is split where each cached block
    receives it, never in place (tests/fixtures/models/echo_rope_dit.py)."""
    import torch

    from tests.module_loading import load_module

    module = load_module("echo_rope_dit", Path(ECHO_ROPE))
    torch.manual_seed(SEED)
    model = module.EchoRopeDiT(in_channels=4, dim=32, heads=4, depth=2)
    g = _generator()
    inputs = {
        "hidden_states": torch.randn(1, 16, 4, generator=g),
        "timestep": torch.tensor([500]),
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_kandinsky5() -> tuple[Any, dict[str, Any]]:
    """Text blocks run on the whole prompt before the visual blocks are split: with the generated
    module their attention stays local (`_local_attention_outside`)."""
    import torch
    from diffusers import Kandinsky5Transformer3DModel

    torch.manual_seed(SEED)
    model = Kandinsky5Transformer3DModel(
        in_visual_dim=4,
        in_text_dim=16,
        in_text_dim2=8,
        time_dim=16,
        out_visual_dim=4,
        patch_size=(1, 2, 2),
        model_dim=32,
        ff_dim=64,
        num_text_blocks=1,
        num_visual_blocks=2,
        axes_dims=(4, 6, 6),
    )
    g = _generator()
    frames, height, width = 2, 8, 8
    inputs = {
        "hidden_states": torch.randn(1, frames, height, width, 4, generator=g),
        "encoder_hidden_states": torch.randn(1, 6, 16, generator=g),
        "timestep": torch.tensor([500.0]),
        "pooled_projections": torch.randn(1, 8, generator=g),
        "visual_rope_pos": (
            torch.arange(frames),
            torch.arange(height // 2),
            torch.arange(width // 2),
        ),
        "text_rope_pos": torch.arange(6),
        "return_dict": False,
    }
    return _randomize(model), inputs


def build_minimax_h3() -> tuple[Any, dict[str, Any]]:
    """Video, audio and text rows written into one packed sequence at sequence-wide slots (an
    interleaved order here), AdaLN rows picked per token by `adaln_indices`, `norm_out` picking
    rows by `timestep_indices`, two heads selecting their rows back."""
    import torch
    from diffusers import MiniMaxH3Transformer3DModel

    torch.manual_seed(SEED)
    model = MiniMaxH3Transformer3DModel(
        num_attention_heads=2,
        attention_head_dim=12,
        hidden_size=24,
        num_layers=2,
        num_refiner_layers=1,
        ffn_dim=48,
        in_channels=4,
        audio_in_channels=4,
        text_dim=8,
        freq_dim=16,
        time_embed_hidden_dim=24,
        time_embed_dim=24,
        rope_freq_dim=2,
    )
    g = _generator()
    video, audio, text = 8, 2, 4
    total = video + audio + text
    order = torch.randperm(total, generator=g)
    video_indices, audio_indices, text_indices = (
        order[:video].sort().values,
        order[video : video + audio].sort().values,
        order[video + audio :].sort().values,
    )
    token_tags = torch.zeros(total, dtype=torch.long)
    token_tags[text_indices] = 1
    token_tags[audio_indices] = 2
    timestep_indices = torch.zeros(total, dtype=torch.long)
    timestep_indices[text_indices] = 1  # text rows at the clean level
    inputs = {
        "hidden_states": torch.randn(1, video, 16, generator=g),
        "audio_hidden_states": torch.randn(1, audio, 4, generator=g),
        "encoder_hidden_states": torch.randn(1, text, 8, generator=g),
        "timestep": torch.tensor([0.6, 0.0]),
        "timestep_indices": timestep_indices,
        "token_tags": token_tags,
        "position_ids": torch.randint(0, 6, (total, 3), generator=g),
        "video_indices": video_indices,
        "audio_indices": audio_indices,
        "text_indices": text_indices,
        "return_dict": False,
    }
    return _randomize(model), inputs


_TRANSFORMERS = "models/transformers/"
ECHO_ROPE = str(Path(__file__).resolve().parents[1] / "fixtures" / "models" / "echo_rope_dit.py")
DUET_MASK = str(Path(__file__).resolve().parents[1] / "fixtures" / "models" / "duet_mask_dit.py")
PLAIN_SDPA = str(Path(__file__).resolve().parents[1] / "fixtures" / "models" / "plain_sdpa_dit.py")
INLINE_ROPE = str(
    Path(__file__).resolve().parents[1] / "fixtures" / "models" / "inline_rope_seq_dit.py"
)
REGISTER_TOKENS = str(
    Path(__file__).resolve().parents[1] / "fixtures" / "models" / "register_tokens_dit.py"
)
VALID_FRAMES = str(
    Path(__file__).resolve().parents[1] / "fixtures" / "models" / "valid_frames_dit.py"
)
REF_MMDIT = str(
    Path(__file__).resolve().parents[1] / "fixtures" / "models" / "third_party" / "ref_mmdit.py"
)
KEYWORD_MMDIT = str(
    Path(__file__).resolve().parents[1] / "fixtures" / "models" / "third_party" / "keyword_mmdit.py"
)
SEQUENTIAL_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures/models/third_party/sequential_dit.py"
)
JOINT_TOKENS_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures/models/third_party/joint_tokens_dit.py"
)
HANDBACK_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures/models/third_party/handback_dit.py"
)
MODE_DICT_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures/models/third_party/mode_dict_dit.py"
)
STAGE_LISTS_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures/models/third_party/stage_lists_dit.py"
)
FREE_ROPE_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures/models/third_party/free_rope_dit.py"
)
TURNED_PAIRS_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures/models/third_party/turned_pairs_dit.py"
)
WINDOW_ATTN_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures/models/third_party/window_attn_dit.py"
)
OUTPUT_DICT_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures/models/third_party/output_dict_dit.py"
)
SIT_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures" / "models" / "third_party" / "sit_dit.py"
)
TIDE_VIDEO = str(
    Path(__file__).resolve().parents[1] / "fixtures" / "models" / "third_party" / "tide_video.py"
)
FLASH_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures" / "models" / "third_party" / "flash_dit.py"
)
CIS_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures" / "models" / "third_party" / "cis_dit.py"
)
TIMM_FLAG_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures" / "models" / "third_party" / "timm_flag_dit.py"
)
_THIRD_PARTY = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "third_party"
TABLE_ROPE_DIT = str(_THIRD_PARTY / "table_rope_dit.py")
SEQ_FIRST_DIT = str(_THIRD_PARTY / "seq_first_dit.py")
FRAME_COND_DIT = str(_THIRD_PARTY / "frame_cond_dit.py")
GRID_ROPE_DIT = str(_THIRD_PARTY / "grid_rope_dit.py")
PACKED_ROWS_DIT = str(_THIRD_PARTY / "packed_rows_dit.py")
UVIT_DIT = str(_THIRD_PARTY / "uvit_dit.py")
LEARNED_POS_DIT = str(_THIRD_PARTY / "learned_pos_dit.py")
POOLED_DIT = str(_THIRD_PARTY / "pooled_dit.py")
DRIFT_TABLES_DIT = str(_THIRD_PARTY / "drift_tables_dit.py")
VARIANT_DIT = str(_THIRD_PARTY / "variant_dit.py")
RUNNER_DIT = str(
    Path(__file__).resolve().parents[1] / "fixtures" / "models" / "third_party" / "runner_dit.py"
)
PACKED_SEGMENT = str(
    Path(__file__).resolve().parents[1] / "fixtures" / "models" / "packed_segment_dit.py"
)

CASES: dict[str, Case] = {
    case.name: case
    for case in (
        Case("flux", _TRANSFORMERS + "transformer_flux.py", "FluxTransformer2DModel", build_flux),
        Case("wan", _TRANSFORMERS + "transformer_wan.py", "WanTransformer3DModel", build_wan),
        Case(
            "skyreels",
            _TRANSFORMERS + "transformer_skyreels_v2.py",
            "SkyReelsV2Transformer3DModel",
            build_skyreels,
        ),
        Case(
            "qwenimage",
            _TRANSFORMERS + "transformer_qwenimage.py",
            "QwenImageTransformer2DModel",
            build_qwen,
        ),
        Case(
            "qwenimage_mask",
            _TRANSFORMERS + "transformer_qwenimage.py",
            "QwenImageTransformer2DModel",
            build_qwen_masked,
        ),
        Case("ltx", _TRANSFORMERS + "transformer_ltx.py", "LTXVideoTransformer3DModel", build_ltx),
        Case("echo_rope", ECHO_ROPE, "EchoRopeDiT", build_echo_rope),
        Case(
            "kandinsky5",
            _TRANSFORMERS + "transformer_kandinsky.py",
            "Kandinsky5Transformer3DModel",
            build_kandinsky5,
            generated=True,
        ),
        Case(
            "minimax_h3",
            _TRANSFORMERS + "transformer_minimax_h3.py",
            "MiniMaxH3Transformer3DModel",
            build_minimax_h3,
            generated=True,
        ),
        Case("duet_mask", DUET_MASK, "DuetMaskDiT", build_duet_mask, generated=True),
        Case("plain_sdpa", PLAIN_SDPA, "PlainSdpaDiT", build_plain_sdpa, generated=True),
        Case(
            "sd3",
            _TRANSFORMERS + "transformer_sd3.py",
            "SD3Transformer2DModel",
            build_sd3,
            generated=True,
        ),
        Case("sit_like", SIT_DIT, "SiTLike", build_sit_like, generated=True),
        Case("tide_video", TIDE_VIDEO, "TideVideoModel", build_tide_video, generated=True),
        Case("flash", FLASH_DIT, "FlashDiT", build_flash, generated=True),
        Case("flash_fallback", FLASH_DIT, "FlashFallbackDiT", build_flash_fallback, generated=True),
        Case("cis", CIS_DIT, "CisDiT", build_cis, generated=True),
        Case("cis_kw", CIS_DIT, "CisKwDiT", build_cis_kw, generated=True),
        Case("runner", RUNNER_DIT, "RunnerDiT", build_runner, generated=True),
        Case("timm_flag", TIMM_FLAG_DIT, "TimmFlagDiT", build_timm_flag, generated=True),
        Case("method_runner", RUNNER_DIT, "MethodRunnerDiT", build_method_runner, generated=True),
        Case("ref_mmdit", REF_MMDIT, "RefMMDiT", build_ref_mmdit, generated=True),
        Case("keyword_mmdit", KEYWORD_MMDIT, "KeywordMMDiT", build_keyword_mmdit, generated=True),
        Case("sequential", SEQUENTIAL_DIT, "SequentialDiT", build_sequential_dit, generated=True),
        Case(
            "output_dict", OUTPUT_DICT_DIT, "OutputDictDiT", build_output_dict_dit, generated=True
        ),
        *(
            Case(
                name, FREE_ROPE_DIT, cls, partial(_third_party, FREE_ROPE_DIT, cls), generated=True
            )
            for name, cls in (
                ("free_rope", "FreeRopeDiT"),
                ("used_rope", "UsedRopeDiT"),
                ("mirror_grid", "MirrorGridDiT"),
            )
        ),
        *(
            Case(
                name,
                TURNED_PAIRS_DIT,
                cls,
                partial(_third_party, TURNED_PAIRS_DIT, cls),
                generated=True,
            )
            for name, cls in (("index_rope", "PairTableDiT"), ("rotate_call", "SwapCallDiT"))
        ),
        Case(
            "joint_tokens",
            JOINT_TOKENS_DIT,
            "JointTokensDiT",
            partial(_third_party, JOINT_TOKENS_DIT, "JointTokensDiT"),
            generated=True,
        ),
        *(
            Case(name, HANDBACK_DIT, cls, partial(_third_party, HANDBACK_DIT, cls), generated=True)
            for name, cls in (("handback", "HandbackDiT"), ("keep_first", "KeepFirstDiT"))
        ),
        *(
            Case(
                name, MODE_DICT_DIT, cls, partial(_third_party, MODE_DICT_DIT, cls), generated=True
            )
            for name, cls in (("mode_dict", "ModeDictDiT"), ("wide_mode_dict", "WideModeDictDiT"))
        ),
        Case(
            "stage_lists",
            STAGE_LISTS_DIT,
            "StageListsDiT",
            partial(_third_party, STAGE_LISTS_DIT, "StageListsDiT"),
            generated=True,
        ),
        # the global-attention twin's module on the model whose attention runs within windows
        # (the analysis refuses CP for it): the control that the refusal is needed
        *(
            Case(
                name,
                WINDOW_ATTN_DIT,
                "GlobalAttnDiT",
                partial(_third_party, WINDOW_ATTN_DIT, built),
                generated=True,
            )
            for name, built in (
                ("window_global", "GlobalAttnDiT"),
                ("window_forced", "WindowAttnDiT"),
            )
        ),
        *(
            Case(name, FRAME_COND_DIT, cls, partial(build_frame_cond, cls), generated=True)
            for name, cls in (
                ("frame_forcing", "FrameForcingDiT"),
                ("expand_forcing", "ExpandForcingDiT"),
                ("broadcast_temb", "BroadcastTembDiT"),
            )
        ),
        *(
            Case(
                name,
                TABLE_ROPE_DIT,
                cls,
                partial(_third_party, TABLE_ROPE_DIT, cls),
                generated=True,
            )
            for name, cls in (("table_rope", "TableRopeDiT"), ("stack_rope", "StackRopeDiT"))
        ),
        *(
            Case(
                name, SEQ_FIRST_DIT, cls, partial(_third_party, SEQ_FIRST_DIT, cls), generated=True
            )
            for name, cls in (("seq_first", "SeqFirstDiT"), ("detr_style", "DetrStyleDiT"))
        ),
        *(
            Case(
                name,
                LEARNED_POS_DIT,
                cls,
                partial(_third_party, LEARNED_POS_DIT, cls),
                generated=True,
            )
            for name, cls in (("learned_pos", "LearnedPosDiT"), ("cut_table", "CutTableDiT"))
        ),
        Case(
            "pooled_cond",
            POOLED_DIT,
            "PooledCondDiT",
            partial(_third_party, POOLED_DIT, "PooledCondDiT"),
            generated=True,
        ),
        Case("uvit", UVIT_DIT, "UViT", partial(_third_party, UVIT_DIT, "UViT"), generated=True),
        *(
            Case(
                name,
                DRIFT_TABLES_DIT,
                cls,
                partial(_third_party, DRIFT_TABLES_DIT, cls),
                generated=True,
            )
            for name, cls in (
                ("fn_table", "FnTableDiT"),
                ("method_table", "MethodTableDiT"),
                ("imported_table", "ImportedTableDiT"),
                ("plain_name", "PlainNameDiT"),
                ("cut_name", "CutNameDiT"),
                ("cut_cache", "CutCacheDiT"),
                ("caller_table", "CallerTableDiT"),
            )
        ),
        *(
            Case(name, VARIANT_DIT, cls, partial(_third_party, VARIANT_DIT, cls), generated=True)
            for name, cls in (
                ("variant_wide", "WideVariantDiT"),
                ("variant_residual", "ResidualVariantDiT"),
            )
        ),
        Case(
            "packed_rows",
            PACKED_ROWS_DIT,
            "PackedRowsDiT",
            partial(_third_party, PACKED_ROWS_DIT, "PackedRowsDiT"),
            generated=True,
        ),
        Case(
            "grid_rope",
            GRID_ROPE_DIT,
            "GridRopeDiT",
            partial(_third_party, GRID_ROPE_DIT, "GridRopeDiT"),
            generated=True,
        ),
        Case("inline_rope", INLINE_ROPE, "SeqRopeDiT", build_inline_rope, generated=True),
        Case(
            "register_tokens",
            REGISTER_TOKENS,
            "RegisterTokensDiT",
            build_register_tokens,
            generated=True,
        ),
        Case(
            "valid_frames",
            VALID_FRAMES,
            "ValidFramesDiT",
            build_valid_frames,
            generated=True,
        ),
        Case(
            "dit",
            _TRANSFORMERS + "dit_transformer_2d.py",
            "DiTTransformer2DModel",
            build_dit,
            generated=True,
        ),
        Case(
            "packed_segment",
            PACKED_SEGMENT,
            "PackedSegmentDiT",
            build_packed_segment,
            generated=True,
        ),
        Case(
            "duet_join",
            DUET_MASK,
            "DuetJoinDiT",
            lambda: build_duet_mask("DuetJoinDiT"),
            generated=True,
        ),
    )
}


def run(name: str) -> Any:
    """Build case `name` and return its output tensor (fp32, no grad)."""
    import torch

    model, inputs = CASES[name].build()
    with torch.no_grad():
        out = model(**inputs)
    if isinstance(out, torch.Tensor):
        return out
    return out[0] if isinstance(out, (tuple, list)) else out.sample
