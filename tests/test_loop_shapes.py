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
from typing import Any

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
    """The first list of the `zip` is cached; the other runs inside its per-block steps."""
    _assert_stepped(t, first, second)
    # the stream is regrouped (frames <-> tokens) between the two lists' blocks: no CP plan
    assert t.context_parallel.approach == "none"
    whys = [w.message for w in t.context_parallel.warnings if w.code == "CDIT220"]
    assert f"the loop over `{first}` regroups `hidden_states` between blocks" in whys[0]
    # every other reason is listed too (duet_video's blocks use nn.MultiheadAttention)
    assert all("regroups" in w or "MultiheadAttention" in w for w in whys), whys


def _assert_stepped(t, first: str, second: str) -> None:
    assert [b.attr for b in t.block_lists] == [first]
    others = {o.attr: o.reason for o in t.other_lists}
    assert set(others) == {second}
    assert f"runs interleaved with `{first}` in one loop" in others[second]
    assert f"inside step k of `{first}`" in others[second]
    assert t.patch_functor_needed
    kinds = [r.kind for r in t.patch_reasons]
    assert kinds[0] == "interleaved_lists" and t.patch_reasons[0].block_list == first
    assert not [d for d in t.diagnostics if d.code == "CDIT005"]


def test_latte_interleaved_lists_are_reported_precisely():
    t = _one(diffusers_file(LATTE), "LatteTransformer3DModel")
    _assert_stepped(t, "transformer_blocks", "temporal_transformer_blocks")
    # the stream is regrouped between the lists' blocks: the frames are split instead
    # (tests/test_axis_splits.py)
    assert t.context_parallel.approach == "root_split"
    assert t.context_parallel.factorised.routed == ("temporal_transformer_blocks",)
    reason = t.patch_reasons[0]
    text = diffusers_file(LATTE).read_text().splitlines()
    assert text[reason.line - 1].lstrip().startswith("for i, (spatial_block, temp_block)")


def test_latte_cli_no_longer_refuses(capsys):
    from lsp_server.cli import main

    assert main(["analyze", str(diffusers_file(LATTE)), "--json"]) == 0


def test_duet_interleaved_lists_are_reported_precisely():
    t = _one(FIXTURES / "models/duet_video.py", "DuetVideoTransformer")
    _assert_interleaved(t, "spatial_blocks", "temporal_blocks")


_SIDE_LEAD = """
import torch.nn as nn

class Block(nn.Module):
    def forward(self, hidden_states):
        return hidden_states * 2

class Model(nn.Module):
    def __init__(self, depth=4):
        super().__init__()
        self.probes = nn.ModuleList([Block() for _ in range(depth)])
        self.blocks = nn.ModuleList([Block() for _ in range(depth)])

    def forward(self, hidden_states):
        feats = []
        for probe, block in zip(self.probes, self.blocks):
            feats.append(probe(hidden_states))
            hidden_states = block(hidden_states)
        return hidden_states, feats
"""


def test_interleaved_lists_whose_steps_cannot_be_built_refuse_cache(tmp_path: Path):
    """The first list of the zip only feeds a side output (`feats.append(probe(x))`): its
    blocks cannot become steps that carry the stream, so the cache part is refused with the
    reason before anything runs (no functor that would run the loop once)."""
    from lsp_server.codegen import build_plan, generate, parse_plan

    source = tmp_path / "side_lead.py"
    source.write_text(_SIDE_LEAD)
    analysis = analyze_path(source, "Model", registry=False)
    answers = {"target": {"kind": "standalone", "path": str(tmp_path / "cdit_side.py")}}
    plan, errors = parse_plan(build_plan(analysis.to_json(), answers))
    assert plan is not None, errors
    result = generate(plan, manifest_path=tmp_path / ".cdit" / "generated.json")
    (refused,) = [r for r in result.to_json()["refused"] if r["part"] == "cache"]
    (reason,) = refused["reasons"]
    assert "`probes` has index-dependent loop work that cannot be moved" in reason, reason
    assert "`... = probe(...)`" in reason, reason


def test_the_duet_plan_generates_per_block_steps_over_both_lists(tmp_path: Path):
    from lsp_server.codegen import build_plan, generate, parse_plan, write

    analysis = analyze_path(FIXTURES / "models/duet_video.py", "DuetVideoTransformer")
    answers = {"target": {"kind": "standalone", "path": str(tmp_path / "cdit_duet.py")}}
    plan, errors = parse_plan(build_plan(analysis.to_json(), answers))
    assert plan is not None, errors
    assert plan.generates_cache and "cache" not in plan.refused
    assert not plan.generates_cp  # the regroup between blocks
    result = generate(plan, manifest_path=tmp_path / ".cdit" / "generated.json")
    assert result.ok, result.to_json()
    write(result)
    text = (tmp_path / "cdit_duet.py").read_text()
    assert "for spatial_block in self.spatial_blocks:" in text
    assert "self.temporal_blocks[i](hidden_states, temb_temporal)" in text
    assert "CDIT-REVIEW" not in text


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


def test_duet_generated_steps_reproduce_the_model_under_cache_dit(
    verifier, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The generated module caches `spatial_blocks` whose steps also run `temporal_blocks[k]`:
    through cache-dit's cached-blocks wrapper (every block computed) the output is the model's,
    where the two lists handed to cache-dit as they are change it on the first step (above)."""
    import cache_dit
    import torch
    from cache_dit import PatchFunctor
    from cache_dit.envs import ENV

    from lsp_server.codegen import build_plan, generate, parse_plan, write
    from tests.module_loading import load_module

    analysis = analyze_path(FIXTURES / "models/duet_video.py", "DuetVideoTransformer")
    answers = {"target": {"kind": "standalone", "path": str(tmp_path / "cdit_duet.py")}}
    plan, errors = parse_plan(build_plan(analysis.to_json(), answers))
    assert plan is not None, errors
    write(generate(plan, manifest_path=tmp_path / ".cdit" / "generated.json"))
    module = load_module(f"cdit_duet_{abs(hash(tmp_path))}", tmp_path / "cdit_duet.py")

    monkeypatch.setattr(ENV, "CACHE_DIT_PATCH_FUNCTOR_DISABLE_DIFFUSERS_CHECK", False)

    def run(functor: bool) -> list[float]:
        model, inputs = _model_and_inputs(
            verifier,
            "duet_video",
            "DuetVideoTransformer",
            lambda t: {"hidden_states": t.randn(2, 3, 5, 4), "timestep": t.tensor([10.0, 500.0])},
        )
        with torch.no_grad():
            baseline = model(**inputs)
        config = cache_dit.DBCacheConfig(
            num_inference_steps=3,
            Fn_compute_blocks=1,
            Bn_compute_blocks=0,
            residual_diff_threshold=1e-12,  # every block computed, through cache-dit's wrapper
            max_warmup_steps=0,
        )
        if not functor:  # cache-dit's own check instead of the module's: skipped here
            kind = module.DuetVideoPatchFunctor  # (an adapter built on `model` patches it)
            monkeypatch.setattr(kind, "is_from_diffusers", PatchFunctor.is_from_diffusers)
        module.enable(None, transformer=model, cache_config=config)
        with torch.no_grad():
            diffs = [(model(**inputs) - baseline).abs().max().item() for _ in range(3)]
        cache_dit.disable_cache(model)
        return diffs

    exact = run(functor=True)  # the generated functor applies itself outside diffusers
    # the first call computes every block; later ones may reuse the identical residual
    assert exact[0] == 0.0 and max(exact) < 1e-3, exact
    # control: the same module with its PatchFunctor skipped (cache-dit's default outside
    # diffusers) leaves the zip loop, which the one-element wrapper runs once
    wrong = run(functor=False)
    assert wrong[0] > 0.1, wrong


def test_block_lists_one_module_down_are_named_in_the_error(tmp_path: Path) -> None:
    """A model whose forward hands the tokens to a backbone module that runs the blocks: the
    outer class has no list of its own; the error names the module and the list it runs."""
    source = tmp_path / "nested_dit.py"
    source.write_text(
        "import torch\n"
        "from torch import nn\n\n\n"
        "class Block(nn.Module):\n"
        "    def __init__(self, d):\n"
        "        super().__init__()\n"
        "        self.proj = nn.Linear(d, d)\n\n"
        "    def forward(self, x, c):\n"
        "        return x + self.proj(x + c)\n\n\n"
        "class Backbone(nn.Module):\n"
        "    def __init__(self, d, depth):\n"
        "        super().__init__()\n"
        "        self.layers = nn.ModuleList([Block(d) for _ in range(depth)])\n\n"
        "    def forward(self, x, c):\n"
        "        for layer in self.layers:\n"
        "            x = layer(x, c)\n"
        "        return x\n\n\n"
        "class NestedDiT(nn.Module):\n"
        "    def __init__(self, d=8, depth=2):\n"
        "        super().__init__()\n"
        "        self.backbone = Backbone(d, depth)\n\n"
        "    def forward(self, x, c):\n"
        "        return self.backbone(x, c)\n"
    )
    with pytest.raises(AnalysisError) as info:
        analyze_path(source, "NestedDiT", registry=False)
    assert "its forward runs `self.backbone` (Backbone)" in info.value.message
    assert "block list `layers`: analyze Backbone (the module generated" in info.value.message


@pytest.mark.parametrize(
    ("container", "loop", "kind"),
    [
        ("nn.Sequential(*[Block(d) for _ in range(depth)])", "x = self.blocks(x)", "Sequential"),
        (
            'nn.ModuleDict({f"b{i}": Block(d) for i in range(depth)})',
            "for block in self.blocks.values():\n            x = block(x)",
            "ModuleDict",
        ),
    ],
)
def test_blocks_in_other_containers_are_named_in_the_error(
    tmp_path: Path, container: str, loop: str, kind: str
) -> None:
    """cache-dit caches an nn.ModuleList run block by block: a model keeping its blocks in an
    nn.Sequential called whole, or in an nn.ModuleDict, is told which container is in the way
    (in the file-wide error too, where a class with nothing found says nothing)."""
    source = tmp_path / "container_dit.py"
    source.write_text(
        "from torch import nn\n\n\n"
        "class Block(nn.Module):\n"
        "    def __init__(self, d):\n"
        "        super().__init__()\n"
        "        self.proj = nn.Linear(d, d)\n\n"
        "    def forward(self, x):\n"
        "        return x + self.proj(x)\n\n\n"
        "class ContainerDiT(nn.Module):\n"
        "    def __init__(self, d=8, depth=2):\n"
        "        super().__init__()\n"
        f"        self.blocks = {container}\n\n"
        "    def forward(self, x):\n"
        f"        {loop}\n"
        "        return x\n"
    )
    for cls in ("ContainerDiT", None):
        with pytest.raises(AnalysisError) as info:
            analyze_path(source, cls, registry=False)
        assert f"`self.blocks` (line 16) is an nn.{kind} of Block" in info.value.message


def test_a_wrapper_running_the_dit_one_module_down_is_integrated_through_it(
    tmp_path: Path,
) -> None:
    """The file's transformer is the inner class (the wrapper has no list of its own); the
    generated `enable(pipe)` finds it inside `pipe.transformer`, and caching the wrapped model
    through it keeps the no-cache control bit-exact while forced caching changes the output."""
    import types

    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.module_loading import load_module
    from tests.transformer_cache_runs import generate_standalone, run_cached, run_plain

    path = FIXTURES / "models" / "third_party" / "wrapped_dit.py"
    (t,) = analyze_path(path, None, registry=False).transformers
    assert t.class_name == "InnerDiT"
    with pytest.raises(AnalysisError) as info:
        analyze_path(path, "WrappedDiT", registry=False)
    assert "its forward runs `self.dit` (InnerDiT)" in info.value.message
    assert generate_standalone(path, "InnerDiT", tmp_path)["refused"] == []
    module = load_module("innerdit_integration", tmp_path / "innerdit_integration.py")
    fixture = load_module("wrapped_dit", path)

    def wrapped() -> Any:
        torch.manual_seed(0)
        return fixture.WrappedDiT().eval()

    outer = wrapped()
    assert module._transformer_of(types.SimpleNamespace(transformer=outer)) is outer.dit
    baseline = run_plain(wrapped())

    def cached(threshold: float) -> list[Any]:
        model = wrapped()
        inner = module._transformer_of(types.SimpleNamespace(transformer=model))
        return run_cached(module, inner, threshold, call=model)  # enabled inside, called outside

    control = cached(1e-12)
    assert all(torch.equal(c, b) for c, b in zip(control, baseline, strict=True))
    forced = cached(1.0)
    assert (forced[-1] - baseline[-1]).abs().max().item() > 1e-3


_HANDED = """
import torch.nn as nn


class Block(nn.Module):
    def forward(self, x):
        return x


def run_blocks(blocks, x):
    for block in blocks:
        x = block(x)
    return x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(4)])

    def forward(self, x):
        return run_blocks(self.blocks, x)
"""


def test_a_list_handed_to_a_function_that_loops_is_named_in_the_error():
    """The loop of a module-level function forward hands the list to is not read: the error says
    where the list goes and what to do."""
    message = str(_error(_HANDED, "Model"))
    assert "forward hands it to `run_blocks(...)` (line 22)" in message
    assert "run the loop in `forward` or in a method of the model" in message
