"""Tensor-parallel plan inference: real diffusers transformers and invented third-party sources."""

from __future__ import annotations

import importlib.util
import json
import textwrap

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import diffusers_file

T = "models/transformers/"


def _tp(path, cls, **kwargs) -> dict:
    result = analyze_path(path, cls, registry=False, **kwargs).to_json()
    (transformer,) = result["transformers"]
    return transformer["tensorParallel"] | {"_diagnostics": transformer["diagnostics"]}


def _codes(tp: dict) -> list[str]:
    return [w["code"] for w in tp["warnings"]]


def _write(tmp_path, body: str, name: str = "model.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


# --- real diffusers transformers ---------------------------------------------------------------


def test_flux_double_and_single_blocks():
    tp = _tp(diffusers_file(T + "transformer_flux.py"), "FluxTransformer2DModel")
    d, s = "transformer_blocks.*.", "single_transformer_blocks.*."
    expected = {
        **{d + f"attn.{n}": "colwise" for n in ("to_q", "to_k", "to_v")},
        **{d + f"attn.{n}": "colwise" for n in ("add_q_proj", "add_k_proj", "add_v_proj")},
        d + "attn.to_out.0": "rowwise",
        d + "attn.to_add_out": "rowwise",
        d + "ff.net.0.proj": "colwise",
        d + "ff.net.2": "rowwise",
        d + "ff_context.net.0.proj": "colwise",
        d + "ff_context.net.2": "rowwise",
        d + "norm1.linear": "colwise_replicate",
        d + "norm1_context.linear": "colwise_replicate",
        **{s + f"attn.{n}": "colwise" for n in ("to_q", "to_k", "to_v")},
        s + "proj_mlp": "colwise",
        s + "proj_out": "rowwise",
        s + "norm.linear": "colwise_replicate",
    }
    assert tp["layers"] == expected
    assert tp["shardDivAttrs"] == [d + "attn.heads", s + "attn.heads"]
    assert tp["attentionStrategy"] == "mha"
    kinds = {(r["layer"], r["kind"]) for r in tp["weightRearrangement"]}
    assert kinds == {(s + "proj_out", "fused_out_down")}
    assert "CDIT301" not in _codes(tp)  # 24 heads: divisible by 2, 4, 8


def test_wan_conditional_i2v_projections_and_distributed_norms():
    tp = _tp(diffusers_file(T + "transformer_wan.py"), "WanTransformer3DModel")
    cond = tp["conditionalLayers"]
    assert set(cond) == {"blocks.*.attn2.add_k_proj", "blocks.*.attn2.add_v_proj"}
    assert all(c["style"] == "colwise" and c["defaultConfig"] is False for c in cond.values())
    assert "added_kv_proj_dim" in cond["blocks.*.attn2.add_k_proj"]["condition"]
    assert tp["layers"]["blocks.*.attn2.add_k_proj"] == "colwise"
    assert tp["layers"]["blocks.*.ffn.net.2"] == "rowwise"
    assert tp["shardDivAttrs"] == ["blocks.*.attn1.heads", "blocks.*.attn2.heads"]
    norms = {n["module"] for n in tp["distributedNorms"]}
    assert {"blocks.*.attn1.norm_q", "blocks.*.attn1.norm_k", "blocks.*.attn2.norm_q"} <= norms
    assert "CDIT305" in _codes(tp)


def test_wan_config_decides_the_i2v_branch(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"added_kv_proj_dim": 5120, "num_attention_heads": 40}))
    tp = _tp(diffusers_file(T + "transformer_wan.py"), "WanTransformer3DModel", config_path=config)
    assert tp["layers"]["blocks.*.attn2.add_v_proj"] == "colwise"
    assert tp["conditionalLayers"] == {}


def test_qwenimage_modulation_sequential():
    tp = _tp(diffusers_file(T + "transformer_qwenimage.py"), "QwenImageTransformer2DModel")
    b = "transformer_blocks.*."
    assert tp["layers"][b + "img_mod.1"] == "colwise_replicate"
    assert tp["layers"][b + "txt_mod.1"] == "colwise_replicate"
    assert tp["layers"][b + "img_mlp.net.0.proj"] == "colwise"
    assert tp["layers"][b + "txt_mlp.net.2"] == "rowwise"
    assert tp["layers"][b + "attn.to_add_out"] == "rowwise"
    assert len(tp["layers"]) == 14
    # head_dim = attn.inner_dim // attn.heads and unflatten(-1, (-1, head_dim)): -1 absorbs the
    # head count, dividing `heads` alone would double head_dim (tests/test_tp_shard_attrs.py)
    assert tp["shardDivAttrs"] == []
    assert b + "attn.heads" in tp["shardDivSkipped"]


def test_krea2_gqa_divisible_only_for_small_tp_sizes():
    tp = _tp(diffusers_file(T + "transformer_krea2.py"), "Krea2Transformer2DModel")
    b = "transformer_blocks.*."
    assert tp["attentionStrategy"] == "gqa_sharded"
    assert tp["strategyBySize"] == {"2": "gqa_sharded", "4": "gqa_sharded", "8": "gqa_ffn_only"}
    assert tp["shardDivAttrs"] == [b + "attn.num_heads", b + "attn.num_kv_heads"]
    assert tp["layers"][b + "attn.to_gate"] == "colwise"  # gate multiplied into the attention
    assert tp["layers"][b + "ff.down"] == "rowwise"
    (attn,) = tp["attention"]
    assert (attn["heads"], attn["kvHeads"], attn["kvHeadsAttr"]) == (48, 12, "num_kv_heads")
    assert "CDIT302" in _codes(tp)
    replicate = tp["alternatives"]["gqa_replicate"]["layers"]
    assert replicate[b + "attn.to_q"] == "colwise_replicate"
    assert b + "attn.to_k" not in replicate
    assert replicate[b + "attn.to_out.0"] == "rowwise_replicate_input"


def test_krea2_gqa_ffn_only_when_smallest_size_does_not_divide():
    tp = _tp(diffusers_file(T + "transformer_krea2.py"), "Krea2Transformer2DModel", tp_sizes=(8,))
    assert tp["attentionStrategy"] == "gqa_ffn_only"
    assert not any(".attn." in key for key in tp["layers"])
    assert tp["layers"]["transformer_blocks.*.ff.gate"] == "colwise"
    assert tp["shardDivAttrs"] == []


def test_lumina2_gqa_from_narrower_key_projection():
    tp = _tp(diffusers_file(T + "transformer_lumina2.py"), "Lumina2Transformer2DModel")
    assert tp["attentionStrategy"] == "gqa_sharded"
    by_module = {a["module"]: a for a in tp["attention"]}
    assert by_module["layers.*.attn"]["kvHeads"] == 8
    assert tp["layers"]["layers.*.feed_forward.linear_3"] == "colwise"
    assert tp["layers"]["layers.*.feed_forward.linear_2"] == "rowwise"
    assert "layers.*.attn.heads" in tp["shardDivAttrs"]


def test_joyimage_fused_qkv_is_replicated():
    tp = _tp(diffusers_file(T + "transformer_joyimage.py"), "JoyImageEditTransformer3DModel")
    b = "double_blocks.*."
    assert tp["layers"][b + "attn.img_attn_qkv"] == "colwise_replicate"
    assert tp["layers"][b + "attn.txt_attn_qkv"] == "colwise_replicate"
    assert tp["layers"][b + "attn.img_attn_proj"] == "rowwise_replicate_input"
    assert tp["layers"][b + "img_mlp.net.0.proj"] == "colwise"
    assert tp["shardDivAttrs"] == []
    assert _codes(tp).count("CDIT303") == 2


def test_flux2_single_fused_qkv_mlp_and_packed_swiglu():
    tp = _tp(diffusers_file(T + "transformer_flux2.py"), "Flux2Transformer2DModel")
    s = "single_transformer_blocks.*."
    assert tp["layers"][s + "attn.to_qkv_mlp_proj"] == "colwise"
    assert tp["layers"][s + "attn.to_out"] == "rowwise"
    assert set(tp["shardDivAttrs"]) == {
        "transformer_blocks.*.attn.heads",
        s + "attn.heads",
        s + "attn.inner_dim",
        s + "attn.mlp_hidden_dim",
    }
    kinds = {(r["layer"], r["kind"]) for r in tp["weightRearrangement"]}
    assert (s + "attn.to_qkv_mlp_proj", "fused_qkv_mlp") in kinds
    assert ("transformer_blocks.*.ff.linear_in", "packed_gated") in kinds


def test_flux2_fused_qkv_mlp_fallback_is_what_the_plan_generates(tmp_path):
    """The analysis keeps the sharded plan (with the rearrangement it needs) and adds the list's
    plan without it; the plan builder takes that fallback for the single-stream list only, and
    the generated module has TP instead of refusing it."""
    from lsp_server.codegen import build_plan, generate, parse_plan

    analysis = analyze_path(
        diffusers_file(T + "transformer_flux2.py"), "Flux2Transformer2DModel", registry=False
    ).to_json()
    tp = analysis["transformers"][0]["tensorParallel"]
    s = "single_transformer_blocks.*."
    (fused,) = [r for r in tp["weightRearrangement"] if r["kind"] == "fused_qkv_mlp"]
    fallback = fused["fallback"]
    assert fallback["layers"][s + "attn.to_qkv_mlp_proj"] == "colwise_replicate"
    assert fallback["layers"][s + "attn.to_out"] == "rowwise_replicate_input"
    assert fallback["shardDivAttrs"] == []  # every head stays on every rank in that list
    answers = {"target": {"kind": "standalone", "path": str(tmp_path / "flux2_integration.py")}}
    plan_json = build_plan(analysis, answers)
    layers = plan_json["tensorParallel"]["layers"]
    assert layers[s + "attn.to_qkv_mlp_proj"] == "colwise_replicate"
    assert layers["transformer_blocks.*.ff.linear_in"] == "colwise"  # the other list: sharded
    kinds = {(r["layer"], r["kind"]) for r in plan_json["tensorParallel"]["weightRearrangement"]}
    assert kinds == {
        ("transformer_blocks.*.ff.linear_in", "packed_gated"),
        ("transformer_blocks.*.ff_context.linear_in", "packed_gated"),
    }
    assert not any(a.startswith(s) for a in plan_json["tensorParallel"]["shardDivAttrs"])
    plan, errors = parse_plan(plan_json)
    assert plan is not None and plan.generates_tp, (errors, plan and plan.refused)
    result = generate(plan, manifest_path=tmp_path / ".cdit" / "generated.json")
    assert not any(r["part"] == "tensorParallel" for r in result.to_json()["refused"])


def test_ovis_block_level_split_size_attribute():
    tp = _tp(diffusers_file(T + "transformer_ovis_image.py"), "OvisImageTransformer2DModel")
    assert "single_transformer_blocks.*.mlp_hidden_dim" in tp["shardDivAttrs"]


# --- invented third-party sources --------------------------------------------------------------

_PLAIN = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Mixer(nn.Module):
    def __init__(self, width, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_size = width // n_heads
        self.wq = nn.Linear(width, width)
        self.wk = nn.Linear(width, self.head_size * n_kv_heads)
        self.wv = nn.Linear(width, self.head_size * n_kv_heads)
        self.wo = nn.Linear(width, width)
        self.fc_in = nn.Linear(width, 4 * width)
        self.fc_out = nn.Linear(4 * width, width)
        self.adaln = nn.Linear(width, 6 * width)
        self.ln = nn.LayerNorm(width)

    def forward(self, x, cond):
        shift_a, scale_a, gate_a, shift_f, scale_f, gate_f = self.adaln(cond).chunk(6, dim=-1)
        h = self.ln(x) * (1 + scale_a[:, None]) + shift_a[:, None]
        b, n, _ = h.shape
        q = self.wq(h).view(b, n, self.n_heads, -1).transpose(1, 2)
        k = self.wk(h).view(b, n, self.n_kv_heads, -1).transpose(1, 2)
        v = self.wv(h).view(b, n, self.n_kv_heads, -1).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, ENABLE)
        o = o.transpose(1, 2).reshape(b, n, -1)
        x = x + gate_a[:, None] * self.wo(o)
        h = self.ln(x) * (1 + scale_f[:, None]) + shift_f[:, None]
        x = x + gate_f[:, None] * self.fc_out(F.gelu(self.fc_in(h)))
        return x


class TinyDiT(BASE):
    def __init__(self, width=256, n_heads=8, n_kv_heads=KV, depth=4):
        super().__init__()
        self.layers = nn.ModuleList([Mixer(width, n_heads, n_kv_heads) for _ in range(depth)])

    def forward(self, x, cond):
        for layer in self.layers:
            x = layer(x, cond)
        return x
"""


def _plain(tmp_path, kv: int = 8, base: str = "nn.Module", enable: str = "") -> object:
    text = _PLAIN.replace("KV", str(kv)).replace("BASE", base).replace(", ENABLE", enable)
    return _write(tmp_path, text)


def test_third_party_renamed_linears(tmp_path):
    tp = _tp(_plain(tmp_path), "TinyDiT")
    assert tp["layers"] == {
        "layers.*.wq": "colwise",
        "layers.*.wk": "colwise",
        "layers.*.wv": "colwise",
        "layers.*.wo": "rowwise",
        "layers.*.fc_in": "colwise",
        "layers.*.fc_out": "rowwise",
        "layers.*.adaln": "colwise_replicate",
    }
    assert tp["shardDivAttrs"] == ["layers.*.n_heads", "layers.*.n_kv_heads"]
    assert tp["attentionStrategy"] == "mha"
    assert "CDIT307" in _codes(tp)  # not a ModelMixin
    assert tp["requiresModelMixin"] is True


def test_third_party_gqa_divisible(tmp_path):
    tp = _tp(_plain(tmp_path, kv=4), "TinyDiT", tp_sizes=(2, 4))
    assert tp["attentionStrategy"] == "gqa_sharded"
    assert tp["strategyBySize"] == {"2": "gqa_sharded", "4": "gqa_sharded"}
    assert "CDIT302" not in _codes(tp)
    assert tp["layers"]["layers.*.wk"] == "colwise"


def test_third_party_gqa_not_divisible(tmp_path):
    tp = _tp(_plain(tmp_path, kv=2), "TinyDiT", tp_sizes=(4,))
    assert tp["attentionStrategy"] == "gqa_ffn_only"
    assert set(tp["layers"]) == {"layers.*.fc_in", "layers.*.fc_out", "layers.*.adaln"}
    assert tp["shardDivAttrs"] == []
    assert "CDIT302" in _codes(tp)
    assert any("benchmark" in r for r in tp["strategyReasons"])
    assert tp["alternatives"]["gqa_replicate"]["layers"]["layers.*.wq"] == "colwise_replicate"


def test_enable_gqa_pitfall(tmp_path):
    tp = _tp(_plain(tmp_path, kv=4, enable=", enable_gqa=True"), "TinyDiT")
    assert "CDIT308" in _codes(tp)
    (attn,) = tp["attention"]
    assert any("enable_gqa" in e for e in attn["gqa"])


def test_head_count_not_divisible_lists_valid_sizes(tmp_path):
    path = _plain(tmp_path)
    tp = _tp(path, "TinyDiT", tp_sizes=(3,))
    (diag,) = [w for w in tp["warnings"] if w["code"] == "CDIT301" and "n_heads" in w["message"]]
    assert diag["severity"] == "warning"  # from the constructor default
    assert "valid TP sizes: 2, 4, 8" in diag["message"]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"n_heads": 6, "n_kv_heads": 6, "width": 384}))
    tp = _tp(path, "TinyDiT", tp_sizes=(4,), config_path=config)
    errors = [w for w in tp["warnings"] if w["code"] == "CDIT301" and w["severity"] == "error"]
    assert errors and "valid TP sizes: 2, 3, 6" in errors[0]["message"]
    assert any(d["code"] == "CDIT301" for d in tp["_diagnostics"])


_FUSED = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from diffusers.models.modeling_utils import ModelMixin
KERNEL_IMPORT


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
        x = x + self.proj(o)
        return x + KERNEL_CALL


class FusedDiT(ModelMixin):
    def __init__(self, dim=128, heads=4):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(2)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
"""


def test_fused_qkv_chunk3_replicated(tmp_path):
    text = _FUSED.replace("KERNEL_IMPORT", "").replace("KERNEL_CALL", "self.mlp(x)")
    tp = _tp(_write(tmp_path, text), "FusedDiT")
    assert tp["layers"] == {
        "blocks.*.qkv": "colwise_replicate",
        "blocks.*.proj": "rowwise_replicate_input",
        "blocks.*.mlp.0": "colwise",
        "blocks.*.mlp.2": "rowwise",
    }
    assert tp["shardDivAttrs"] == []
    assert "CDIT303" in _codes(tp)
    assert "CDIT307" not in _codes(tp)


def test_flash_attn_fused_op_is_dtensor_unsafe(tmp_path):
    text = _FUSED.replace(
        "KERNEL_IMPORT",
        "from flash_attn.ops.activations import swiglu\nfrom flash_attn import flash_attn_func",
    ).replace("KERNEL_CALL", "swiglu(self.mlp(x), x)")
    tp = _tp(_write(tmp_path, text), "FusedDiT")
    unsafe = {k["name"] for k in tp["dtensorUnsafe"]}
    assert any("swiglu" in name for name in unsafe)
    assert not any("flash_attn_func" in name for name in unsafe)
    warning = next(w for w in tp["warnings"] if w["code"] == "CDIT306")
    assert "PyTorch equivalents" in warning["message"]


def test_custom_autograd_function_is_dtensor_unsafe(tmp_path):
    text = _FUSED.replace(
        "KERNEL_IMPORT",
        "class FusedGelu(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return x\n",
    ).replace("KERNEL_CALL", "FusedGelu.apply(self.mlp(x))")
    tp = _tp(_write(tmp_path, text), "FusedDiT")
    assert {k["how"] for k in tp["dtensorUnsafe"]} >= {"autograd"}
    assert "CDIT306" in _codes(tp)


def test_flux_without_kernels_has_no_unsafe_report():
    tp = _tp(diffusers_file(T + "transformer_flux.py"), "FluxTransformer2DModel")
    assert tp["dtensorUnsafe"] == []


# --- text encoders and VAE (model_index.json) --------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("cache_dit") is None, reason="cache-dit not installed")
def test_model_index_component_support(tmp_path):
    index = tmp_path / "model_index.json"
    index.write_text(
        json.dumps(
            {
                "_class_name": "FluxPipeline",
                "text_encoder": ["transformers", "CLIPTextModel"],
                "text_encoder_2": ["transformers", "T5EncoderModel"],
                "vae": ["diffusers", "AutoencoderKL"],
                "transformer": ["diffusers", "FluxTransformer2DModel"],
                "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
            }
        )
    )
    tp = _tp(
        diffusers_file(T + "transformer_flux.py"),
        "FluxTransformer2DModel",
        model_index_path=index,
    )
    comps = tp["components"]
    encoders = {e["component"]: e for e in comps["textEncoders"]}
    assert encoders["text_encoder_2"]["supported"] is True
    assert encoders["text_encoder_2"]["planner"] == "T5EncoderModel"
    assert encoders["text_encoder"]["supported"] is False
    assert "new TextEncoderTensorParallelismPlanner" in encoders["text_encoder"]["note"]
    (vae,) = comps["vaes"]
    assert vae["supported"] is True and vae["planner"] == "AutoencoderKL"
    messages = [w["message"] for w in tp["warnings"] if w["code"] == "CDIT311"]
    assert len(messages) == 1 and "CLIPTextModel" in messages[0]


@pytest.mark.skipif(importlib.util.find_spec("cache_dit") is None, reason="cache-dit not installed")
def test_model_index_unsupported_vae_and_third_party_encoder(tmp_path):
    index = tmp_path / "model_index.json"
    index.write_text(
        json.dumps(
            {
                "text_encoder": ["my_package", "MyEncoder"],
                "vae": ["diffusers", "AutoencoderTiny"],
            }
        )
    )
    tp = _tp(
        diffusers_file(T + "transformer_flux.py"),
        "FluxTransformer2DModel",
        model_index_path=index,
    )
    (encoder,) = tp["components"]["textEncoders"]
    assert encoder["supported"] is False and "not a transformers class" in encoder["note"]
    (vae,) = tp["components"]["vaes"]
    assert vae["supported"] is False
    assert "new AutoEncoderDataParallelismPlanner" in vae["note"]


def test_no_model_index_no_components():
    tp = _tp(diffusers_file(T + "transformer_flux.py"), "FluxTransformer2DModel")
    assert tp["components"] is None


def test_ltx2_per_head_gates_are_sharded_with_the_attention():
    tp = _tp(diffusers_file(T + "transformer_ltx2.py"), "LTX2VideoTransformer3DModel")
    key = "transformer_blocks.*.attn1.to_gate_logits"
    assert tp["layers"][key] == "colwise"  # gates multiply the sharded heads
    assert tp["conditionalLayers"][key]["defaultConfig"] is False
    assert tp["layers"]["transformer_blocks.*.audio_to_video_attn.to_q"] == "colwise"


def test_adaptive_norm_and_output_scale_are_modulations():
    tp = _tp(diffusers_file(T + "transformer_rfd4_proteina.py"), "RFD4ProteinaTransformer")
    b = "transformer_layers.*."
    for path in ("mhba.adaln.to_gamma.0", "mhba.adaln.to_beta", "mhba.scale_output.0"):
        assert tp["layers"][b + path] == "colwise_replicate", path
    # the gated attention ends in `reshape(batch, tokens, width)` with `width` unpacked from the
    # input's shape: its projections stay whole (CDIT313); the transition MLP is sharded
    assert tp["layers"][b + "mhba.mha.to_g"] == "colwise_replicate"
    assert tp["layers"][b + "mhba.mha.to_out"] == "rowwise_replicate_input"
    assert "CDIT313" in _codes(tp)
    assert tp["layers"][b + "transition.transition.linear_out"] == "rowwise"


def test_sd3_joint_blocks_with_optional_context_path():
    tp = _tp(diffusers_file(T + "transformer_sd3.py"), "SD3Transformer2DModel")
    b = "transformer_blocks.*."
    assert tp["layers"][b + "attn.to_q"] == "colwise"
    assert tp["layers"][b + "attn.to_add_out"] == "rowwise"
    assert tp["layers"][b + "ff_context.net.0.proj"] == "colwise"
    assert tp["layers"][b + "norm1_context.linear"] == "colwise_replicate"
    replicated = [k for k, v in tp["layers"].items() if v == "colwise_replicate"]
    assert sorted(replicated) == [b + "norm1.linear", b + "norm1_context.linear"]


_HANDWRITTEN = """
import torch.nn as nn
from einops import rearrange
import torch.nn.functional as F


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class SelfAttention(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.head_dim ** -0.5
        x = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class CrossAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)

    def forward(self, x, ctx):
        q, k, v = self.q(x), self.k(ctx), self.v(ctx)
        q, k, v = map(lambda t: rearrange(t, "b n (h d) -> b h n d", h=self.heads), (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v)
        return self.o(rearrange(out, "b h n d -> b n (h d)"))


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, elementwise_affine=False)
        self.attn = SelfAttention(hidden, heads)
        self.cross = CrossAttention(hidden, heads)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))

    def forward(self, x, c, ctx):
        sh1, sc1, g1, sh2, sc2, g2 = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + g1.unsqueeze(1) * self.attn(modulate(self.norm(x), sh1, sc1))
        x = x + self.cross(x, ctx)
        h = modulate(self.norm(x), sh2, sc2)
        return x + g2.unsqueeze(1) * self.fc2(F.gelu(self.fc1(h), approximate="tanh"))


class HandDiT(nn.Module):
    def __init__(self, hidden=512, depth=4, heads=8):
        super().__init__()
        self.blocks = nn.ModuleList([Block(hidden, heads) for _ in range(depth)])

    def forward(self, x, c, ctx):
        for block in self.blocks:
            x = block(x, c, ctx)
        return x
"""


def test_hand_written_attention_fused_qkv_and_einops_heads(tmp_path):
    tp = _tp(_write(tmp_path, _HANDWRITTEN), "HandDiT")
    assert tp["layers"] == {
        "blocks.*.attn.qkv": "colwise_replicate",
        "blocks.*.attn.proj": "rowwise_replicate_input",
        "blocks.*.cross.q": "colwise",
        "blocks.*.cross.k": "colwise",
        "blocks.*.cross.v": "colwise",
        "blocks.*.cross.o": "rowwise",
        "blocks.*.fc1": "colwise",
        "blocks.*.fc2": "rowwise",
        "blocks.*.adaLN_modulation.1": "colwise_replicate",
    }
    assert tp["shardDivAttrs"] == ["blocks.*.cross.heads"]


def test_init_that_touches_block_submodules_keeps_layer_keys_relative(tmp_path):
    """A weight initializer reaching `block.<sub>` through the list in `__init__` (LongCat-AudioDiT
    zero-initializes each block's local AdaLN MLP) materializes those submodules before a block
    becomes the plan's root: their keys must still read `<list>.*.<path>`."""
    tp = _tp(_plain(tmp_path), "TinyDiT")
    body = _PLAIN.replace("KV", "8").replace("BASE", "nn.Module").replace(", ENABLE", "")
    built = "for _ in range(depth)])\n"
    body = body.replace(
        built,
        built
        + "        for layer in self.layers:\n"
        + "            nn.init.zeros_(layer.adaln.weight)\n"
        + "            nn.init.zeros_(layer.fc_out.bias)\n",
    )
    touched = _tp(_write(tmp_path, body, "touched.py"), "TinyDiT")
    assert touched["layers"] == tp["layers"]
    assert all(not k.count("<root>") for k in touched["layers"])


def test_the_analysis_json_does_not_depend_on_string_hashing() -> None:
    """Some passes collect layers in sets: the JSON orders them, whatever PYTHONHASHSEED is."""
    import os
    import subprocess
    import sys

    flux = diffusers_file("models/transformers/transformer_flux.py")
    outputs = {
        subprocess.run(
            [sys.executable, "-m", "lsp_server.cli", "analyze", "--json", str(flux)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1


_SHAPE_WIDTH = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from diffusers.models.modeling_utils import ModelMixin


class Attn(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim)
        self.to_k = nn.Linear(dim, dim)
        self.to_v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q = self.to_q(x).view(B, N, self.heads, -1).transpose(1, 2)
        k = self.to_k(x).view(B, N, self.heads, -1).transpose(1, 2)
        v = self.to_v(x).view(B, N, self.heads, -1).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2)
        return self.out(MERGE)


class Mlp(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = Attn(dim, heads)
        self.mlp = Mlp(dim)

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)


class WidthDiT(ModelMixin):
    def __init__(self, dim=128, heads=4):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(2)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
"""


@pytest.mark.parametrize(
    "merge",
    [
        "o.reshape(B, N, C)",  # the width unpacked from the block input's shape
        "o.reshape(B, N, x.shape[-1])",
        "o.reshape(*x.shape[:2], x.size(-1))",
        "o.reshape(x.shape)",
        "o.reshape_as(x)",
        "o.reshape(B, N, C // self.heads * self.heads)",  # computed from it
    ],
)
def test_a_width_read_from_an_unsharded_shape_replicates_the_attention(tmp_path, merge):
    """Sharded, q/k/v would give each rank `C / tp` columns, which `reshape(..., C)` cannot hold:
    the attention's projections are replicated (the MLP stays sharded), and no head count is
    divided for the attention that now runs whole."""
    tp = _tp(_write(tmp_path, _SHAPE_WIDTH.replace("MERGE", merge)), "WidthDiT")
    assert tp["layers"] == {
        "blocks.*.attn.to_q": "colwise_replicate",
        "blocks.*.attn.to_k": "colwise_replicate",
        "blocks.*.attn.to_v": "colwise_replicate",
        "blocks.*.attn.out": "rowwise_replicate_input",
        "blocks.*.mlp.up": "colwise",
        "blocks.*.mlp.down": "rowwise",
    }
    assert tp["shardDivAttrs"] == []
    (diag,) = [w for w in tp["warnings"] if w["code"] == "CDIT313"]
    assert f"`{merge}`" in diag["message"] and diag["line"] == 23  # the merge, as written
    assert [a["sharded"] for a in tp["attention"]] == [False]


@pytest.mark.parametrize(
    "merge", ["o.reshape(B, N, -1)", "o.flatten(2)", "o.reshape(B, N, self.heads * q.shape[-1])"]
)
def test_a_per_rank_width_keeps_the_attention_sharded(tmp_path, merge):
    """`-1`, a flatten, or a width computed from the sharded tensors' own shapes fit any rank."""
    text = _SHAPE_WIDTH.replace("MERGE", merge)
    tp = _tp(_write(tmp_path, text), "WidthDiT")
    assert tp["layers"]["blocks.*.attn.to_q"] == "colwise"
    assert tp["layers"]["blocks.*.attn.out"] == "rowwise"
    assert tp["shardDivAttrs"] == ["blocks.*.attn.heads"]
    assert "CDIT313" not in _codes(tp)


def test_or_default_is_the_operand_not_a_boolean(tmp_path):
    # `heads = heads or n_heads` is a size: read as `True`, every projection it sizes was
    # reported "not divisible by any TP size" (Kandinsky 6's `model_dim_a or model_dim`)
    text = _PLAIN.replace("KV", "None").replace("BASE", "nn.Module").replace(", ENABLE", "")
    text = text.replace(
        "        super().__init__()\n        self.layers",
        "        super().__init__()\n        n_kv_heads = n_kv_heads or n_heads\n"
        "        width = (depth > 0) and width\n        self.layers",
    )
    tp = _tp(_write(tmp_path, text), "TinyDiT", tp_sizes=(3,))
    messages = [w["message"] for w in tp["warnings"]]
    assert not any("= True" in m or "= False" in m for m in messages), messages
    heads = [m for m in messages if "n_kv_heads" in m and "valid TP sizes" in m]
    assert heads and all("valid TP sizes: 2, 4, 8" in m for m in heads), messages
    assert tp["attentionStrategy"] == "mha"  # was "GQA: True key/value heads"
    k6 = _tp(diffusers_file(T + "transformer_kandinsky6.py"), "Kandinsky6Transformer3DModel")
    assert "CDIT310" not in _codes(k6)
