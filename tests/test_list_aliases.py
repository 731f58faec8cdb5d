"""A block list iterated through a local name forward binds once (`layers = self.layers; for
layer in layers:`, Motif-Video's `blocks = self.single_blocks`): the loop is the list's loop.
cache-dit replaces the attribute during the call, so the name reads its wrapper and plain loops
need nothing; a loop with per-block work through such a name becomes per-block steps like any
other. Invented variants of plain_sdpa_dit.py, run under cache-dit on the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from module_loading import load_module
from transformer_cache_runs import assert_caches_exactly, generate_standalone, run_cached, without

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

SOURCE = FIXTURES / "models" / "plain_sdpa_dit.py"
CLS = "PlainSdpaDiT"
LOOP = "        for layer in self.layers:\n            x = layer(x, c, ctx, cos, sin)\n"
ALIASED = {
    "plain": "        layers = self.layers\n        for layer in layers:\n"
    "            x = layer(x, c, ctx, cos, sin)\n",
    "index": "        layers = self.layers\n        for i, layer in enumerate(layers):\n"
    "            x = layer(x, c * (i + 1), ctx, cos, sin)\n",
}


def _variant(tmp_path: Path, name: str) -> Path:
    text = SOURCE.read_text()
    assert LOOP in text
    path = tmp_path / "src" / f"alias_{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace(LOOP, ALIASED[name]))
    return path


@pytest.mark.parametrize(
    ("name", "reasons"), [("plain", set()), ("index", {"loop_index_dependent"})]
)
def test_a_loop_over_a_local_name_for_the_list_is_its_loop(
    tmp_path: Path, name: str, reasons: set[str]
) -> None:
    (t,) = analyze_path(_variant(tmp_path, name), CLS, registry=False).transformers
    assert [b.attr for b in t.block_lists] == ["layers"]
    assert {r.kind for r in t.patch_reasons} == reasons
    plan = t.context_parallel.to_json()["plan"]
    assert "layers.0" in plan and "layers.<last>" in plan  # split and gathered at its blocks


def test_a_name_bound_twice_is_not_an_alias(tmp_path: Path) -> None:
    path = _variant(tmp_path, "plain")
    path.write_text(
        path.read_text().replace(
            "        layers = self.layers\n",
            "        layers = self.layers\n        layers = list(layers)[:1]\n",
        )
    )
    from lsp_server.analysis.model import AnalysisError

    with pytest.raises(AnalysisError, match="not iterated by a loop of a recognised shape"):
        analyze_path(path, CLS, registry=False)


@pytest.mark.parametrize("name", ["plain", "index"])
def test_aliased_loops_run_under_cache_dit(tmp_path: Path, name: str) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    source = _variant(tmp_path, name)
    result = generate_standalone(source, CLS, tmp_path)
    assert result["refused"] == [] and result["review"] == []
    module = load_module(f"alias_{name}_integration", tmp_path / f"{CLS.lower()}_integration.py")
    fixture = load_module(f"alias_{name}", source)

    def model() -> Any:
        torch.manual_seed(0)
        return getattr(fixture, CLS)().eval()

    def latents() -> Any:
        return torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))

    def context() -> tuple[Any, ...]:
        return (torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(2)),)

    def sample(output: Any) -> Any:
        return output["sample"]

    baseline = assert_caches_exactly(module, model, latents, context, sample)
    if name == "index":  # control: without the steps the per-block factor is lost
        path = tmp_path / f"{CLS.lower()}_integration.py"
        install = "block.forward = _layers_step.__get__(block)"
        mutant = without(path, install, "alias_index_no_steps")
        try:
            wrong = [sample(o) for o in run_cached(mutant, model(), 1e-12, latents, extra=context)]
        except TypeError:
            return  # the step's call shape, refused by the block: it stopped
        assert (wrong[-1] - baseline[-1]).abs().max().item() > 1e-3


def test_a_name_read_again_is_not_an_alias() -> None:
    """echo_rope_dit.py (Motif-Video's shape): `refiners = self.refiners` then `for block in
    refiners[: len(refiners) - 1]`: under caching the slice and the length would be those of
    cache-dit's one-element wrapper (the loop would run no block), so the list stays uncached
    and runs after the gather, as before."""
    (t,) = analyze_path(FIXTURES / "models" / "echo_rope_dit.py", None, registry=False).transformers
    assert [b.attr for b in t.block_lists] == ["blocks"]
