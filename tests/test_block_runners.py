"""Blocks handed to a runner (`x = auto_grad_checkpoint(block, x, y, t0)`, `self._run(block,
...)`) are the list's block calls: the block's own arguments are the ones after it. A function
that takes the block without calling it is not a runner.

Invented fixture: `tests/fixtures/models/third_party/runner_dit.py` (PixArt-alpha's original
shape). CP/TP on 2 gloo ranks: tests/test_cp_plans_gloo.py (`runner`, `method_runner`); here the
generated modules run through cache-dit on CPU with the no-cache control.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import AnalysisError, analyze_path
from tests.conftest import FIXTURES
from tests.module_loading import load_module
from tests.transformer_cache_runs import generate_standalone, run_cached, run_plain

RUNNER = FIXTURES / "models" / "third_party" / "runner_dit.py"


@pytest.mark.parametrize("cls", ["RunnerDiT", "MethodRunnerDiT", "RunnerClampDiT"])
def test_a_block_handed_to_a_runner_is_the_lists_call(cls: str) -> None:
    (t,) = analyze_path(RUNNER, cls, registry=False).to_json()["transformers"]
    (blocks,) = t["blockLists"]
    assert blocks["attr"] == "blocks" and blocks["forwardPattern"] == "Pattern_3"
    kinds = [r["kind"] for r in t["patchFunctor"]["reasons"]]
    assert kinds == (["per_block_work"] if cls == "RunnerClampDiT" else [])
    cp = t["contextParallel"]
    # the caption and the modulation reach the blocks whole; the tokens are split at the root
    assert cp["approach"] == "root_split"
    assert cp["plan"][""]["x"]["split_dim"] == 1


def test_a_function_that_only_takes_the_block_is_not_a_runner(tmp_path: Path) -> None:
    source = RUNNER.read_text().replace(
        "    return module(*args, **kwargs)\n", "    return args[0]\n"
    )
    path = tmp_path / "not_a_runner.py"
    path.write_text(source.replace("auto_grad_checkpoint", "keep_first"))
    with pytest.raises(AnalysisError, match="no call of its blocks was found in the loop"):
        analyze_path(path, "RunnerDiT", registry=False)


@pytest.mark.parametrize("cls", ["RunnerDiT", "RunnerClampDiT"])
def test_runner_loops_run_under_cache_dit(cls: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    assert generate_standalone(RUNNER, cls, tmp_path)["refused"] == []
    module = load_module(f"{cls.lower()}_integration", tmp_path / f"{cls.lower()}_integration.py")
    fixture = load_module("runner_dit", RUNNER)

    def model() -> Any:
        torch.manual_seed(0)
        return getattr(fixture, cls)().eval()

    def caption() -> tuple[Any, ...]:
        return (torch.randn(1, 6, 8, generator=torch.Generator().manual_seed(2)),)

    def runs(threshold: float | None) -> list[Any]:
        if threshold is None:
            return run_plain(model(), extra=caption)
        return run_cached(module, model(), threshold, extra=caption)

    baseline = runs(None)
    control = runs(1e-12)
    assert all(torch.equal(c, b) for c, b in zip(control, baseline, strict=True))
    forced = runs(1.0)
    assert (forced[-1] - baseline[-1]).abs().max().item() > 1e-3
