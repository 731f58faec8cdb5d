"""Context-parallel plans: approach, hook plan, masks and pre-flight checks, on real diffusers
transformers and on invented third-party sources."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES, diffusers_file

T = "models/transformers/"


def cp_of(path, cls=None, **kw):
    (t,) = analyze_path(path, cls, registry=False, **kw).to_json()["transformers"]
    return t["contextParallel"], t["diagnostics"]


def test_flux_root_split_matches_the_plan_diffusers_ships():
    cp, diags = cp_of(diffusers_file(T + "transformer_flux.py"), "FluxTransformer2DModel")
    assert cp["approach"] == "root_split"
    root = cp["plan"][""]
    assert set(root) == {"hidden_states", "encoder_hidden_states", "img_ids", "txt_ids"}
    assert (root["img_ids"]["split_dim"], root["img_ids"]["expected_dims"]) == (0, 2)
    assert (root["hidden_states"]["split_dim"], root["hidden_states"]["expected_dims"]) == (1, 3)
    assert cp["plan"]["proj_out"]["gather_dim"] == 1
    assert cp["diffusersPlan"] is not None
    assert not [d for d in diags if d["code"] == "CDIT218"]  # same plan as diffusers' _cp_plan
    assert cp["attentionMask"]["reorderNeeded"] is False


def test_wan_splits_at_the_first_block_and_splits_rope_outputs():
    cp, diags = cp_of(diffusers_file(T + "transformer_wan.py"), "WanTransformer3DModel")
    assert cp["approach"] == "single_point"
    assert set(cp["plan"]["blocks.0"]) == {"hidden_states"}
    rope = cp["plan"]["rope"]
    assert set(rope) == {"0", "1"}
    assert all(
        r["split_output"] and r["split_dim"] == 1 and r["expected_dims"] == 4 for r in rope.values()
    )
    assert cp["plan"][""]["timestep"]["expected_dims"] == 2  # Wan 2.2 per-token timesteps
    assert "gather_dim" in cp["plan"]["proj_out"]
    assert any("Conv3d" in e["message"] for e in cp["evidence"])
    assert any(d["code"] == "CDIT214" for d in diags)  # block-level split vs DBCache


def test_qwenimage_avoids_root_split_because_rope_reads_the_text_length():
    cp, _ = cp_of(diffusers_file(T + "transformer_qwenimage.py"), "QwenImageTransformer2DModel")
    assert cp["approach"] == "single_point"
    assert set(cp["plan"]["transformer_blocks.0"]) == {"hidden_states", "encoder_hidden_states"}
    assert "pos_embed" in cp["plan"]
    assert any("position drift" in e["message"] for e in cp["evidence"])


def test_hunyuan_video_joint_mask_needs_a_reorder():
    cp, diags = cp_of(
        diffusers_file(T + "transformer_hunyuan_video.py"), "HunyuanVideoTransformer3DModel"
    )
    assert cp["attentionMask"]["present"] and cp["attentionMask"]["reorderNeeded"]
    (reorder,) = [d for d in diags if d["code"] == "CDIT217"]
    assert reorder["severity"] == "warning" and "cannot be placed" in reorder["message"]


def test_mask_from_pipeline_attention_kwargs():
    cp, _ = cp_of(
        diffusers_file(T + "transformer_bria_fibo.py"),
        "BriaFiboTransformer2DModel",
        pipeline_path=diffusers_file("pipelines/bria_fibo/pipeline_bria_fibo.py"),
    )
    assert cp["attentionMask"]["reorderNeeded"] is True
    assert any("attention-kwargs" in s["message"] for s in cp["attentionMask"]["sources"])


def test_gather_before_a_function_that_needs_the_whole_sequence():
    cp, _ = cp_of(diffusers_file(T + "transformer_kandinsky.py"), "Kandinsky5Transformer3DModel")
    assert "visual_transformer_blocks.<last>" in cp["plan"]
    assert "rope" in cp["plan"]["visual_transformer_blocks.*"]  # reworked by fractal_flatten
    assert "text_embed" in cp["plan"]["visual_transformer_blocks.*"]  # cross-attention keys
    dit, _ = cp_of(diffusers_file(T + "dit_transformer_2d.py"))
    assert "proj_out_2" in dit["plan"]


def test_refiners_get_their_own_split_and_gather():
    cp, _ = cp_of(diffusers_file(T + "transformer_z_image.py"), "ZImageTransformer2DModel")
    assert cp["approach"] == "submodule_hooks"
    for stage in ("noise_refiner", "context_refiner"):
        assert f"{stage}.0" in cp["plan"] and f"{stage}.<last>" in cp["plan"]
    assert "all_final_layer" in cp["plan"]
    assert "siglip_refiner.0" not in cp["plan"]  # runs only when siglip inputs are passed


@pytest.mark.parametrize(
    ("heads", "size", "code"), [(24, 8, None), (30, 8, "CDIT211"), (30, 16, "CDIT210")]
)
def test_head_divisibility_preflight(tmp_path, heads, size, code):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_attention_heads": heads}))
    _, diags = cp_of(
        diffusers_file(T + "transformer_flux.py"),
        "FluxTransformer2DModel",
        config_path=config,
        cp_sizes=(size,),
    )
    codes = {d["code"] for d in diags if d["code"] in ("CDIT210", "CDIT211")}
    assert codes == ({code} if code else set())


THIRD_PARTY = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, freqs):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        o = F.scaled_dot_product_attention(q, k, v)
        return self.out(o)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = SelfAttention(dim, heads)
        self.mlp = nn.Linear(dim, dim)

    def forward(self, x, freqs, t):
        x = x + self.attn(x, freqs)
        return x + self.mlp(x)


class {name}(nn.Module):
    def __init__(self, dim=64, depth=12, heads=8):
        super().__init__()
        {embed}
        self.pos = PosTable(dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.head = nn.Linear(dim, 4)

    def forward(self, x, t):
        {body}
        for blk in self.blocks:
            x = blk(x, freqs, t)
        x = self.head(x)
        return x.reshape(b, -1, 4)


class PosTable(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, n):
        return torch.zeros(1, n, self.dim)
"""


def write_model(tmp_path, name, embed, body):
    path = tmp_path / f"{name.lower()}.py"
    path.write_text(textwrap.dedent(THIRD_PARTY).format(name=name, embed=embed, body=body))
    return path


def test_third_party_token_model_with_length_positions_is_split_at_the_first_block(tmp_path):
    path = write_model(
        tmp_path,
        "TokenNet",
        "self.embed = nn.Linear(16, dim)",
        "b, n, _ = x.shape\n        x = self.embed(x)\n        freqs = self.pos(n)",
    )
    cp, diags = cp_of(path)
    # `n` is read from x: a root split would hand the position table the local length
    assert cp["approach"] == "single_point"
    assert "blocks.0" in cp["plan"] and "pos" in cp["plan"]
    assert any(d["code"] == "CDIT215" for d in diags)  # direct SDPA: processor needs a patch


def test_third_party_conv_patchify_and_plain_method_positions(tmp_path):
    path = write_model(
        tmp_path,
        "ConvNet",
        "self.embed = nn.Conv2d(4, dim, 2, 2)",
        "b = x.shape[0]\n        x = self.embed(x).flatten(2).transpose(1, 2)\n"
        "        freqs = self.rotary_freqs(x.shape[1])",
    )
    source = path.read_text().replace(
        "class PosTable(nn.Module):",
        "    def rotary_freqs(self, n):\n        return torch.zeros(1, n, 8)\n\n\n"
        "class PosTable(nn.Module):",
    )
    path.write_text(source)
    cp, _ = cp_of(path)
    # the method's table is sized by the stream's length on axis 1 (read from `zeros(1, n, 8)`):
    # split where the blocks receive it, no method patch
    assert cp["approach"] == "single_point"
    assert not any("rotary_freqs" in p["message"] for p in cp["patches"])
    (spec,) = cp["plan"]["blocks.*"].values()
    assert spec["split_dim"] == 1 and "sequence length on axis 1" in spec["reason"]
    assert any("latent" in e["message"] for e in cp["evidence"])


def test_a_plain_method_table_built_from_another_streams_length_is_refused():
    """quill_dit.py: `rope = self._rope(ctx.shape[1] + x.shape[1], ...)`, one table over the text
    and the image tokens: cutting its rows like one stream's would pair tokens with other rows.
    Its use (`q * rope[0]` on `(B, H, S, D)` queries) does not tell the axis of an `(S, D)` table
    from a `(B, S, D)` one, so CP is refused with the reason (it was a patch plan before, with the
    table on the batch-first default axis)."""
    cp, _ = cp_of(FIXTURES / "models" / "third_party" / "quill_dit.py", "QuillDiT")
    assert cp["approach"] == "none"
    assert any(
        "`rope` of the blocks of `trunk`" in w["message"]
        and "read neither from how forward builds it" in w["message"]
        for w in cp["warnings"]
    )


CADENCE = FIXTURES / "models" / "cadence_rope_dit.py"


def test_rope_tuple_of_seq_first_tables_is_split_on_axis_0():
    # (cos, sin) tables of shape (seq, dim), no reshape: the axis comes from `outer(arange, ...)`
    cp, diags = cp_of(CADENCE)
    assert cp["approach"] == "single_point"
    rope = cp["plan"]["rope"]
    assert set(rope) == {"0", "1"}
    assert all(r["split_output"] and r["split_dim"] == 0 for r in rope.values())
    assert not [d for d in diags if d["code"] == "CDIT220"]


def test_rope_whose_sequence_axis_is_not_inferred_refuses_cp(tmp_path):
    source = CADENCE.read_text().replace(
        "angles = torch.outer(positions, self.inv_freq)",
        'angles = torch.einsum("i,j->ij", positions * 0.5, self.inv_freq)',
    )
    path = tmp_path / "cadence_einsum.py"
    path.write_text(source)
    cp, diags = cp_of(path)
    assert cp["approach"] == "none" and not cp["plan"]
    assert any(d["code"] == "CDIT220" and "rope" in d["message"] for d in diags)


_CALLABLE_TABLE = """
class CadenceTable:
    \"\"\"Not a module: a callable that gathers rows of precomputed tables by position ids.\"\"\"

    def __init__(self, head_dim: int, max_len: int = 512):
        angles = torch.outer(torch.arange(max_len).float(), torch.ones(head_dim // 2))
        self.cos, self.sin = angles.cos(), angles.sin()

    def __call__(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        index = ids[:, 0]
        return self.cos[index], self.sin[index]


class CadenceRotary(nn.Module):"""

_LIST_TABLE = """
class CadenceRotary(nn.Module):
    def __init__(self, head_dim: int, max_len: int = 512):
        super().__init__()
        angles = torch.outer(torch.arange(max_len).float(), torch.ones(head_dim // 2))
        self.tables = [angles.cos(), angles.sin()]

    def forward(self, segments: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        positions = []
        for start, length in enumerate(segments):
            positions.extend(range(start, start + length))
        positions = torch.tensor(positions, dtype=torch.long)
        return self.tables[0][positions], self.tables[1][positions]


class _Unused(nn.Module):"""


@pytest.mark.parametrize(
    ("new_class", "ctor", "call"),
    [
        # a plain callable class (no nn.Module, `__call__`), rows picked by the caller's ids
        (
            _CALLABLE_TABLE,
            "self.rope = CadenceTable(dim // heads)",
            "ids = torch.zeros(hidden_states.shape[1], 1, dtype=torch.long)\n"
            "        rotary_emb = self.rope(ids)",
        ),
        # rows picked by a position list forward's helper fills with `.extend(...)`
        (
            _LIST_TABLE,
            "self.rope = CadenceRotary(dim // heads)",
            "rotary_emb = self.rope([seq_len])",
        ),
    ],
    ids=["callable-gathered-by-ids", "gathered-by-extended-list"],
)
def test_position_tables_gathered_per_token_are_split_on_axis_0(
    tmp_path: Path, new_class: str, ctor: str, call: str
) -> None:
    source = (
        CADENCE.read_text()
        .replace("class CadenceRotary(nn.Module):", new_class, 1)
        .replace("self.rope = CadenceRotary(dim // heads)", ctor)
        .replace("rotary_emb = self.rope(seq_len)", call)
    )
    path = tmp_path / "cadence_gathered.py"
    path.write_text(source)
    cp, diags = cp_of(path)
    assert not [d for d in diags if d["code"] == "CDIT220"], diags
    rope = cp["plan"]["rope"]
    assert all(r["split_output"] and r["split_dim"] == 0 for r in rope.values()), rope
    assert any("gathered by per-token ids" in e["message"] for e in cp["evidence"])


def test_packed_sequence_root_split_ids_roles_and_segment_mask():
    """Ideogram 4 packs text and image tokens in one sequence: the per-token role (B, S) is split
    as a 2-D tensor, the (B, S, 3) position ids reach the RoPE module through `(cos, sin)` and are
    split with the tokens, the segment ids stay whole (they only build the attention mask, whole
    inside the all-to-all attention), and ring attention is refused for that mask."""
    cp, _ = cp_of(diffusers_file(T + "transformer_ideogram4.py"), "Ideogram4Transformer2DModel")
    root = cp["plan"][""]
    assert cp["approach"] == "root_split"
    assert (root["indicator"]["split_dim"], root["indicator"]["expected_dims"]) == (1, 2)
    assert (root["position_ids"]["split_dim"], root["position_ids"]["expected_dims"]) == (1, 3)
    assert "segment_ids" not in root
    assert cp["attentionMask"]["present"]


PACKED = """
import torch
from torch import nn


class Rope(nn.Module):
    def forward(self, ids):
        freqs = ids.float()[..., None] * torch.arange(4.0)
        return freqs.cos(), freqs.sin()


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.mix = nn.Linear(dim, dim)

    def forward(self, x, rope):
        cos, sin = rope
        return x + self.mix(x) * cos.mean(-1, keepdim=True)


class PackedNet(nn.Module):
    def __init__(self, dim=8, depth=2):
        super().__init__()
        self.embed = nn.Linear(dim, dim)
        self.rope = Rope()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, dim)

    def forward(self, hidden_states, role, pos_ids):
        keep = (role == 1).to(hidden_states.dtype).unsqueeze(-1)
        hidden_states = self.embed(hidden_states) * keep
        cos, sin = self.rope(pos_ids)
        rope = (cos.to(hidden_states.dtype), sin)
        for block in self.blocks:
            hidden_states = block(hidden_states, rope)
        return self.head(hidden_states)
"""


def test_third_party_per_token_roles_and_ids_behind_a_tuple(tmp_path):
    path = tmp_path / "packed.py"
    path.write_text(textwrap.dedent(PACKED))
    cp, _ = cp_of(path, "PackedNet")
    root = cp["plan"][""]
    assert cp["approach"] == "root_split"
    assert root["role"]["expected_dims"] == 2  # `(role == 1).unsqueeze(-1)`: (B, S)
    assert root["hidden_states"]["expected_dims"] == 3
    assert "pos_ids" in root  # reaches the blocks through `rope = (cos.to(...), sin)`
