"""Blocks kept in an `nn.Sequential` that forward iterates one by one (third_party/
sequential_dit.py, invented): a block list, which the generated integration makes an
`nn.ModuleList` of the same modules (cache-dit asserts ModuleLists); a Sequential that forward
calls whole (`self.stem(x)`) is not one. CP and TP of the same module: tests/test_cp_plans_gloo.py
(`sequential`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from module_loading import load_module
from transformer_cache_runs import generate_standalone, run_cached, run_plain, without

from lsp_server.analysis import analyze_path
from lsp_server.analysis.model import AnalysisError

FIXTURE = Path(__file__).parent / "fixtures" / "models" / "third_party" / "sequential_dit.py"
CLS = "SequentialDiT"


def test_an_iterated_sequential_is_a_block_list_and_a_called_one_is_not() -> None:
    result = analyze_path(FIXTURE, CLS, registry=False).transformers[0]
    (blocks,) = result.block_lists
    assert (blocks.attr, blocks.container, blocks.forward_pattern) == (
        "blocks",
        "Sequential",
        "Pattern_3",
    )
    assert "makes it an nn.ModuleList of the same modules" in blocks.evidence[0].message
    assert blocks.to_json()["container"] == "Sequential"


def test_a_sequential_also_called_whole_is_not_a_block_list(tmp_path: Path) -> None:
    """Made a ModuleList, `self.blocks(x)` would stop working: not a list, and the error says
    what was found."""
    source = FIXTURE.read_text().replace(
        "        return self.head(x)", "        return self.head(x) + 0 * self.blocks(x)"
    )
    path = tmp_path / "sequential_dit.py"
    path.write_text(source)
    with pytest.raises(AnalysisError, match=r"`self.blocks` \(line \d+\) is an nn.Sequential"):
        analyze_path(path, CLS, registry=False)


def _tokens() -> Any:
    import torch

    return torch.randn(1, 16, 8, generator=torch.Generator().manual_seed(1))


def test_sequential_blocks_run_under_cache_dit(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    result = generate_standalone(FIXTURE, CLS, tmp_path)
    assert result["refused"] == [] and result["review"] == []
    module = load_module("sequential_dit_integration", tmp_path / f"{CLS.lower()}_integration.py")
    fixture = load_module("sequential_dit", FIXTURE)

    def model() -> Any:
        torch.manual_seed(0)
        return getattr(fixture, CLS)().eval()

    reference = model()
    keys = sorted(reference.state_dict())
    baseline = run_plain(reference, _tokens)
    cached = model()
    control = run_cached(module, cached, 1e-12, _tokens)
    assert all(torch.equal(c, b) for c, b in zip(control, baseline, strict=True))
    assert isinstance(cached.blocks, torch.nn.ModuleList)  # what cache-dit asserts
    assert sorted(cached.state_dict()) == keys  # the checkpoint still loads
    forced = run_cached(module, model(), 1.0, _tokens)
    assert (forced[-1] - baseline[-1]).abs().max().item() > 1e-3  # caching ran

    # control: without the conversion cache-dit refuses the Sequential
    path = tmp_path / f"{CLS.lower()}_integration.py"
    convert = "transformer.blocks = torch.nn.ModuleList(transformer.blocks)"
    mutant = without(path, convert, "sequential_dit_no_conversion")
    with pytest.raises(AssertionError):
        run_cached(mutant, model(), 1e-12, _tokens)
