"""Third-party DiT shapes of `tests/fixtures/models/third_party/redteam_dits.py` the analysis got
wrong, each now planned right or refused with its reason.

Attention the block does not build as its own attribute: a block wrapping a layer that holds it
(`self.inner = AdaBlock(...)`, whose `__init__` builds `self.attn = SelfAttention(...)`), or
computing `softmax(q @ k^T) @ v` in its own forward. Before, neither was read: the CP plan split
the tokens with no SDPA route, so each rank attended over its own tokens only (LayerIndexDiT:
0.079 off on 2 gloo ranks, HandSoftmaxOnlyDiT 0.45 off, hourglass_dit's FlatStagesDiT 0.092
off; KeyMaskDiT stopped on its whole-sequence mask). Now the modules a block builds are read a few
levels down (the nested SDPA is routed, a hand-written product refuses the split), and a block
of which no attention was read while it builds something that could hold one refuses it too;
blocks built only of token-local modules (an MLP) keep their split.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

REDTEAM = FIXTURES / "models" / "third_party" / "redteam_dits.py"
HOURGLASS = FIXTURES / "models" / "third_party" / "hourglass_dit.py"
RELAY = FIXTURES / "models" / "relay_pair_dit.py"


def _cp(path: Path, cls: str) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


def _refusals(cp: dict[str, Any]) -> list[str]:
    return [w["message"] for w in cp["warnings"] if w["code"] == "CDIT220"]


@pytest.mark.parametrize("cls", ["LayerIndexDiT", "KeyMaskDiT"])
def test_an_attention_held_by_a_wrapped_layer_is_routed(cls: str) -> None:
    cp = _cp(REDTEAM, cls)
    assert cp["approach"] == "single_point"
    assert [r["class"] for r in cp["sdpaRoutes"]] == ["SelfAttention"]


def test_attention_computed_by_hand_in_the_block_refuses_the_split() -> None:
    cp = _cp(REDTEAM, "HandSoftmaxOnlyDiT")
    assert cp["approach"] == "none"
    assert any("SoftmaxBlock.forward computes attention itself" in m for m in _refusals(cp))


def test_a_block_whose_attention_is_not_read_refuses_the_split() -> None:
    """FlatStagesDiT's stages hold their blocks (and so their attention) in a ModuleList."""
    cp = _cp(HOURGLASS, "FlatStagesDiT")
    assert cp["approach"] == "none"
    assert any("no attention of Stage was read" in m for m in _refusals(cp))


def test_blocks_of_token_local_modules_keep_their_split() -> None:
    cp = _cp(RELAY, "RelayPairDiT")
    assert cp["approach"] == "root_split"
    assert not _refusals(cp)


def test_the_fixed_plans_run_right_on_two_gloo_ranks(tmp_path: Path) -> None:
    """The generated modules match the single-process run on 2 gloo ranks: LayerIndexDiT (the
    nested attention routed), TwoStageDiT (gathered at its output head after the slice by the
    rank's text length), ResidualCallDiT and ScaledLoopDiT (loops combining each block's output
    with the stream, gathered at the head). The control, LayerIndexDiT's module without its SDPA
    route, is off (each rank attends alone)."""
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.cp_runs import offsets, routed_cases

    classes = ("LayerIndexDiT", "TwoStageDiT", "ResidualCallDiT", "ScaledLoopDiT")
    cases = routed_cases(REDTEAM, classes, tmp_path, ("LayerIndexDiT",))
    for name, off in offsets(cases, tmp_path).items():
        assert off > 1e-2 if name.startswith("unrouted") else off < 1e-4, (name, off)


def test_a_slice_by_a_ranks_own_length_keeps_the_gather_at_the_head() -> None:
    """TwoStageDiT joins `torch.cat([txt, img], 1)` between its lists and cuts `x[:,
    txt.shape[1]:]` after them, `txt` being the rank's part the first list handed back. Before,
    the cut counted as needing the whole sequence: the gather went to the last block, and the
    cut of the gathered [t0, i0, t1, i1] by one rank's text length stopped the run on the
    latent's shape. Now the gather is at `final`, after the cut."""
    cp = _cp(REDTEAM, "TwoStageDiT")
    gathers = {k for k, v in cp["plan"].items() if "gather_dim" in v}
    assert gathers == {"final"}


def test_a_block_output_stored_in_a_container_refuses_caching(tmp_path: Path) -> None:
    """KwargsLoopDiT: `kw["ctx"], x = layer(x, **kw)`. Before, read as Pattern_5 with no
    functor: the generated module ran, and its no-cache control was 11 off the plain model (the
    wrapper handed every block the first `ctx`). Now caching is refused at `enable()`."""
    pytest.importorskip("cache_dit")
    from tests.module_loading import load_module
    from tests.transformer_cache_runs import dbcache_config, generate_standalone, seeded_model

    (t,) = analyze_path(REDTEAM, "KwargsLoopDiT", registry=False).to_json()["transformers"]
    (reason,) = [r for r in t["patchFunctor"]["reasons"] if r["kind"] == "stored_block_output"]
    assert "kw['ctx']" in reason["message"]
    generate_standalone(REDTEAM, "KwargsLoopDiT", tmp_path)
    module = load_module("kwargsloop_integration", tmp_path / "kwargsloopdit_integration.py")
    model = seeded_model(REDTEAM, "KwargsLoopDiT", "redteam_dits")
    with pytest.raises(NotImplementedError, match="stored_block_output"):
        module.enable(None, transformer=model, cache_config=dbcache_config(1e-12))


@pytest.mark.parametrize("cls", ["JointCatDiT", "TwoStageDiT"])
def test_block_outputs_unpacked_into_names_keep_caching(cls: str) -> None:
    (t,) = analyze_path(REDTEAM, cls, registry=False).to_json()["transformers"]
    assert "stored_block_output" not in {r["kind"] for r in t["patchFunctor"]["reasons"]}


def test_a_root_split_with_nothing_to_split_refuses(tmp_path: Path) -> None:
    """CheckpointHelperDiT runs its blocks in `self._run_blocks`, written above forward: the
    reading compared the helper's loop line with forward's, found nothing before the blocks and
    planned a root split splitting nothing, with a gather at the last block. Before, its module
    ran on 2 gloo ranks and returned (1, 8, 8, 8) for a (1, 4, 8, 8) latent (the gather joined
    two whole copies); diffusers' Cosmos3OmniTransformer (`_run_decoder_stack`) read the same.
    Now CP is refused, and the module's `enable()` stops with the reason."""
    pytest.importorskip("cache_dit")
    from cache_dit import ParallelismConfig

    from tests.module_loading import load_module
    from tests.transformer_cache_runs import generate_standalone, seeded_model

    cp = _cp(REDTEAM, "CheckpointHelperDiT")
    assert cp["approach"] == "none"
    assert any("found no input of forward to split" in m for m in _refusals(cp))
    assert any("`self._run_blocks(...)`" in m for m in _refusals(cp))
    generate_standalone(REDTEAM, "CheckpointHelperDiT", tmp_path)
    module = load_module("helper_integration", tmp_path / "checkpointhelperdit_integration.py")
    model = seeded_model(REDTEAM, "CheckpointHelperDiT", "redteam_dits")
    config = ParallelismConfig(ulysses_size=2, attention_backend="native")
    with pytest.raises(NotImplementedError, match="found no input of forward to split"):
        module.enable(None, transformer=model, parallelism_config=config)


@pytest.mark.parametrize("cls", ["ResidualCallDiT", "ScaledLoopDiT"])
def test_a_loop_combining_block_outputs_gathers_at_a_head_inside_a_function(cls: str) -> None:
    """`x = x + blk(x, c)` (or `blk(x, c) * self.layer_scale[i]`) rules out a gather at the last
    block; the head `self.final` inside `unpatchify(self.final(x, c), ...)` takes it. Before,
    CP was refused ("no module after the loop can take the gather")."""
    cp = _cp(REDTEAM, cls)
    assert cp["approach"] == "single_point"
    assert {k for k, v in cp["plan"].items() if "gather_dim" in v} == {"final"}
