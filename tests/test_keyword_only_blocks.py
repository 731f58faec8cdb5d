"""Blocks that take their streams only by keyword (`def forward(self, *, img, txt, ...)`, called
`blk(img=img, txt=txt, ...)`): the streams and the pattern come from the keyword-only parameters,
and since cache-dit calls every block of a cached list with its streams positionally, the
generated PatchFunctor runs each block through a step that takes them positionally
(tests/fixtures/models/third_party/keyword_mmdit.py, an invented two-list model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from module_loading import load_module
from transformer_cache_runs import generate_standalone, run_cached, run_plain, without

from lsp_server.analysis import analyze_path

FIXTURE = Path(__file__).parent / "fixtures" / "models" / "third_party" / "keyword_mmdit.py"
CLS = "KeywordMMDiT"


def test_keyword_only_streams_give_the_pattern_and_the_reason() -> None:
    result = analyze_path(FIXTURE, CLS, registry=False).transformers[0]
    lists = {b.attr: b for b in result.block_lists}
    assert lists["pair_blocks"].forward_pattern == "Pattern_0"
    assert lists["solo_blocks"].forward_pattern == "Pattern_3"
    evidence = [e.message for e in lists["pair_blocks"].evidence]
    assert any(m.startswith("PairBlock.forward(*, img, txt, temb, rope)") for m in evidence)
    reasons = result.patch_reasons
    assert {(r.kind, r.block_list) for r in reasons} == {
        ("keyword_only_streams", "pair_blocks"),
        ("keyword_only_streams", "solo_blocks"),
    }
    assert "`img`, `txt` only by keyword" in reasons[0].message


def test_a_positional_stream_with_keyword_only_inputs_is_a_keyword_call(tmp_path: Path) -> None:
    """`def forward(self, img, *, temb, rope)`: the stream binds positionally and the rest travel
    as keywords through cache-dit's wrapper, so only the call's `img=img` needs moving (the
    plain keyword-binding fix), no step."""
    source = FIXTURE.read_text().replace(
        "def forward(self, *, img: Tensor, temb", "def forward(self, img: Tensor, *, temb"
    )
    path = tmp_path / "keyword_mmdit.py"
    path.write_text(source)
    result = analyze_path(path, CLS, registry=False).transformers[0]
    assert {(r.kind, r.block_list) for r in result.patch_reasons} == {
        ("keyword_only_streams", "pair_blocks"),
        ("keyword_binding", "solo_blocks"),
    }


def _model(fixture: Any) -> Any:
    import torch

    torch.manual_seed(0)
    return getattr(fixture, CLS)().eval()


def _latents() -> Any:
    import torch

    return torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))


def _prompt() -> tuple[Any, ...]:
    import torch

    return (torch.randn(1, 6, 12, generator=torch.Generator().manual_seed(2)),)


def test_keyword_only_blocks_run_under_cache_dit(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    result = generate_standalone(FIXTURE, CLS, tmp_path)
    assert result["refused"] == [] and result["review"] == []
    assert any("takes its streams only by keyword) moved into _pair_blocks_step" in a
               for a in result["applied"])  # fmt: skip
    path = tmp_path / f"{CLS.lower()}_integration.py"
    module = load_module("keyword_mmdit_integration", path)
    fixture = load_module("keyword_mmdit", FIXTURE)

    def runs(threshold: float | None, generated: Any = module) -> list[Any]:
        if threshold is None:
            return run_plain(_model(fixture), _latents, _prompt)
        return run_cached(generated, _model(fixture), threshold, _latents, extra=_prompt)

    baseline = runs(None)
    control = runs(1e-12)  # every block computed through cache-dit's wrapper and the steps
    assert all(torch.equal(c, b) for c, b in zip(control, baseline, strict=True))
    forced = runs(1.0)  # steps after the warmup reuse the residual: caching ran
    assert (forced[-1] - baseline[-1]).abs().max().item() > 1e-3

    # control: without the steps installed, cache-dit's positional call of the blocks fails
    install = "block.forward = _pair_blocks_step.__get__(block)"
    mutant = without(path, install, "keyword_mmdit_no_steps")
    with pytest.raises(TypeError, match="positional argument"):
        runs(1e-12, mutant)
