"""A loop over part of a block list (`for layer in self.layers[1:]` after `self.layers[0](...)`,
`self.layers[:-1]` before the last block, `range(1, len(self.layers))`): under caching cache-dit
puts one wrapper module in place of the list, which runs every block itself, so the part runs
none of them. The integration generated for such a loop ran and was wrong (the no-cache control
was 0.6-0.7 off); caching is now refused upfront with the reason (`partial_loop`), while the
parallel parts are still generated. A slice that keeps every block (`[:]`, `[0:]`, `[::1]`,
`range(0, len(...))`) is the list's loop. Invented variants of plain_sdpa_dit.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from module_loading import load_module
from transformer_cache_runs import assert_caches_exactly, generate_standalone, run_cached, run_plain

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

SOURCE = FIXTURES / "models" / "plain_sdpa_dit.py"
CLS = "PlainSdpaDiT"
LOOP = "        for layer in self.layers:\n            x = layer(x, c, ctx, cos, sin)\n"
CALL = "(x, c, ctx, cos, sin)"
PARTIAL = {
    "first_apart": (
        f"        x = self.layers[0]{CALL}\n"
        f"        for layer in self.layers[1:]:\n            x = layer{CALL}\n",
        "self.layers[1:]",
    ),
    "last_apart": (
        f"        for layer in self.layers[:-1]:\n            x = layer{CALL}\n"
        f"        x = self.layers[-1]{CALL}\n",
        "self.layers[:-1]",
    ),
    "range_from_1": (
        f"        x = self.layers[0]{CALL}\n"
        f"        for i in range(1, len(self.layers)):\n            x = self.layers[i]{CALL}\n",
        "range(1, len(self.layers))",
    ),
}
WHOLE = {
    "colon": f"        for layer in self.layers[:]:\n            x = layer{CALL}\n",
    "from_0": f"        for layer in self.layers[0:]:\n            x = layer{CALL}\n",
    "range_0": "        for i in range(0, len(self.layers)):\n"
    f"            x = self.layers[i]{CALL}\n",
}


def _variant(tmp_path: Path, name: str, loop: str) -> Path:
    text = SOURCE.read_text()
    assert LOOP in text
    path = tmp_path / "src" / f"part_{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace(LOOP, loop))
    return path


def _latents():
    import torch

    return torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))


def _extra():
    import torch

    return (torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(2)), False)


@pytest.mark.parametrize("name", sorted(PARTIAL))
def test_a_loop_over_part_of_the_list_refuses_caching_upfront(tmp_path: Path, name: str) -> None:
    loop, part = PARTIAL[name]
    source = _variant(tmp_path, name, loop)
    (t,) = analyze_path(source, CLS, registry=False).transformers
    (reason,) = [r for r in t.patch_reasons if r.kind == "partial_loop"]
    assert f"`{part}` runs part of `self.layers`" in reason.message
    assert reason.block_list == "layers"

    result = generate_standalone(source, CLS, tmp_path)
    (refused,) = [r for r in result["refused"] if r["part"] == "cache"]
    assert "partial_loop" in refused["reasons"][0]
    module = load_module(f"part_{name}_integration", tmp_path / f"{CLS.lower()}_integration.py")
    assert "cache" in module.NOT_GENERATED
    assert "contextParallel" not in module.NOT_GENERATED  # the parallel parts are still there
    with pytest.raises(NotImplementedError, match="partial_loop"):
        module.block_adapter(None)


def test_without_the_refusal_the_part_runs_no_block(tmp_path: Path) -> None:
    """The control: cache-dit's wrapper over the whole list on a model whose first block is
    called apart with its own arguments runs every block with those (and the loop over
    `[1:]` none): it runs and is wrong at the no-cache threshold."""
    pytest.importorskip("cache_dit")
    import torch

    whole = _variant(tmp_path, "whole", LOOP)
    generate_standalone(whole, CLS, tmp_path)
    module = load_module("part_whole_integration", tmp_path / f"{CLS.lower()}_integration.py")
    first, _ = PARTIAL["first_apart"]
    apart = first.replace(
        f"        x = self.layers[0]{CALL}", "        x = self.layers[0](x, 2 * c, ctx, cos, sin)"
    )
    assert apart != first
    partial = load_module("part_first_own_args", _variant(tmp_path, "first_own_args", apart))

    def model():
        torch.manual_seed(0)
        return partial.PlainSdpaDiT(depth=4).eval()

    baseline = [o[0] for o in run_plain(model(), _latents, _extra)]
    control = [o[0] for o in run_cached(module, model(), 1e-12, _latents, extra=_extra)]
    assert (control[-1] - baseline[-1]).abs().max().item() > 1e-2


@pytest.mark.parametrize("name", sorted(WHOLE))
def test_a_slice_that_keeps_every_block_is_the_lists_loop(tmp_path: Path, name: str) -> None:
    pytest.importorskip("cache_dit")
    import torch

    source = _variant(tmp_path, name, WHOLE[name])
    (t,) = analyze_path(source, CLS, registry=False).transformers
    assert "partial_loop" not in {r.kind for r in t.patch_reasons}
    result = generate_standalone(source, CLS, tmp_path)
    assert result["refused"] == []
    module = load_module(f"whole_{name}_integration", tmp_path / f"{CLS.lower()}_integration.py")
    models = load_module(f"whole_{name}", source)

    def model():
        torch.manual_seed(0)
        return models.PlainSdpaDiT(depth=4).eval()

    assert_caches_exactly(module, model, _latents, _extra, sample=lambda o: o[0])
