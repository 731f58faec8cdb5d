"""Blocks that return another token count than they take (hourglass_dit.py: stages that merge
pairs of tokens; poolings, interpolations): DBCache's residual needs one shape, so caching is
refused before anything runs (`token_count_change`). The control: the module generated for the
flat twin (stages keep the token count) caches exactly, and on the hourglass model it stops at
the first cached step."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from lsp_server.analysis.context_parallel.token_windows import token_count_change
from tests.conftest import FIXTURES
from tests.transformer_cache_runs import (
    assert_caches_exactly,
    generate_standalone,
    run_cached,
    seeded_model,
)

HOURGLASS = FIXTURES / "models" / "third_party" / "hourglass_dit.py"


def test_stages_that_merge_tokens_refuse_caching() -> None:
    (t,) = analyze_path(HOURGLASS, "HourglassDiT", registry=False).to_json()["transformers"]
    (reason,) = [r for r in t["patchFunctor"]["reasons"] if r["kind"] == "token_count_change"]
    assert "MergingStage returns another token count" in reason["message"]
    assert "`x.reshape(b, n // 2, 2 * d)`" in reason["message"]
    (flat,) = analyze_path(HOURGLASS, "FlatStagesDiT", registry=False).to_json()["transformers"]
    assert not [r for r in flat["patchFunctor"]["reasons"] if r["kind"] == "token_count_change"]


def _model(cls: str) -> Any:
    return seeded_model(HOURGLASS, cls, "hourglass_dit")


def _tokens() -> Any:
    import torch

    return torch.randn(1, 16, 6, generator=torch.Generator().manual_seed(1))


def test_the_refused_part_and_the_control(tmp_path: Path) -> None:
    pytest.importorskip("cache_dit")
    from tests.module_loading import load_module

    generate_standalone(HOURGLASS, "HourglassDiT", tmp_path / "hourglass")
    refused = load_module(
        "hourglass_integration", tmp_path / "hourglass" / "hourglassdit_integration.py"
    )
    assert "token_count_change" in refused.NOT_GENERATED["cache"]
    with pytest.raises(NotImplementedError, match="returns another token count"):
        refused.block_adapter(None, transformer=_model("HourglassDiT"))
    generate_standalone(HOURGLASS, "FlatStagesDiT", tmp_path / "flat")
    flat = load_module("flat_integration", tmp_path / "flat" / "flatstagesdit_integration.py")
    assert_caches_exactly(flat, lambda: _model("FlatStagesDiT"), _tokens)
    # the flat twin's adapter on the hourglass model: cache-dit stops on the residual's shape
    with pytest.raises(RuntimeError, match="size of tensor"):
        run_cached(flat, _model("HourglassDiT"), 1.0, _tokens)


@pytest.mark.parametrize(
    ("code", "changed"),
    [
        ("x = self.attn(x)\nreturn self.merge(x.reshape(b, n // 2, 2 * d))", True),
        ("return F.avg_pool1d(x.transpose(1, 2), 2).transpose(1, 2)", True),
        ("y = F.interpolate(x.transpose(1, 2), scale_factor=2)\nreturn y.transpose(1, 2)", True),
        # windows cut and put back: the count is kept
        (
            "h = x.reshape(b * (n // 4), 4, d)\nh = self.attn(h).reshape(b, n, d)\nreturn x + h",
            False,
        ),
        ("return x + self.mlp(x), c", False),
    ],
)
def test_which_returns_change_the_token_count(code: str, changed: bool) -> None:
    body = textwrap.indent(f"b, n, d = x.shape\n{code}", "    ")
    func = ast.parse(f"def forward(self, x, c):\n{body}\n").body[0]
    assert isinstance(func, ast.FunctionDef)
    assert (token_count_change(func) is not None) is changed
