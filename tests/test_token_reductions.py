"""Work outside attention that depends on which tokens a rank holds. Reductions over the tokens
(`pooled_dit.py`): inside a block
(`x.mean(dim=1)` flowing back into the stream) no token split reproduces them, so CP is refused;
before the blocks (`c = c + pool(x.mean(dim=1))`) they block a root split only (split at the
first block: exact on 2 gloo ranks in tests/test_cp_plans_gloo.py; the root split, the analysis's
choice before, is 0.06 off). A reduction that only feeds an auxiliary loss returned beside the
stream (`moe_dit.py`) changes nothing. Positions an attention module counts from the queries it
is handed, and convolutions over neighbouring tokens (`local_count_dit.py`), refuse CP; so do
token shifts (`torch.roll(x, 1, dims=1)`), causal SDPA called through a bare alias, and windows
cut from token-local work on the stream (`(norm(x) * s).reshape(b * (n // 4), 4, d)`)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from lsp_server.analysis.context_parallel.token_mixing import token_reduction
from tests.conftest import FIXTURES

THIRD_PARTY = FIXTURES / "models" / "third_party"


def _cp(path: Path, cls: str) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


def test_a_block_reducing_over_its_tokens_refuses_cp() -> None:
    cp = _cp(THIRD_PARTY / "pooled_dit.py", "GlobalContextDiT")
    assert cp["approach"] == "none"
    (warning,) = [w for w in cp["warnings"] if "reduces over the tokens" in w["message"]]
    assert "`self.norm(x).mean(dim=1, keepdim=True)`" in warning["message"]


def test_tokens_pooled_before_the_blocks_block_the_root_split() -> None:
    cp = _cp(THIRD_PARTY / "pooled_dit.py", "PooledCondDiT")
    assert cp["approach"] == "single_point"
    assert "" not in cp["plan"]
    assert any("reduces over the tokens before the blocks" in e["message"] for e in cp["evidence"])


def test_an_auxiliary_loss_over_the_tokens_keeps_the_plan() -> None:
    cp = _cp(THIRD_PARTY / "moe_dit.py", "MoEDiT")
    assert cp["approach"] != "none"


def _reduction(body: str) -> str | None:
    (func,) = ast.parse(textwrap.dedent(body)).body
    assert isinstance(func, ast.FunctionDef)
    hit = token_reduction(func.body, func.args.args[1].arg)
    return ast.unparse(hit) if hit is not None else None


def test_which_reductions_count() -> None:
    assert (
        _reduction(
            """
        def forward(self, x, c):
            h = self.norm(x) * c
            s = torch.softmax(h, dim=1)
            return x + s
        """
        )
        == "torch.softmax(h, dim=1)"
    )
    assert (
        _reduction(  # over the features, or after a relayout: not the tokens
            """
            def forward(self, x, c):
                m = x.mean(dim=-1, keepdim=True)
                y = x.transpose(1, 2).mean(1)
                return x - m + y[:, None]
            """
        )
        is None
    )
    assert (
        _reduction(  # computed, returned beside the stream only
            """
            def forward(self, x, c):
                loss = (x.mean(1) ** 2).sum()
                return x * 2, loss
            """
        )
        is None
    )


def test_positions_counted_inside_an_attention_module_refuse_cp() -> None:
    cp = _cp(THIRD_PARTY / "local_count_dit.py", "InnerRopeDiT")
    assert cp["approach"] == "none"
    (warning,) = {w["message"] for w in cp["warnings"] if "counts positions" in w["message"]}
    assert warning.startswith("Rotary counts positions from the tokens it sees")


def test_a_convolution_over_the_tokens_refuses_cp() -> None:
    cp = _cp(THIRD_PARTY / "local_count_dit.py", "MixFFNDiT")
    assert cp["approach"] == "none"
    (warning,) = {w["message"] for w in cp["warnings"] if "convolves" in w["message"]}
    assert "`self.dw`" in warning and "edges" in warning


def test_diffusers_sanas_token_grid_is_named_among_its_reasons() -> None:
    from tests.conftest import diffusers_file

    cp = _cp(diffusers_file("models/transformers/sana_transformer.py"), "SanaTransformer2DModel")
    # its block lays the tokens out as the (height, width) grid for the Mix-FFN's convolution
    assert any(
        "regroups the tokens it sees (`norm_hidden_states.unflatten(1, (height, width))`)"
        in w["message"]
        for w in cp["warnings"]
    )


def test_block_work_a_token_split_changes_refuses_cp() -> None:
    path = THIRD_PARTY / "split_sensitive_dit.py"
    for cls, words in (
        ("RegDiT", "joins tokens of its own to the stream"),
        ("GNDiT", "normalises its tokens with a GroupNorm"),
        ("CausalDiT", "attends causally (`is_causal=True`)"),
        ("AxialDiT", "regroups the tokens it sees (`x.reshape(b * self.frames"),
    ):
        cp = _cp(path, cls)
        assert cp["approach"] == "none", cls
        assert any(words in w["message"] for w in cp["warnings"]), (cls, cp["warnings"])


def test_a_causal_flag_is_a_caution_not_a_refusal() -> None:
    (t,) = analyze_path(
        THIRD_PARTY / "split_sensitive_dit.py", "CausalFlagDiT", registry=False
    ).to_json()["transformers"]
    cp = t["contextParallel"]
    assert cp["approach"] != "none"
    cautions = [w for w in cp["warnings"] if w["code"] == "CDIT221"]
    assert any("`is_causal=self.causal`" in w["message"] for w in cautions)


def test_fixed_token_positions_refuse_cp_and_are_a_caution_under_an_optional_input() -> None:
    cp = _cp(THIRD_PARTY / "split_sensitive_dit.py", "RefTokenDiT")
    assert cp["approach"] == "none"
    assert any(
        "takes fixed token positions (`h[:, :self.ref_tokens]`)" in w["message"]
        for w in cp["warnings"]
    )
    # StableAudio 3 cuts its memory tokens off only when an inpainting input is passed
    from tests.conftest import diffusers_file

    cp = _cp(
        diffusers_file("models/transformers/transformer_stable_audio3.py"), "StableAudio3DiTModel"
    )
    assert cp["approach"] != "none"
    (caution,) = [w for w in cp["warnings"] if "takes fixed token positions" in w["message"]]
    assert caution["code"] == "CDIT221" and "`local_seq is not None`" in caution["message"]


_LAYER_END = "        x = x + self.cross(self.norm2(x), context)\n        return x + self.mlp(x)\n"
_SDPA = "        out = sdpa(q, k, v)\n"


_WINDOW_OLD = "        x = x + gate * self.attn(self.norm1(x) * (1 + scale) + shift, cos, sin)\n"


def _before_return(line: str) -> str:
    return _LAYER_END.replace("        return", f"        {line}\n        return")


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        # a token shift (RWKV-style): each token meets its neighbour; at a rank's edge, its own
        (
            _LAYER_END,
            _LAYER_END.replace(
                "        return", "        x = x + torch.roll(x, 1, dims=1)\n        return"
            ),
            "pairs each token with its neighbours (`torch.roll(x, 1, dims=1)`)",
        ),
        (
            _LAYER_END,
            _before_return("x = x + x.roll(1, 1)"),
            "pairs each token with its neighbours (`x.roll(1, 1)`)",
        ),
        # causal attention through a bare name bound to SDPA (cache-dit's CP attention stops)
        (_SDPA, "        out = sdpa(q, k, v, is_causal=True)\n", "attends causally"),
        # windows of 4 tokens cut from token-local work on the stream before the attention
        # (the windows would be cut from each rank's tokens: 4.7e3 off at 1.5e4 on 2 ranks)
        (
            _WINDOW_OLD,
            "        b_, n_, d_ = x.shape\n"
            "        h = (self.norm1(x) * (1 + scale) + shift).reshape(b_ * (n_ // 4), 4, d_)\n"
            "        x = x + gate * self.attn(h, cos[:4], sin[:4]).reshape(b_, n_, d_)\n",
            "regroups the tokens it sees (`(self.norm1(x) * (1 + scale) + shift).reshape(",
        ),
    ],
)
def test_token_shifts_and_causal_attention_through_an_alias_refuse_cp(
    tmp_path: Path, old: str, new: str, said: str
) -> None:
    """Invented variants of plain_sdpa_dit.py. Before, both were planned: the shift ran and was
    wrong on 2 gloo ranks (1.6e4 off at a 3.4e4 scale), causal attention stopped at the first
    call ("not yet supported for templated attention")."""
    _assert_variant_refuses_cp(tmp_path, old, new, said)


def test_a_roll_over_another_axis_keeps_the_plan(tmp_path: Path) -> None:
    """The control: rolling the channels (axis -1) is token-local."""
    text = (FIXTURES / "models" / "plain_sdpa_dit.py").read_text()
    path = tmp_path / "channel_roll_dit.py"
    new = _LAYER_END.replace(
        "        return", "        x = x + torch.roll(x, 1, dims=-1)\n        return"
    )
    path.write_text(text.replace(_LAYER_END, new))
    assert _cp(path, "PlainSdpaDiT")["approach"] != "none"


def test_a_reduction_in_a_later_lists_block_refuses_cp() -> None:
    """echo_dit.py: the decoder stack's block gates its memory with `hidden_states.mean(dim=1)`;
    under a split at the encoder stack's first block every list after it runs on the rank's
    tokens, so its reduction would be per rank. Every cached list's blocks are read, not the
    first list's only (the plan split and gathered around it before)."""
    cp = _cp(FIXTURES / "models" / "echo_dit.py", "EchoTransformer2DModel")
    assert cp["approach"] == "none"
    assert any(
        "EchoDecodeBlock reduces over the tokens it sees" in w["message"] for w in cp["warnings"]
    )


_ATTN_ROTARY = "        q, k = rotate(q, cos, sin), rotate(k, cos, sin)\n"


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        # a learned position table added inside the block, cut to the tokens it sees
        (
            "        shift, scale, gate = self.mod(c).unsqueeze(1).chunk(3, dim=-1)\n",
            "        shift, scale, gate = self.mod(c).unsqueeze(1).chunk(3, dim=-1)\n"
            "        x = x + self.mod.weight[: x.shape[1], : x.shape[2]]\n",
            "Layer takes rows of its own table for the tokens it sees, from the first "
            "(`self.mod.weight[:x.shape[1], :x.shape[2]]`)",
        ),
        # a rotary table the attention module holds, cut to its length (LLaMA-style)
        (
            _ATTN_ROTARY,
            "        q, k = rotate(q, self.t[:n], self.t[:n]), rotate(k, self.t[:n], self.t[:n])\n",
            "SelfAttention takes rows of its own table for the tokens it sees, from the first "
            "(`self.t[:n]`)",
        ),
    ],
)
def test_own_tables_cut_to_the_tokens_a_block_sees_refuse_cp(
    tmp_path: Path, old: str, new: str, said: str
) -> None:
    """Each rank would take the first rows, not those of its own tokens: a learned table added
    in the block ran and was wrong on 2 gloo ranks (2.8e3 off at 1.0e4, Ulysses and Ring)."""
    _assert_variant_refuses_cp(tmp_path, old, new, said)


def _assert_variant_refuses_cp(tmp_path: Path, old: str, new: str, said: str) -> None:
    """plain_sdpa_dit.py with `old` replaced by `new`: CP refused, with `said` among the reasons."""
    text = (FIXTURES / "models" / "plain_sdpa_dit.py").read_text()
    assert old in text
    path = tmp_path / "variant_dit.py"
    path.write_text(text.replace(old, new))
    cp = _cp(path, "PlainSdpaDiT")
    assert cp["approach"] == "none"
    assert any(said in w["message"] for w in cp["warnings"]), cp["warnings"]


def test_a_flag_compared_with_a_constant_is_evaluated() -> None:
    """BasicTransformerBlock builds a SinusoidalPositionalEmbedding (which cuts its table to the
    tokens it sees) only `if positional_embeddings == "sinusoidal"`; DiT builds its blocks
    without it (default None): no caution, no refusal."""
    from tests.conftest import diffusers_file

    cp = _cp(diffusers_file("models/transformers/dit_transformer_2d.py"), "DiTTransformer2DModel")
    assert not any("SinusoidalPositionalEmbedding" in w["message"] for w in cp["warnings"])
