"""Loop and list shapes (issue 12, failure class 8).

- Two lists iterated together by `zip` run interleaved: cache-dit re-runs each cached list as one
  unit, so they are not proposed for caching, and the analysis says why (diffusers' Latte, and the
  invented `duet_video.py`, where cache-dit given the two lists is shown to be wrong).
- A block list declared in a base class by a factory method, run from a helper method of
  `forward` (`relay_dit.py`): found, and cache-dit with the analysis' lists reproduces the model.
- "No transformer found" / "no block list" name the shapes that were tried and what was found.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

from lsp_server.analysis import analyze_path
from lsp_server.analysis.block_lists import LoopBinding, loop_bindings
from lsp_server.analysis.model import AnalysisError
from tests.conftest import FIXTURES, diffusers_file

LATTE = "models/transformers/latte_transformer_3d.py"


def _one(path: Path, cls: str):
    (t,) = analyze_path(path, cls, registry=False).transformers
    return t


# --- loop bindings ----------------------------------------------------------------------------


def _bindings(header: str) -> tuple[list[LoopBinding], list[str]]:
    loop = ast.parse(f"{header}\n    pass").body[0]
    assert isinstance(loop, ast.For)
    return loop_bindings(loop)


@pytest.mark.parametrize(
    ("header", "bindings", "others"),
    [
        ("for b in self.blocks:", [("blocks", "b")], []),
        ("for b in self.blocks[:n]:", [("blocks", "b")], []),
        ("for i, b in enumerate(self.blocks):", [("blocks", "b")], ["i"]),
        ("for b in reversed(self.blocks):", [("blocks", "b")], []),
        ("for i in range(len(self.blocks)):", [("blocks", None)], ["i"]),
        ("for b, skip in zip(self.blocks, skips):", [("blocks", "b")], ["skip"]),
        (
            "for i, (a, b) in enumerate(zip(self.l1, self.l2)):",
            [("l1", "a"), ("l2", "b")],
            ["i"],
        ),
        ("for a, b in zip(self.l1, self.l2):", [("l1", "a"), ("l2", "b")], []),
        ("for pair in zip(self.l1, self.l2):", [("l1", None), ("l2", None)], ["pair"]),
    ],
)
def test_loop_bindings(header: str, bindings: list[tuple[str, str | None]], others: list[str]):
    got, got_others = _bindings(header)
    assert [(b.attr, b.block_var) for b in got] == bindings
    assert got_others == others


# --- interleaved lists ------------------------------------------------------------------------


def _assert_interleaved(t, first: str, second: str) -> None:
    assert t.block_lists == []
    others = {o.attr: o.reason for o in t.other_lists}
    assert set(others) == {first, second}
    for reason in others.values():
        assert "run interleaved in one loop" in reason
        assert f"`{first}`" in reason and f"`{second}`" in reason
        assert "zip" in reason and "one-element list" in reason
        assert "PatchFunctor that merges the lists" in reason
    assert t.patch_functor_needed
    assert [r.kind for r in t.patch_reasons] == ["interleaved_lists"]
    errors = [d for d in t.diagnostics if d.code == "CDIT005"]
    assert len(errors) == 1 and errors[0].severity == "error"
    assert "no block list can be cached" in errors[0].message


def test_latte_interleaved_lists_are_reported_precisely():
    t = _one(diffusers_file(LATTE), "LatteTransformer3DModel")
    _assert_interleaved(t, "transformer_blocks", "temporal_transformer_blocks")
    (reason,) = t.patch_reasons
    text = diffusers_file(LATTE).read_text().splitlines()
    assert text[reason.line - 1].lstrip().startswith("for i, (spatial_block, temp_block)")


def test_latte_cli_no_longer_refuses(capsys):
    from lsp_server.cli import main

    assert main(["analyze", str(diffusers_file(LATTE)), "--json"]) == 0


def test_duet_interleaved_lists_are_reported_precisely():
    t = _one(FIXTURES / "models/duet_video.py", "DuetVideoTransformer")
    _assert_interleaved(t, "spatial_blocks", "temporal_blocks")


def test_the_plan_refuses_cache_with_the_interleaving_reason():
    from lsp_server.codegen import build_plan, parse_plan

    analysis = analyze_path(FIXTURES / "models/duet_video.py", "DuetVideoTransformer")
    answers = {"target": {"kind": "standalone", "path": "/unused/cdit_duet.py"}}
    plan, errors = parse_plan(build_plan(analysis.to_json(), answers))
    assert plan is not None, errors
    (reason,) = plan.refused["cache"]
    assert reason.startswith("cache.blockLists: no block list can be cached:")
    assert "run interleaved in one loop" in reason


# --- helper loop, base-class list, factory methods ----------------------------------------------


def test_relay_helper_loop_base_class_factory_list():
    t = _one(FIXTURES / "models/relay_dit.py", "RelayDiT")
    assert [(b.attr, b.block_class, b.forward_pattern, b.count) for b in t.block_lists] == [
        ("layers", "RelayBlock", "Pattern_3", 6)
    ]
    assert not t.patch_functor_needed, [r.message for r in t.patch_reasons]


# --- messages that say what was tried -----------------------------------------------------------

_NO_LOOP = """
import torch.nn as nn

class Block(nn.Module):
    def forward(self, hidden_states):
        return hidden_states

class Model(nn.Module):
    def __init__(self, depth=4):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(depth)])
        self.norms = nn.ModuleList([nn.LayerNorm(8) for _ in range(depth)])

    def forward(self, hidden_states):
        return self.blocks[0](hidden_states)
"""


def _error(text: str, cls: str | None) -> AnalysisError:
    with pytest.raises(AnalysisError) as info:
        analyze_path(Path("/tmp/cdit_loop_shapes.py"), cls, text=text, registry=False)
    return info.value


def test_no_block_list_message_says_what_was_found_and_tried():
    message = str(_error(_NO_LOOP, "Model"))
    assert "`blocks` is not iterated by a loop of a recognised shape" in message
    assert "`norms` (line 12) holds nn.LayerNorm, not a model-defined block class" in message
    assert "Tried lists:" in message and "factory method" in message
    assert "Tried loops:" in message and "enumerate(zip(self.l1, self.l2))" in message


def test_no_transformer_message_says_what_was_found_and_tried():
    message = str(_error(_NO_LOOP, None))
    assert "no transformer found" in message
    assert "(Model: " in message and "`blocks` is not iterated" in message
    assert "Block:" not in message  # classes without any ModuleList are not listed
    assert "Tried loops:" in message


# --- cache-dit on CPU ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def verifier():
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    spec = importlib.util.spec_from_file_location(
        "verify_novel_fixtures", FIXTURES / "verify_novel_fixtures.py"
    )
    assert spec and spec.loader
    saved = list(sys.path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path[:] = saved


def _model_and_inputs(verifier, module: str, cls: str, inputs):
    import torch

    torch.manual_seed(0)
    model = getattr(verifier.load(module), cls)(dim=32, heads=4, depth=3).eval()
    torch.manual_seed(1)
    return model, inputs(torch)


def test_duet_cached_as_two_lists_is_wrong(verifier):
    """What the refusal prevents: cache-dit given the two interleaved lists changes the output
    even on the first step, where nothing is cached yet (the loop runs once)."""
    import torch

    model, inputs = _model_and_inputs(
        verifier,
        "duet_video",
        "DuetVideoTransformer",
        lambda t: {"hidden_states": t.randn(2, 3, 5, 4), "timestep": t.tensor([10.0, 500.0])},
    )
    with torch.no_grad():
        baseline = model(**inputs)
    try:
        outputs = verifier.run_cached(
            model, inputs, ["spatial_blocks", "temporal_blocks"], ["Pattern_3", "Pattern_3"]
        )
        first_step_same = verifier.same(baseline, outputs[0])
    except Exception:  # a crash is also "not the model"
        first_step_same = False
    assert not first_step_same


def test_relay_cache_dit_with_the_analysis_lists_reproduces(verifier):
    import torch

    t = _one(FIXTURES / "models/relay_dit.py", "RelayDiT")
    model, inputs = _model_and_inputs(
        verifier,
        "relay_dit",
        "RelayDiT",
        lambda t: {"hidden_states": t.randn(2, 6, 4), "timestep": t.tensor([10.0, 500.0])},
    )
    with torch.no_grad():
        baseline = model(**inputs)
    outputs = verifier.run_cached(
        model, inputs, [b.attr for b in t.block_lists], [b.forward_pattern for b in t.block_lists]
    )
    assert len(outputs) == 2
    assert all(verifier.same(baseline, out) for out in outputs)
