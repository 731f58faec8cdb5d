"""Blocks whose `forward` only hands its arguments on to a function, as a published MMDiT
reference keeps the joint attention of two half-blocks outside them:
`def forward(self, *args, **kwargs): return mix(*args, text_half=self.text_half, ...)`
(`third_party/dismantled_mmdit.py`).

Before: the block's signature and returns were read on the wrapper (`*args`, "returns only
None"), so the list was cached as Pattern_3 while the loop unpacks two streams: cache-dit stopped
at the first call (`The size of tensor a (4) must match the size of tensor b (5)`). Now the
signature is the function's, less what the wrapper binds by keyword, and its returns are the
function's: the text-first block runs through steps that take the streams the other way round
(no-cache control bit-identical with a batch of two, forced caching engages). Context
parallelism stays refused, now saying why (the attention inside the function is not read).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

SOURCE = FIXTURES / "models" / "third_party" / "dismantled_mmdit.py"
CLS = "DismantledMMDiT"


def _transformer() -> dict[str, Any]:
    return analyze_path(SOURCE, CLS, registry=False).to_json()["transformers"][0]


def test_the_signature_and_returns_are_the_functions() -> None:
    t = _transformer()
    (blocks,) = t["blockLists"]
    said = " ".join(e["message"] for e in blocks["evidence"])
    assert "JointUnit.forward(ctx, x, c): takes ctx and x, returns (ctx, x)" in said
    assert blocks["forwardPattern"] == "Pattern_1"
    assert [r["kind"] for r in t["patchFunctor"]["reasons"]] == ["stream_order"]


def test_cp_is_refused_saying_the_attention_in_the_function_is_not_read() -> None:
    cp = _transformer()["contextParallel"]
    assert cp["approach"] == "none"
    assert any(
        "it hands `*args` on to `mix(...)`, whose attention is not read here" in e["message"]
        for e in cp["evidence"]
    )


def test_caching_reproduces_the_model_with_a_batch_of_two(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.transformer_cache_runs import assert_caches_exactly, cached_module, seeded_model

    g = torch.Generator().manual_seed(1)
    latent = torch.randn(2, 4, 4, 4, generator=g)
    pooled, text = torch.randn(2, 8, generator=g), torch.randn(2, 3, 16, generator=g)
    assert_caches_exactly(
        cached_module(SOURCE, CLS, tmp_path),
        lambda: seeded_model(SOURCE, CLS, "dismantled_mmdit"),
        lambda: latent.clone(),
        lambda: (pooled, text),
    )
