"""A loop that keeps a part of each block's output (`x = blk(x, c, pe)["hidden"]`,
`x = blk(x).sample`; third_party/output_dict_dit.py, invented): cache-dit's wrapper treats what
the blocks return as the streams, so the generated PatchFunctor runs each block through a step
that returns the part the loop keeps. An element of a returned tuple (`[0]`) needs nothing: the
tuple is a ForwardPattern. CP and TP: tests/test_cp_plans_gloo.py (`output_dict`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from module_loading import load_module
from transformer_cache_runs import assert_caches_exactly, generate_standalone, run_cached, without

from lsp_server.analysis import analyze_path

FIXTURE = Path(__file__).parent / "fixtures" / "models" / "third_party" / "output_dict_dit.py"
CLS = "OutputDictDiT"


def _reasons(path: Path) -> set[tuple[str, str | None]]:
    result = analyze_path(path, CLS, registry=False).transformers[0]
    return {(r.kind, r.block_list) for r in result.patch_reasons}


STEPS = {("block_output_access", "layers")}


@pytest.mark.parametrize(
    ("returned", "kept", "reasons"),
    [
        ('{"hidden": x + self.ff(x), "gate": gate}', '["hidden"]', STEPS),
        ("SimpleNamespace(sample=x + self.ff(x))", ".sample", STEPS),
        ("(x + self.ff(x), gate)", "[0]", set()),
    ],
)
def test_the_part_of_the_output_the_loop_keeps(
    tmp_path: Path, returned: str, kept: str, reasons: set[tuple[str, str | None]]
) -> None:
    source = FIXTURE.read_text()
    source = source.replace('{"hidden": x + self.ff(x), "gate": gate}', returned)
    source = source.replace('blk(x, c, pe)["hidden"]', f"blk(x, c, pe){kept}")
    path = tmp_path / "output_dict_dit.py"
    path.write_text(source)
    assert _reasons(path) == reasons


TWO_STATEMENTS = (
    '            x = blk(x, c, pe)["hidden"]\n',
    '            out = blk(x, c, pe)\n            x = out["hidden"]\n',
)


def test_the_part_kept_by_a_second_statement(tmp_path: Path) -> None:
    """`out = blk(x, c, pe)` then `x = out["hidden"]`: the same as one statement; `x = out`
    only renames the stream (nothing to do, not loop work to hoist)."""
    path = tmp_path / "output_dict_dit.py"
    path.write_text(FIXTURE.read_text().replace(*TWO_STATEMENTS))
    assert _reasons(path) == STEPS
    renamed = FIXTURE.read_text().replace('{"hidden": x + self.ff(x), "gate": gate}', "x")
    renamed = renamed.replace(
        TWO_STATEMENTS[0], "            out = blk(x, c, pe)\n            x = out\n"
    )
    path.write_text(renamed)
    assert _reasons(path) == set()


def _tokens() -> Any:
    import torch

    return torch.randn(1, 16, 6, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("two_statements", [False, True], ids=["inline", "two-statements"])
def test_blocks_returning_a_dict_run_under_cache_dit(tmp_path: Path, two_statements: bool) -> None:
    """Two statements: forward also reuses the name `out` after the loop, bound anew there."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    source = FIXTURE
    if two_statements:
        source = tmp_path / "src" / "output_dict_dit.py"
        source.parent.mkdir()
        text = FIXTURE.read_text().replace(*TWO_STATEMENTS)
        source.write_text(
            text.replace("return self.head(x)", "out = self.head(x)\n        return out")
        )
    result = generate_standalone(source, CLS, tmp_path)
    assert result["refused"] == [] and result["review"] == []
    assert any("keeps a part of its output) moved into _layers_step" in a
               for a in result["applied"])  # fmt: skip
    path = tmp_path / f"{CLS.lower()}_integration.py"
    module = load_module(f"output_dict_dit_integration_{two_statements}", path)
    fixture = load_module(f"output_dict_dit_{two_statements}", source)

    def model() -> Any:
        torch.manual_seed(0)
        return getattr(fixture, CLS)().eval()

    assert_caches_exactly(module, model, _tokens)

    # control: without the steps, cache-dit's wrapper subtracts from the dict and stops
    install = "block.forward = _layers_step.__get__(block)"
    mutant = without(path, install, f"output_dict_dit_no_steps_{two_statements}")
    with pytest.raises((TypeError, KeyError)):
        run_cached(mutant, model(), 1e-12, _tokens)


COMBINED = (
    ('{"hidden": x + self.ff(x), "gate": gate}', "self.ff(x)"),
    ('            x = blk(x, c, pe)["hidden"]\n', "            x = x + blk(x, c, pe)\n"),
)


def test_a_residual_added_by_the_loop_runs_inside_each_blocks_step(tmp_path: Path) -> None:
    """`x = x + blk(x, c, pe)` (the block returns an update, the loop adds it): cache-dit's
    wrapper would feed each block the previous block's update and add one residual around all
    of them (silently wrong, caught only by the no-cache control); the step adds it per block."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    source = tmp_path / "src" / "combined_dit.py"
    source.parent.mkdir()
    text = FIXTURE.read_text()
    for old, new in COMBINED:
        assert old in text
        text = text.replace(old, new)
    source.write_text(text)
    assert _reasons(source) == {("per_block_work", "layers")}
    result = generate_standalone(source, CLS, tmp_path)
    assert result["refused"] == [] and result["review"] == []
    path = tmp_path / f"{CLS.lower()}_integration.py"
    module = load_module("combined_dit_integration", path)
    fixture = load_module("combined_dit", source)

    def model() -> Any:
        torch.manual_seed(0)
        return getattr(fixture, CLS)().eval()

    baseline = assert_caches_exactly(module, model, _tokens)
    mutant = without(path, "block.forward = _layers_step.__get__(block)", "combined_no_steps")
    wrong = run_cached(mutant, model(), 1e-12, _tokens)
    assert (wrong[-1] - baseline[-1]).abs().max().item() > 1e-2


def test_a_gather_on_a_block_whose_output_the_loop_adds_is_refused(tmp_path: Path) -> None:
    """plain_sdpa_dit.py with `x = x + layer(...)`: the code after the loop reshapes with the
    grid, so the only gather point is the last block's output, which is the update alone: CP is
    refused with the reason. With a token-local module after the loop (the dict model's `head`)
    the gather goes there and the plan stands."""
    from tests.conftest import FIXTURES

    text = (FIXTURES / "models" / "plain_sdpa_dit.py").read_text()
    text = text.replace("        return x + self.mlp(x)", "        return self.mlp(x) - x")
    text = text.replace(
        "            x = layer(x, c, ctx, cos, sin)\n",
        "            x = x + layer(x, c, ctx, cos, sin)\n",
    )
    path = tmp_path / "update_dit.py"
    path.write_text(text)
    (t,) = analyze_path(path, None, registry=False).transformers
    cp = t.context_parallel.to_json()
    assert cp["approach"] == "none"
    assert any("a gather at the last block would gather the update alone" in w["message"]
               for w in cp["warnings"] if w["code"] == "CDIT220")  # fmt: skip

    combined = tmp_path / "combined_dit.py"
    text = FIXTURE.read_text()
    for old, new in COMBINED:
        text = text.replace(old, new)
    combined.write_text(text)
    (t,) = analyze_path(combined, CLS, registry=False).transformers
    plan = t.context_parallel.to_json()["plan"]
    assert plan["head"]["gather_dim"] == 1 and "layers.<last>" not in plan
