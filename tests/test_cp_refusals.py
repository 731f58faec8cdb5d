"""Context-parallel parts that cannot be generated are refused before anything runs, with the
reason, from the analysis through codegen to the runtime's launch plan.

* a mask over the split stream's tokens that a block also uses for per-token work (CDIT220), one
  the block skips when None (CDIT221: the plan stands), one built from a length a root split made
  local and handed to attention (CDIT220); masks only used as attention masks leave the plan;
* a position tensor read again after the gather is split where the blocks receive it;
* a mask over separately split streams that would need a reorder refuses the CP part;
* processor / RoPE patches the hook plan cannot express refuse the CP part in codegen;
* a plan whose attention takes a mask cannot run ring attention: `NOT_GENERATED["ring"]`;
* the runtime skips a phase whose part the standalone module lists in `NOT_GENERATED`;
* a copy of the stream taken before the split and read inside the loop refuses CP.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from cdit_runtime.contract import load_request
from cdit_runtime.planning import plan_launches
from lsp_server.analysis import analyze_path
from lsp_server.codegen import build_plan, generate, parse_plan
from tests.conftest import FIXTURES, diffusers_file

T = "models/transformers/"
TERN = FIXTURES / "models" / "tern_mask_dit.py"


def _cp(path: Any, cls: str) -> tuple[dict[str, Any], dict[str, list[str]]]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    cp = t["contextParallel"]
    codes: dict[str, list[str]] = {}
    for w in cp["warnings"]:
        codes.setdefault(w["code"], []).append(w["message"])
    return cp, codes


# --- masks over the split tokens ---------------------------------------------------------------


def test_a_mask_used_only_as_the_attention_mask_keeps_the_plan() -> None:
    cp, codes = _cp(TERN, "TernKeyMaskDiT")
    assert cp["approach"] != "none" and cp["plan"]
    assert "CDIT220" not in codes and "CDIT221" not in codes


def test_a_mask_also_used_per_token_is_split_with_the_tokens_and_gathered_for_attention() -> None:
    """`x * keep_mask[..., None]` shows the mask's token axis: it is split at every block (the
    multiply gets this rank's slice); as the attention mask its columns follow the keys in the
    generated CP attention (tests/test_cp_plans_gloo.py runs that on ValidFramesDiT)."""
    cp, codes = _cp(TERN, "TernTokenMaskDiT")
    assert cp["approach"] != "none", codes
    assert "CDIT220" not in codes and "CDIT221" not in codes
    split = cp["plan"]["blocks.*"]["keep_mask"]
    assert (split["split_dim"], split["expected_dims"]) == (1, 2)
    (why,) = [e["message"] for e in cp["evidence"] if e["message"].startswith("split `keep")]
    assert "x = x * keep_mask[..., None]" in why and "gathers with the keys" in why


def test_a_per_token_mask_whose_axis_is_not_read_refuses_cp() -> None:
    """The same model whose per-token use hides the axis (`torch.einsum`): nothing shows which
    axis holds the tokens, so CP is refused with the reason, not split on a guess."""
    from lsp_server.analysis.context_parallel.mask_axes import mask_axis_from_uses

    source = "x = torch.einsum('bsc,bs->bsc', x, keep_mask)\ny = x * keep_mask"
    assert mask_axis_from_uses(ast.parse(source).body, "keep_mask", {"x": (1, 3)}) == (1, 3)
    assert mask_axis_from_uses(ast.parse(source).body[:1], "keep_mask", {"x": (1, 3)}) is None
    assert mask_axis_from_uses(
        ast.parse("keep = keep_mask.unsqueeze(-1).to(x.dtype)\nx = x + f(x) * keep").body,
        "keep_mask",
        {"x": (1, 3)},
    ) == (1, 2)


def test_an_optional_per_token_mask_is_split_with_the_tokens() -> None:
    cp, codes = _cp(TERN, "TernOptionalMaskDiT")
    assert cp["approach"] != "none" and cp["plan"]
    assert "CDIT221" not in codes and "CDIT220" not in codes
    assert cp["plan"]["blocks.*"]["keep_mask"]["split_dim"] == 1


def test_a_mask_forward_builds_and_the_blocks_use_per_token_only_is_split_with_the_tokens() -> None:
    cp, codes = _cp(TERN, "TernModulationDiT")
    assert cp["approach"] != "none", codes
    assert "CDIT220" not in codes and "CDIT221" not in codes
    (split,) = [v for k, v in cp["plan"].items() if k == "blocks.*"]
    assert split["noisy_mask"]["split_dim"] == 1 and split["noisy_mask"]["expected_dims"] == 2
    assert cp["approach"] == "single_point"  # the mask is filled by position: no root split
    assert any("marks tokens of `noisy_mask` by position" in e["message"] for e in cp["evidence"])
    assert any("split `noisy_mask`" in e["message"] for e in cp["evidence"])


def test_a_mask_built_from_a_stream_length_for_attention_blocks_a_root_split() -> None:
    """Forward builds the mask from the stream's length and the blocks hand it to attention: a
    root split would give it this rank's length, so the plan splits at the first block and the
    mask stays whole (it used to be refused)."""
    cp, codes = _cp(TERN, "TernLocalMaskDiT")
    assert cp["approach"] == "single_point"
    assert "" not in cp["plan"] and "blocks.0" in cp["plan"]
    assert any(
        "is built from the length of `h` and reaches attention" in e["message"]
        for e in cp["evidence"]
    )
    assert "CDIT220" not in codes


def test_longcat_audio_mask_is_split_and_the_long_skip_moves_the_gather() -> None:
    """LongCat-AudioDiT hands its audio `attention_mask` to every block as `mask`: the
    self-attention's key mask, and `post_attention_mask` multiplied into the cross-attention
    output of this rank's tokens. forward applies it as `hidden_states *
    attention_mask.unsqueeze(-1)`, which shows its token axis: it is split with the tokens at
    every block. The `long_skip` residual (every token, taken before the split at the first
    block) is added after the loop: the gather sits at the last block, not at `proj_out`."""
    cp, codes = _cp(
        diffusers_file(T + "transformer_longcat_audio_dit.py"), "LongCatAudioDiTTransformer"
    )
    assert cp["approach"] == "single_point" and "CDIT220" not in codes, codes
    split = cp["plan"]["blocks.*"]["mask"]
    assert (split["split_dim"], split["expected_dims"]) == (1, 2)
    assert "proj_out" not in cp["plan"] and "blocks.<last>" in cp["plan"]
    messages = [e["message"] for e in cp["evidence"]]
    assert any("combines the stream with `residual`" in m for m in messages), messages


def test_bria_noise_mask_built_by_forward_is_split_with_the_tokens() -> None:
    """Bria-FIBO 2's per-token noise mask (modulation picked per token, never attention) is split
    with the tokens, and its RoPE (a plain callable gathering table rows by per-token ids) on
    axis 0: the plan stands."""
    cp, codes = _cp(diffusers_file(T + "transformer_bria_fibo2.py"), "BriaFibo2Transformer2DModel")
    assert any("split `noise_mask` (as `noise_mask`)" in e["message"] for e in cp["evidence"])
    assert "CDIT220" not in codes and cp["approach"] != "none"
    assert cp["plan"]["layers.*"]["noise_mask"]["split_dim"] == 1


def test_z_image_noise_mask_is_a_caution_because_it_is_none_outside_omni_mode() -> None:
    cp, codes = _cp(diffusers_file(T + "transformer_z_image.py"), "ZImageTransformer2DModel")
    assert cp["approach"] == "submodule_hooks"
    assert any("as `noise_mask`" in m for m in codes["CDIT221"])


@pytest.mark.parametrize(
    ("file", "cls"),
    [
        ("transformer_chroma.py", "ChromaTransformer2DModel"),  # pairwise mask -> attention
        ("transformer_skyreels_v2.py", "SkyReelsV2Transformer3DModel"),  # causal mask, positional
        ("transformer_ltx2.py", "LTX2VideoTransformer3DModel"),  # mask in an attention-args dict
    ],
)
def test_attention_only_masks_of_diffusers_models_keep_their_plan(file: str, cls: str) -> None:
    cp, codes = _cp(diffusers_file(T + file), cls)
    assert cp["approach"] != "none"
    assert "CDIT220" not in codes


# --- split values read after the gather ----------------------------------------------------------


def test_rope_read_again_after_the_gather_is_split_where_the_blocks_receive_it() -> None:
    """Motif-Video's `image_rotary_emb` feeds the cached dual-stream blocks and then the single-
    stream loop over a list slice after the gather: split at each cached block's input, never in
    place (the invented `EchoRopeDiT` runs this shape on 2 gloo ranks in test_cp_plans_gloo)."""
    cp, codes = _cp(
        diffusers_file(T + "transformer_motif_video.py"), "MotifVideoTransformer3DModel"
    )
    assert cp["approach"] == "single_point"
    assert "rope" not in cp["plan"]
    specs = cp["plan"]["transformer_blocks.*"]["image_rotary_emb"]
    assert [s["split_output"] for s in specs] == [False, False]
    assert "CDIT220" not in codes
    assert any(
        "read again after the cached loops" in e["message"] and "not in place" in e["message"]
        for e in cp["evidence"]
    )
    # its joint attention mask over separately split streams needs a reorder, which is placed
    assert cp["attentionMask"]["reorderNeeded"] is True
    (message,) = codes["CDIT217"]
    assert "the generated module permutes `attention_mask`" in message


def test_invented_rope_reread_after_the_loop_is_split_per_block() -> None:
    fixture = FIXTURES / "models" / "echo_rope_dit.py"
    cp, codes = _cp(fixture, "EchoRopeDiT")
    # the rope measures the stream it takes (`x.shape[1]`): no root split (position drift)
    assert cp["approach"] == "single_point"
    assert any(
        "measures the length of the token stream `x`" in e["message"] for e in cp["evidence"]
    )
    assert "rope" not in cp["plan"]
    assert [s["split_dim"] for s in cp["plan"]["blocks.*"]["freqs"]] == [0, 0]
    assert "CDIT220" not in codes


# --- codegen -----------------------------------------------------------------------------------


def _plan(cls: str, module: str, target: Path, config: Path | None = None) -> Any:
    analysis = analyze_path(module, cls, None, config, registry=False).to_json()
    answers = {"target": {"kind": "standalone", "path": str(target)}}
    return parse_plan(build_plan(analysis, answers))


def _generated(
    cls: str, file: str, tmp_path: Path, config: dict[str, Any] | None = None
) -> tuple[Any, str]:
    """The standalone plan of a diffusers transformer (with `config` as its config.json) and its
    generated code."""
    module = "diffusers.models.transformers." + file
    path = None
    if config is not None:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
    plan, errors = _plan(cls, module, tmp_path / f"{file}_integration.py", path)
    assert plan is not None, errors
    result = generate(plan, manifest_path=tmp_path / ".cdit" / "generated.json")
    assert result.ok
    return plan, "\n".join(c.new for c in result.edits.changes)


def test_patches_the_hooks_cannot_express_refuse_the_cp_part(tmp_path: Path) -> None:
    # JoyImage computes its rotary positions in a plain method no hook reaches
    plan, code = _generated("JoyImageEditTransformer3DModel", "transformer_joyimage", tmp_path)
    assert not plan.generates_cp
    reasons = plan.refused["contextParallel"]
    assert any("computes positions in a plain method" in r for r in reasons)
    assert all(r.startswith("contextParallel.patches[") for r in reasons)
    assert "CDIT-REVIEW(cp)" not in code and '"contextParallel": (' in code


def test_attention_calling_sdpa_itself_is_routed_not_refused(tmp_path: Path) -> None:
    # DiT's AttnProcessor2_0 calls SDPA directly: the module routes it through cache-dit
    plan, code = _generated("DiTTransformer2DModel", "dit_transformer_2d", tmp_path)
    assert plan.generates_cp and plan.context_parallel.sdpa_routes == (
        ("AttnProcessor2_0", "processor", ()),
    )
    assert "def _route_sdpa(transformer: torch.nn.Module) -> None:" in code
    assert "        _route_sdpa(model)" in code and '"contextParallel": (' not in code


def test_a_mask_forward_builds_runs_under_ring_through_the_masked_ring_steps(
    tmp_path: Path,
) -> None:
    # Ideogram 4 builds its segment mask itself: every call has one; ring gets each key shard's
    # columns of it from the module's ring steps (cache-dit's ring hands every step the same mask)
    plan, code = _generated("Ideogram4Transformer2DModel", "transformer_ideogram4", tmp_path)
    cp = plan.context_parallel
    assert plan.generates_cp and cp.ring_unsupported is None and cp.ring_masks
    assert '"ring": (' not in code
    assert "def _ring_attention_masks() -> None:" in code
    assert "if (config.ring_size or 1) > 1:" in code and "_ring_attention_masks()" in code
    assert "ring and Ulysses together (USP) are not part of this" in code


def test_a_mask_only_callers_pass_runs_under_ring_too(tmp_path: Path) -> None:
    # NucleusMoE gets its text mask from the caller: ring serves calls with and without one
    # (dense blocks: with its expert-choice experts on, CP is refused, tests/test_token_mixing.py)
    plan, code = _generated(
        "NucleusMoEImageTransformer2DModel",
        "transformer_nucleusmoe_image",
        tmp_path,
        {"moe_enabled": False},
    )
    cp = plan.context_parallel
    assert plan.generates_cp and cp.ring_unsupported is None and cp.ring_masks
    assert "_RING_MASK_PARAMS" not in code and "_ring_attention_masks()" in code


def test_a_model_without_masks_gets_no_ring_steps(tmp_path: Path) -> None:
    plan, code = _generated("FluxTransformer2DModel", "transformer_flux", tmp_path)
    assert plan.generates_cp and not plan.context_parallel.ring_masks
    assert "_ring_attention_masks" not in code


# --- runtime -----------------------------------------------------------------------------------


def test_the_runtime_skips_phases_whose_part_the_module_does_not_provide(tmp_path: Path) -> None:
    module = tmp_path / "integration.py"
    module.write_text(
        'TRANSFORMER_CLASS = "X"\n'
        "NOT_GENERATED: dict[str, str] = {\n"
        '    "contextParallel": "refused: a per-token mask",\n'
        '    "ring": "masks",\n'
        "}\n"
    )
    request = load_request(
        json.loads(
            json.dumps(
                {
                    "model": {"source": "tiny", "family": "flux"},
                    "outputDir": str(tmp_path / "out"),
                    "integration": {"kind": "standalone", "path": str(module)},
                    "phases": [
                        {"kind": "baseline"},
                        {"kind": "cache"},
                        {"kind": "ulysses"},
                        {"kind": "ring"},
                        {"kind": "tp"},
                        {"kind": "vae_p", "vaeBase": "ring"},
                    ],
                }
            )
        )
    )
    launches, refused = plan_launches(request, "cpu", 0)
    assert set(refused) == {"ulysses-2", "ring-2", "vae_p-ring2"}
    assert {info.code for info in refused.values()} == {"NOT_GENERATED"}
    assert "context parallelism is not part of this integration: refused: a per-token mask" in (
        refused["ulysses-2"].message
    )
    assert [launch.ids for launch in launches] == [["baseline", "cache", "tp-2"]]


def test_a_mask_the_processor_builds_from_local_lengths_is_stopped_at_call_time(
    tmp_path: Path,
) -> None:
    """QwenImage's processor joins the text mask with image ones from the lengths it sees: the
    plan is right without a mask, so CP is generated with a guard that stops calls passing
    one (instead of a comment, or refusing every call)."""
    torch = pytest.importorskip("torch")
    from module_loading import e2e_models, load_module

    plan, errors = _plan(
        "QwenImageTransformer2DModel",
        "diffusers.models.transformers.transformer_qwenimage",
        tmp_path / "qwen_integration.py",
    )
    assert plan is not None, errors
    assert plan.generates_cp
    assert plan.context_parallel.mask_guard_params == ("encoder_hidden_states_mask",)
    result = generate(plan, manifest_path=tmp_path / ".cdit" / "generated.json")
    assert result.ok
    from lsp_server.codegen import write

    write(result)
    module = load_module("cdit_qwen_mask_guard", tmp_path / "qwen_integration.py")
    model, inputs = e2e_models().build_qwenimage()
    module._stop_masks(model, module._CP_MASK_PARAMS, "context parallelism", module._CP_MASK_REASON)
    with torch.no_grad():
        model(**inputs)  # no mask: runs
        mask = torch.ones(1, inputs["encoder_hidden_states"].shape[1], dtype=torch.bool)
        with pytest.raises(
            NotImplementedError, match="calls that pass `encoder_hidden_states_mask`"
        ):
            model(**inputs, encoder_hidden_states_mask=mask)


def test_a_mask_needing_a_reorder_refuses_the_cp_part_in_the_generated_module(
    tmp_path: Path,
) -> None:
    """A mask forward builds over text and image tokens split as separate tensors (CDIT217)
    must be permuted into all-to-all order. HunyuanVideo's split region spans the single-stream
    blocks too (gathered at `proj_out`), whose joins the reorder does not place: the CP part is
    refused with the reason, never emitted."""
    plan, code = _generated("HunyuanVideoTransformer3DModel", "transformer_hunyuan_video", tmp_path)
    why = plan.not_generated()["contextParallel"]
    assert why.startswith("no plan: the attention mask covers text and image tokens")
    assert "all-to-all order" in why
    assert plan.context_parallel.enabled is False
    assert "_reorder_masks" not in code


def test_a_mask_reorder_is_generated_where_only_the_first_list_is_split(tmp_path: Path) -> None:
    """Motif-Video: split at the first dual-stream block, gathered after the last; its processor
    joins the keys as [hidden, encoder]. The module permutes the blocks' `attention_mask` into
    that all-to-all order and keeps the attention of the blocks after the gather local
    (tests/test_new_models.py runs it under UAA-2 and fails a module without the permutation)."""
    cp, _ = _cp(diffusers_file(T + "transformer_motif_video.py"), "MotifVideoTransformer3DModel")
    assert cp["attentionMask"]["reorderPlan"] == {
        "list": "transformer_blocks",
        "mask": "attention_mask",
        "streams": ["hidden_states", "encoder_hidden_states"],
        "line": cp["attentionMask"]["reorderPlan"]["line"],
    }
    plan, code = _generated("MotifVideoTransformer3DModel", "transformer_motif_video", tmp_path)
    assert plan.context_parallel.enabled is True
    assert "contextParallel" not in plan.not_generated()
    assert '_MASK_REORDER_STREAMS = ("hidden_states", "encoder_hidden_states")' in code
    assert "_reorder_masks(model, world)" in code
    assert '_SPLIT_LISTS = ("transformer_blocks",)' in code
    assert "_local_attention_outside(model)" in code
    compile(code, "motif_integration.py", "exec")


@pytest.mark.parametrize(
    ("plan", "lists"),
    [
        (
            {
                "transformer_blocks.0": {"hidden_states": {}},
                "transformer_blocks.<last>": {"gather_dim": 1},
            },
            ("transformer_blocks",),
        ),
        ({"": {"hidden_states": {}}, "proj_out": {"gather_dim": 1}}, ()),
        ({"blocks.0": {"x": {}}, "rope": {"0": {}}, "blocks.<last>": {"gather_dim": 1}}, ()),
        ({"blocks.0": {"x": {}}, "blocks.*": {"freqs": {}}}, ()),  # no gather
    ],
)
def test_split_region_lists(plan: dict[str, Any], lists: tuple[str, ...]) -> None:
    from lsp_server.codegen.render_cp_region import split_region_lists

    assert split_region_lists(plan) == lists


STARRED = """
import torch
from torch import nn


class Rope(nn.Module):
    def forward(self, n):
        return torch.outer(torch.arange(n, dtype=torch.float32), torch.ones(8))


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.mix = nn.Linear(dim, dim)

    def forward(self, x, rope, thw):
        t, h, w = thw
        x = x + self.mix(x) * rope.mean(-1, keepdim=True)
        return x.reshape(x.shape[0], t, h * w, -1).flatten(1, 2)


class StarNet(nn.Module):
    def __init__(self, dim=8, depth=2):
        super().__init__()
        self.embed = nn.Conv3d(4, dim, 1)
        self.rope = Rope()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, 4)

    def forward(self, latents):
        b, c, t, h, w = latents.shape
        x = self.embed(latents).flatten(2).transpose(1, 2)
        rope = self.rope(x.shape[1])
        for block in self.blocks:
            block_args = (x, rope, (t, h, w))
            x = block(*block_args)
        return self.head(x)
"""


def test_block_args_behind_a_starred_tuple_are_read_and_whole_sizes_refuse_cp(tmp_path):
    path = tmp_path / "star.py"
    path.write_text(STARRED)
    cp, codes = _cp(path, "StarNet")
    assert cp["approach"] == "none"
    (message,) = [m for m in codes["CDIT220"] if "sizes measured" in m]
    assert "`(t, h, w)` as `thw`" in message and "whole `latents`" in message
    # without the sizes, the arguments behind `*block_args` give a plan: `x` at the first
    # block, the RoPE output split on its sequence axis
    path.write_text(
        STARRED.replace("block_args = (x, rope, (t, h, w))", "block_args = (x, rope)")
        .replace("def forward(self, x, rope, thw):", "def forward(self, x, rope):")
        .replace("        t, h, w = thw\n", "")
        .replace("return x.reshape(x.shape[0], t, h * w, -1).flatten(1, 2)", "return x")
    )
    cp, codes = _cp(path, "StarNet")
    assert "CDIT220" not in codes
    assert cp["approach"] == "single_point" and {"blocks.0", "rope"} <= set(cp["plan"])


def test_a_mask_needing_a_reorder_that_only_callers_pass_is_guarded_per_call() -> None:
    """The same reorder, when the mask comes only from a forward parameter: calls without it are
    right, so the plan stands and calls that pass it are stopped (`maskGuard`)."""
    module = "diffusers.models.transformers.transformer_hunyuan_video"
    analysis = analyze_path(
        module, "HunyuanVideoTransformer3DModel", None, registry=False
    ).to_json()
    mask = analysis["transformers"][0]["contextParallel"]["attentionMask"]
    assert mask["reorderNeeded"] and mask["params"] == ["encoder_attention_mask"]
    # as if forward only passed the caller's mask on (no mask built in forward)
    mask["builtInForward"] = False
    mask["sources"] = mask["sources"][:1]
    out = build_plan(analysis, {"target": {"kind": "standalone", "path": "/tmp/x.py"}})
    cp = out["plan"]["contextParallel"] if "plan" in out else out["contextParallel"]
    assert cp["enabled"] is True and cp["notPossible"] is None
    assert cp["maskGuard"]["params"] == ["encoder_attention_mask"]
    assert "all-to-all order" in cp["maskGuard"]["reason"]


HAND_ATTENTION = """
import torch
from torch import nn


class HandProcessor:
    def __call__(self, attn, x):
        q, k, v = attn.q(x), attn.k(x), attn.v(x)
        weights = (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).softmax(dim=-1)
        return attn.o(weights @ v)


class HandAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.processor = HandProcessor()

    def forward(self, x):
        return self.processor(self, x)


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attn = HandAttention(dim)
        self.mlp = nn.Linear(dim, dim)

    def forward(self, x):
        return x + self.mlp(x + self.attn(x))


class HandDiT(nn.Module):
    def __init__(self, dim=16, depth=2):
        super().__init__()
        self.proj_in = nn.Linear(4, dim)
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.proj_out = nn.Linear(dim, 4)

    def forward(self, hidden_states):
        x = self.proj_in(hidden_states)
        for block in self.blocks:
            x = block(x)
        return self.proj_out(x)
"""


def test_attention_computed_by_hand_refuses_cp(tmp_path: Path) -> None:
    """A processor that multiplies keys by hand (no attention kernel a CP backend runs) would
    attend over this rank's tokens only: refused before anything runs. Sana-Video's linear
    attention is the diffusers case."""
    path = tmp_path / "hand_dit.py"
    path.write_text(HAND_ATTENTION)
    cp, codes = _cp(path, "HandDiT")
    assert cp["approach"] == "none" and not cp["plan"]
    assert any("computes attention itself" in m for m in codes["CDIT220"])
    cp, codes = _cp(diffusers_file(T + "transformer_sana_video.py"), "SanaVideoTransformer3DModel")
    assert cp["approach"] == "none"
    assert any("SanaLinearAttnProcessor3_0" in m for m in codes["CDIT220"])


def test_an_inline_per_token_table_is_split_where_every_block_receives_it() -> None:
    """RegisterTokensDiT builds its rotary angles inline (`arange` over the image length, joined
    with zero rows for the register tokens) and hands them to every block under a name no word
    list knows (`angles`): built from the stream's length, it holds one row per token and is
    split on the axis `arange` made (tests/test_cp_plans_gloo.py runs it on 2 ranks)."""
    cp, codes = _cp(FIXTURES / "models" / "register_tokens_dit.py", "RegisterTokensDiT")
    assert cp["approach"] == "single_point" and "CDIT220" not in codes, codes
    angles = cp["plan"]["layers.*"]["angles"]
    assert angles["split_dim"] == 0
    assert "layers.<last>" in cp["plan"]  # gathered before the registers are sliced off


def test_a_mask_is_known_by_what_the_blocks_do_with_it_not_by_its_name(tmp_path: Path) -> None:
    """ValidFramesDiT with its mask called `valid`: no `mask` in any name, but the attention
    module passes it as `attn_mask=` (one call down from the block): it is read as a mask,
    split with the tokens at every block, and the attention mask is reported present."""
    source = (FIXTURES / "models" / "valid_frames_dit.py").read_text()
    renamed = tmp_path / "valid_named_dit.py"
    renamed.write_text(source.replace("frame_mask", "valid"))
    cp, codes = _cp(renamed, "ValidFramesDiT")
    assert "CDIT220" not in codes, codes
    assert cp["attentionMask"]["present"] and cp["attentionMask"]["params"] == ["valid"]
    split = cp["plan"]["blocks.*"]["valid"]
    assert (split["split_dim"], split["expected_dims"]) == (1, 2)


def test_grid_sizes_of_the_whole_latent_handed_to_the_blocks_refuse_cp() -> None:
    """TideVideo (a Wan-style research-code DiT) hands every block `grid_sizes`, a tensor of the
    whole latent's frame/height/width counts, from which the block's attention lays its tokens
    out for the rotary table: with this rank's tokens that reshape is wrong. Refused (CDIT220),
    citing `grid_sizes`; `seq_lens` (one length, the keys' length under CP) is not a reason.
    Its attention modules call SDPA through a function of their file: the self-attention is
    routed, the cross-attention to the text (keys from `context` only; `b = x.size(0)` carries
    no data) stays local."""
    tide = FIXTURES / "models" / "third_party" / "tide_video.py"
    cp, codes = _cp(tide, "TideVideoModel")
    assert cp["approach"] == "none" and not cp["plan"]
    (why,) = codes["CDIT220"]
    assert "`grid_sizes`" in why and "seq_lens" not in why
    assert [r["class"] for r in cp["sdpaRoutes"]] == ["SelfAttention"]


def test_torch_multihead_attention_refuses_cp() -> None:
    """`nn.MultiheadAttention` runs in torch's fused kernel at inference: a root split would
    leave every rank attending over its own tokens (nothing routes it). Refused (CDIT220)."""
    cp, codes = _cp(FIXTURES / "models" / "third_party" / "mha_dit.py", "MhaDiT")
    assert cp["approach"] == "none" and not cp["plan"]
    assert any("`attn` is torch.nn.MultiheadAttention" in m for m in codes["CDIT220"])


def test_flash_attn_func_is_routed_and_other_flash_options_refuse_cp() -> None:
    """`flash_attn_func(q, k, v)` through a bare name is rebound by the generated module (its
    layout is cache-dit's dispatch layout), also inside a function of the file that falls back
    to SDPA; tests/test_cp_plans_gloo.py runs both on 2 gloo ranks with a CPU stand-in. A
    sliding window has no routed equivalent: refused (CDIT220). The block builds its attention
    by a conditional expression (both classes are read); `FlashFallbackDiT` inherits everything
    but a class attribute."""
    flash = FIXTURES / "models" / "third_party" / "flash_dit.py"
    for cls in ("FlashDiT", "FlashFallbackDiT"):
        cp, codes = _cp(flash, cls)
        assert cp["approach"] == "root_split" and "CDIT220" not in codes, codes
        routes = {r["class"]: r for r in cp["sdpaRoutes"]}
        assert set(routes) == {"FlashAttention", "FallbackAttention"}
        assert all(r["flashNames"] == ["flash_attn_func"] for r in routes.values())
    cp, codes = _cp(flash, "FlashWindowDiT")
    assert cp["approach"] == "none" and not cp["plan"]
    assert any("flash_attn_func" in m and "are routed" in m for m in codes["CDIT220"])


def test_a_rotary_table_cut_to_the_streams_length_blocks_a_root_split() -> None:
    """`freqs_cis = self.freqs_cis[: x.shape[1]]` (LLaMA-style tables): a root split would cut
    it to this rank's length and count positions from 0 on every rank. The stream is split at
    the first block and the table where each block receives it, on the axis its slice shows
    (0), not on the axis-1 convention; tests/test_cp_plans_gloo.py runs it (axis 1: wrong)."""
    cp, _ = _cp(FIXTURES / "models" / "third_party" / "cis_dit.py", "CisDiT")
    assert cp["approach"] == "single_point"
    assert "" not in cp["plan"]
    assert cp["plan"]["layers.*"]["freqs_cis"]["split_dim"] == 0
    assert any("position drift" in e["message"] for e in cp["evidence"])


def test_grid_sizes_handed_to_the_blocks_one_by_one_refuse_cp(tmp_path: Path) -> None:
    """STDiT regroups the stream by `T` and `S` in every block (frames <-> tokens per frame): a
    token split would hand each block half the tokens with the whole grid (einops raises, or a
    reshape lays the tokens out wrong). Refused before anything runs; a single length (a key
    length for a mask) does not refuse a plan. (STDiT itself gets a split of its frame axis,
    tests/test_axis_splits.py; a patch embedding that merges frames leaves no axis to split.)"""
    source = (FIXTURES / "models" / "third_party" / "st_dit.py").read_text()
    merged = source.replace(
        "(1, patch, patch), (1, patch, patch)", "(2, patch, patch), (2, patch, patch)"
    )
    path = tmp_path / "st_dit_merged_frames.py"
    path.write_text(merged)
    cp, codes = _cp(path, "STDiT")
    assert cp["approach"] == "none" and not cp["plan"]
    why = next(w for w in codes["CDIT220"] if "`T` as `T`" in w)
    assert "`T` as `T`, `S` as `S`" in why and "grid sizes measured on the whole `x`" in why
    # and the regroup inside the block, read as groups of the tokens it sees
    assert any("cuts the tokens it sees into groups" in w for w in codes["CDIT220"])


SIT = FIXTURES / "models" / "third_party" / "sit_dit.py"


def _sit_variant(
    tmp_path: Path, name: str, imports: str, cut: tuple[str, str] | None = None, **swap: str
) -> Path:
    """sit_dit.py with the class between the `cut` markers removed, `imports` after torch's
    and each `swap` old -> new applied (keys name the edit, values are `old=>new`)."""
    source = SIT.read_text()
    if cut is not None:
        start, end = source.index(cut[0]), source.index(cut[1])
        source = source[:start] + source[end:]
    for edit in swap.values():
        old, new = edit.split("=>")
        source = source.replace(old, new)
    source = source.replace(
        "from torch import Tensor, nn\n", f"from torch import Tensor, nn\n{imports}"
    )
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return path


def test_an_attention_class_whose_source_is_not_found_refuses_cp(tmp_path: Path) -> None:
    """The original DiT code imports timm's `Attention`; without timm where the analysis runs,
    its source cannot be read: the plan would split the tokens around an attention nobody
    routes (each rank attending over its own tokens). Refused, naming the class; the same
    model with the class in its file gets its plan (tests/test_cp_plans_gloo.py `sit_like`)."""
    path = _sit_variant(
        tmp_path,
        "external_attention_dit",
        "from not_installed_vit.layers import Attention  # a package the analysis cannot read\n",
        cut=("class Attention(nn.Module):", "class Mlp(nn.Module):"),
    )
    cp, codes = _cp(path, "SiTLike")
    assert cp["approach"] == "none" and not cp["plan"]
    (why,) = codes["CDIT220"]
    assert "`attn` is not_installed_vit.layers.Attention, whose source" in why
    kept, _ = _cp(SIT, "SiTLike")
    assert kept["plan"]
    # an unread MLP beside an attention the analysis reads keeps the plan
    path = _sit_variant(
        tmp_path,
        "external_mlp_dit",
        "from not_installed_vit.layers import Mlp\n",
        cut=("class Mlp(nn.Module):", "class TimestepEmbedder("),
    )
    cp, codes = _cp(path, "SiTLike")
    assert cp["plan"] and "CDIT220" not in codes


@pytest.mark.parametrize(
    ("setting", "refused", "words"),
    [
        ("True", False, ""),
        ("False", True, "when `self.fused_attn` is False (`"),
        ("use_fused_attn()", False, ""),  # set at run time: pinned (kernelFlags)
    ],
)
def test_a_hand_computed_attention_branch_beside_sdpa_counts_unless_switched_off(
    tmp_path: Path, setting: str, refused: bool, words: str
) -> None:
    """timm's `Attention`: `if self.fused_attn: SDPA else: (q * scale) @ k.T ...`. The route
    reaches only the SDPA branch: with the flag off the hand-computed one would attend over
    this rank's tokens, so CP is refused; a flag set at run time is pinned to the SDPA side by
    the generated module (tests/test_cp_plans_gloo.py `timm_flag`, with an unpinned control)."""
    path = _sit_variant(
        tmp_path,
        "fused_flag_dit",
        "\n\ndef use_fused_attn() -> bool:\n    return True\n",
        flag=f"self.fused_attn = True=>self.fused_attn = {setting}",
    )
    cp, codes = _cp(path, "SiTLike")
    if not refused:
        assert cp["plan"] and "CDIT220" not in codes
        flags = [r.get("kernelFlags") for r in cp["sdpaRoutes"] if r["class"] == "Attention"]
        assert flags == ([[["fused_attn", True]]] if "(" in setting else [None])
        return
    assert cp["approach"] == "none" and not cp["plan"]
    assert any(words in m for m in codes["CDIT220"]), codes["CDIT220"]


_PLAIN_LOOP = "        for layer in self.layers:\n            x = layer(x, c, ctx, cos, sin)\n"


@pytest.mark.parametrize(
    ("loop", "refused"),
    [
        # a copy of the stream taken before the loop and added back at mid depth: it keeps every
        # token under the split at the first block (the run stopped on a shape mismatch)
        (
            "        skip = x\n        for i, layer in enumerate(self.layers):\n"
            "            x = layer(x, c, ctx, cos, sin)\n"
            "            if i == len(self.layers) // 2:\n                x = x + skip\n",
            True,
        ),
        # the control: added back after the loop, where the gather has made the stream whole
        (
            f"        skip = x\n{_PLAIN_LOOP}        x = x + skip\n",
            False,
        ),
    ],
)
def test_a_copy_of_the_stream_read_inside_the_loop_refuses_cp(
    tmp_path: Path, loop: str, refused: bool
) -> None:
    text = (FIXTURES / "models" / "plain_sdpa_dit.py").read_text()
    assert _PLAIN_LOOP in text
    path = tmp_path / "skip_dit.py"
    path.write_text(text.replace(_PLAIN_LOOP, loop))
    cp, codes = _cp(path, "PlainSdpaDiT")
    messages = [m for m in codes.get("CDIT220", []) if "reads `skip`" in m]
    if refused:
        assert cp["approach"] == "none" and messages, codes
    else:
        assert cp["approach"] != "none" and not messages, codes


def test_a_reworked_rotary_table_is_split_where_its_axis_is_read_else_refused(
    tmp_path: Path,
) -> None:
    """joint_tokens_dit.py: the module's `(cos, sin)` joined behind identity rows for the text,
    as the stream joins the text in front, is split on its rows where the blocks receive it
    (2-rank run and controls: tests/test_cp_plans_gloo.py). Reworked by a function whose result
    is not read, it is refused, never split on a guessed axis."""
    source = FIXTURES / "models" / "third_party" / "joint_tokens_dit.py"
    cp, _ = _cp(source, "JointTokensDiT")
    assert cp["plan"]["layers.*"]["cos"]["split_dim"] == 0
    assert cp["plan"]["layers.*"]["sin"]["split_dim"] == 0
    text = source.read_text()
    old = "        cos = torch.cat([torch.ones(n_txt, cos.shape[1]), cos])\n"
    assert old in text
    path = tmp_path / "reworked_dit.py"
    path.write_text(
        text.replace(old, "        cos = _shuffled(cos)\n")
        + "\n\ndef _shuffled(t):\n    return t.flip(0)\n"
    )
    cp, codes = _cp(path, "JointTokensDiT")
    assert cp["approach"] == "none"
    assert any("`cos` of the blocks of `layers`" in m for m in codes["CDIT220"]), codes


def test_a_split_stream_joined_with_a_whole_one_between_the_loops_refuses_cp() -> None:
    """mode_dict_dit.py: `JoinedTowersDiT` runs its text through a tower of its own and joins it
    to the image tokens (`h = torch.cat([ctx, x], dim=1)`) before the joint blocks. Split at the
    image tower, every rank joined the whole text to its slice: the run on 2 gloo ranks gathered
    20 tokens for 16. The same lists run on the image tokens alone (`ModeDictDiT`) keep their
    plan (exact on 2 gloo ranks: tests/test_cp_plans_gloo.py `mode_dict`)."""
    path = FIXTURES / "models" / "third_party" / "mode_dict_dit.py"
    cp, codes = _cp(path, "JoinedTowersDiT")
    assert cp["approach"] == "none"
    (why,) = codes["CDIT220"]
    assert "`h = torch.cat([ctx, x], dim=1)`" in why and "joins a split token stream" in why
    assert _cp(path, "ModeDictDiT")[0]["approach"] == "single_point"


def test_a_root_split_of_a_transformer_returning_only_records_refuses(tmp_path: Path) -> None:
    """cache-dit's root hook checks the transformer's output and stops on anything but a tensor
    or a tuple of them: a forward that hands back a dict on every path cannot take a split at its
    input. One with a tensor or tuple path (diffusers' `if not return_dict: return (output,)`,
    `{...} if return_dict else x`) keeps its plan."""
    source = (FIXTURES / "models" / "third_party" / "cache_redteam_dits.py").read_text()
    kept, _ = _cp(FIXTURES / "models" / "third_party" / "cache_redteam_dits.py", "RecordOutDiT")
    assert "" in kept["plan"]
    old = "            x = blk(x, c).hidden\n        return self.proj_out(x)\n"
    assert old in source
    for name, new in [
        (
            "always",
            '            x = blk(x, c).hidden\n        return {"sample": self.proj_out(x)}\n',
        ),
        (
            "flag",
            "            x = blk(x, c).hidden\n"
            '        return {"sample": self.proj_out(x)} if timestep.dim() else self.proj_out(x)\n',
        ),
    ]:
        path = tmp_path / f"record_root_{name}.py"
        path.write_text(source.replace(old, new))
        cp, codes = _cp(path, "RecordOutDiT")
        if name == "always":
            assert cp["approach"] == "none" and not cp["plan"]
            assert any("forward hands back a record on every path" in w for w in codes["CDIT220"])
        else:
            assert "" in cp["plan"], codes
