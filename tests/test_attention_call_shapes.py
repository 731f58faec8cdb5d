"""Attention written as third-party code writes it (`tests/fixtures/models/third_party/
attention_bias_dits.py`): modules handed to the block by whoever builds it, inputs embedded by a
method of the transformer, and attention modules whose keys are whatever the block hands them.

Before, each of these ran under context parallelism and was silently wrong on 2 gloo ranks:
attention handed in (`AttnBlock(dim, GroupedAttention(...))`, `attn_layer=partial(...)`, a
class as a parameter's default) was not read, so its SDPA was left unrouted and every rank
attended over its own tokens (0.05-0.07 off); `x, c = self.embed(latents, timestep)` made a
root split of the 4-D latent and the timestep (a (1, 8, 8, 8) output for a (1, 4, 8, 8)
latent); a summary query attending over the block's tokens through a "cross-attention" module
stayed local (0.18 off).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

SHAPES = FIXTURES / "models" / "third_party" / "attention_bias_dits.py"

HANDED_IN = {
    "ChunkedQueryDiT": "ChunkedAttention",
    "GroupedQueryDiT": "GroupedAttention",
    "DiffAttnDiT": "DiffAttention",
    "LayerFactoryDiT": "GroupedAttention",
    "DefaultLayerDiT": "DiffAttention",
}


def _cp(cls: str) -> dict[str, Any]:
    (t,) = analyze_path(SHAPES, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


def _refusals(cp: dict[str, Any]) -> list[str]:
    return [w["message"] for w in cp["warnings"] if w["code"] == "CDIT220"]


@pytest.mark.parametrize(("cls", "attention"), sorted(HANDED_IN.items()))
def test_attention_handed_to_the_block_is_routed(cls: str, attention: str) -> None:
    cp = _cp(cls)
    assert cp["approach"] == "single_point", _refusals(cp)
    assert [r["class"] for r in cp["sdpaRoutes"]] == [attention]


def test_an_input_embedded_by_a_method_is_not_root_split() -> None:
    cp = _cp("ChunkedQueryDiT")
    assert "" not in cp["plan"]
    assert set(cp["plan"]["blocks.0"]) == {"x"}
    assert any(
        "`self.embed(...)` receives forward's `latents`" in e["message"]
        and "applies `patchify`" in e["message"]
        for e in cp["evidence"]
    )


@pytest.mark.parametrize(
    ("cls", "call"),
    [
        ("SummaryTokenDiT", "self.pool(self.query.expand(x.shape[0], -1, -1), x)"),
        ("ReadBackDiT", "self.txt_from_img(txt, img)"),
    ],
)
def test_keys_from_the_tokens_with_queries_from_elsewhere_refuse(cls: str, call: str) -> None:
    cp = _cp(cls)
    assert cp["approach"] == "none"
    assert any(call in m and "queries are not" in m for m in _refusals(cp)), _refusals(cp)


def test_a_cross_attention_module_over_the_tokens_alone_is_routed() -> None:
    """SelfViaCrossBlock calls a `(x, ctx)` module as `self.attn(h, h)`: self-attention over
    the split tokens, routed; its text cross-attention (another class) stays local."""
    cp = _cp("SelfViaCrossDiT")
    assert cp["approach"] == "single_point", _refusals(cp)
    assert [r["class"] for r in cp["sdpaRoutes"]] == ["CrossAttention"]


@pytest.mark.parametrize(
    ("cls", "call"),
    [
        ("PooledKeyDiT", "F.avg_pool1d(x.transpose(1, 2), kernel_size=2)"),
        ("PoolModuleDiT", "self.squeeze(k.transpose(1, 2))"),
        ("InterpolatedKeyDiT", "F.interpolate(kv.transpose(1, 2)"),
        ("ReducedKeyDiT", "`self.sr` = `nn.Conv2d(dim, dim, kernel_size=ratio, stride=ratio)`"),
    ],
)
def test_keys_resampled_from_neighbouring_tokens_refuse(cls: str, call: str) -> None:
    """Pooling, interpolating or striding over the tokens inside attention is right under a
    split only while every rank's length is a multiple of the window (on 2 ranks of 8 tokens
    the pooled models ran exact, a rank of 9 would pool token 8 with nothing); the strided
    convolution stopped on its grid reshape."""
    cp = _cp(cls)
    assert cp["approach"] == "none"
    assert any(call in m for m in _refusals(cp)), _refusals(cp)


def test_pooling_each_tokens_features_keeps_the_split() -> None:
    """`F.avg_pool1d(x, 2)` of the `(B, S, D)` input pools each token's features: routed."""
    cp = _cp("FeaturePoolDiT")
    assert cp["approach"] == "single_point", _refusals(cp)
    assert [r["class"] for r in cp["sdpaRoutes"]] == ["FeaturePoolAttention"]


def test_the_plans_run_right_on_two_gloo_ranks(tmp_path: Path) -> None:
    """Generated modules match one process on 2 gloo ranks (Ulysses); the controls, modules
    without their SDPA route (the handed-in grouped attention, the self-attention called as
    `attn(h, h)`), are off."""
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.cp_runs import offsets, routed_cases

    classes = (
        "ChunkedQueryDiT",
        "LayerFactoryDiT",
        "DefaultLayerDiT",
        "AlibiDiT",
        "SelfViaCrossDiT",
        "FeaturePoolDiT",
    )
    cases = routed_cases(SHAPES, classes, tmp_path, ("LayerFactoryDiT", "SelfViaCrossDiT"))
    for name, off in offsets(cases, tmp_path).items():
        assert off > 1e-2 if name.startswith("unrouted") else off < 1e-4, (name, off)
