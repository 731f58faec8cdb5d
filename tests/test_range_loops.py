"""Block loops that pick the block by index: `for i in range(<count>): x = self.blocks[i](x, c)`.

cache-dit swaps a cached list for a one-element list whose wrapper runs every block (called with
the first call's arguments). The index only picks the block (the callee), so `range(len(...))`
needs nothing; a loop counted by another expression must run `len(self.blocks)` times under
caching: the PatchFunctor's copy of `forward` loops so when the count is provably the list's
length (`loop_bound`), and caching is refused otherwise (`loop_bound_unproven`).

Invented fixture: `tests/fixtures/models/third_party/stride_dit.py`, run through cache-dit with
the generated standalone module on CPU (no-cache control bit-exact; forced caching changes the
output; without the functor the loop indexes past the wrapper).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES
from tests.module_loading import load_module
from tests.transformer_cache_runs import generate_standalone, run_cached, run_plain

STRIDE = FIXTURES / "models" / "third_party" / "stride_dit.py"


def _functor(cls: str) -> dict[str, Any]:
    (t,) = analyze_path(STRIDE, cls, registry=False).to_json()["transformers"]
    assert [b["attr"] for b in t["blockLists"]] == ["blocks"]
    return t["patchFunctor"]


def test_an_index_that_only_picks_the_block_needs_no_functor() -> None:
    assert _functor("StrideLenDiT") == {"needed": False, "reasons": []}


def test_a_count_equal_to_the_lists_length_is_rewritten() -> None:
    functor = _functor("StrideDiT")
    (reason,) = functor["reasons"]
    assert reason["kind"] == "loop_bound" and reason["blockList"] == "blocks"
    assert "`self.depth` is the list's length, `depth`" in reason["message"]


def test_a_count_not_shown_to_be_the_length_refuses_caching(tmp_path: Path) -> None:
    functor = _functor("StridePartialDiT")
    (reason,) = functor["reasons"]
    assert reason["kind"] == "loop_bound_unproven"
    result = _generate("StridePartialDiT", tmp_path)
    (refused,) = [r for r in result["refused"] if r["part"] == "cache"]
    assert "`self.active` is not shown to be the list's length" in refused["reasons"][0]


def _generate(cls: str, out: Path) -> dict[str, Any]:
    return generate_standalone(STRIDE, cls, out)


def _run(module: Any, cls: str, threshold: float) -> list[Any]:
    import torch

    fixture = load_module("stride_dit", STRIDE)
    torch.manual_seed(0)
    return run_cached(module, getattr(fixture, cls)().eval(), threshold)


def test_the_rewritten_loop_runs_under_cache_dit(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from cache_dit import PatchFunctor

    result = _generate("StrideDiT", tmp_path)
    assert any("loop_bound: loops len(self.blocks) times" in a for a in result["applied"])
    module = load_module("stridedit_integration", tmp_path / "stridedit_integration.py")
    fixture = load_module("stride_dit", STRIDE)
    torch.manual_seed(0)
    plain = fixture.StrideDiT().eval()
    baseline = run_plain(plain)
    control = _run(module, "StrideDiT", 1e-12)  # every block computed through the wrapper
    assert all(torch.equal(c, b) for c, b in zip(control, baseline, strict=True))
    forced = _run(module, "StrideDiT", 1.0)  # steps after the warmup reuse the residual
    assert torch.equal(forced[0], baseline[0])
    assert (forced[-1] - baseline[-1]).abs().max().item() > 1e-3
    # control: cache-dit's own check skips the functor for a class outside diffusers; the
    # forward then indexes the one-element wrapper list past its end
    functor = type(module.block_adapter(None, transformer=plain).patch_functor)
    original = functor.is_from_diffusers
    functor.is_from_diffusers = PatchFunctor.is_from_diffusers  # type: ignore[method-assign]
    try:
        with pytest.raises(IndexError):
            _run(module, "StrideDiT", 1e-12)
    finally:
        functor.is_from_diffusers = original  # type: ignore[method-assign]
