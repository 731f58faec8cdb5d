"""Block loops of `tests/fixtures/models/third_party/cache_redteam_dits.py` under cache-dit: each
generated standalone module either reproduces the plain model (no-cache control bit-identical,
forced caching changes the output) or refuses caching at `enable()` with its reason.

Five were wrong or crashed before, each fixed as a class and proven by a control:

- `ControlEveryDiT` (`enumerate(self.blocks, start=1)`): the steps counted from 0, so the control
  residuals went after the wrong blocks (no-cache control 9.6 off the plain model). The step now
  adds the loop's start to its index.
- `SkipLayerDiT` (`continue` in the body): the step kept the `continue`, outside any loop, and
  generation stopped on a module that does not parse. A `continue` of the block loop now returns
  the streams from the step (the block skipped).
- `FlagBlockDiT` (`rope if blk.use_rope else None` in the call): reading the block's own
  attribute was not seen as varying per block; under caching `blk` is cache-dit's wrapper
  (AttributeError). Reading the block variable other than by calling it now counts as per-block.
- `SingleTupleDiT` (`(x,) = blk(x, c)`): cache-dit's wrapper hands back the tensor, which the
  unpacking split along the batch axis (the output lost its batch axis, no error). The loop now
  runs through steps that unpack the block's own output; `TupleIndexDiT` (`x = blk(x, c)[0]`),
  which took the batch's first row, too.
- `StreamCondDiT` (`cond = c + self.pool(x.mean(1)).tanh()` before `x = blk(x, cond)`): the
  conditioning computed from the stream was read as loop-invariant and hoisted (no-cache control
  321.6 off). A block input computed from the stream is per-block work now.

Three were refused and now run through per-block steps: token routing (`TokenRouteDiT`, and
`IndexRouteDiT` by `index_select` / `index_copy`): the step takes the routed stream whole and runs
the router, the gather, the block and the scatter; text-first blocks (`TextFirstDiT`, and
`TextLeadDiT` handing the text back first): the step takes the image first, and the list runs as
the other of Pattern_0 / Pattern_1. What a step cannot carry stays refused
(`tests/test_routed_steps.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES
from tests.module_loading import load_module
from tests.transformer_cache_runs import (
    assert_caches_exactly,
    dbcache_config,
    generate_standalone,
    run_cached,
    run_plain,
    seeded_model,
    tokens,
    without,
)

SOURCE = FIXTURES / "models" / "third_party" / "cache_redteam_dits.py"
STEP_INSTALL = "block.forward = _blocks_step.__get__(block)"
COPY_INSTALL = "transformer.forward = _patched_forward.__get__(transformer)"


def _extra(cls: str) -> Callable[[], tuple[Any, ...]]:
    import torch

    def control() -> tuple[Any, ...]:
        return (torch.randn(1, 16, 4, generator=torch.Generator().manual_seed(4)),)

    def context() -> tuple[Any, ...]:
        return (torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(3)),)

    return {
        "SkipLayerDiT": lambda: ((1,),),
        "ControlEveryDiT": control,
        "TextFirstDiT": context,
        "TextLeadDiT": context,
        "DictTextFirstDiT": context,
    }.get(cls, lambda: ())


def _model(cls: str) -> Callable[[], Any]:
    return lambda: seeded_model(SOURCE, cls, "cache_redteam_dits")


def _generated(cls: str, tmp_path: Path) -> tuple[Any, Path, dict[str, Any]]:
    result = generate_standalone(SOURCE, cls, tmp_path)
    path = tmp_path / f"{cls.lower()}_integration.py"
    return load_module(f"{cls.lower()}_integration", path), path, result


def _reasons(cls: str) -> dict[str, str]:
    (t,) = analyze_path(SOURCE, cls, registry=False).to_json()["transformers"]
    return {r["kind"]: r["message"] for r in t["patchFunctor"]["reasons"]}


def _mutant(path: Path, old: str, new: str, name: str) -> Any:
    text = path.read_text()
    assert old in text, f"{old!r} is not in {path}"
    mutant = path.with_name(f"{name}.py")
    mutant.write_text(text.replace(old, new))
    return load_module(name, mutant)


@pytest.mark.parametrize(
    "cls",
    [
        "RecordOutDiT",
        "SkipLayerDiT",
        "AutocastLoopDiT",
        "ControlEveryDiT",
        "CheckpointDiT",
        "FlagBlockDiT",
        "SingleTupleDiT",
        "TupleIndexDiT",
        "StreamCondDiT",
        "TokenRouteDiT",
        "IndexRouteDiT",
        "TextFirstDiT",
        "TextLeadDiT",
    ],
)
def test_the_generated_module_reproduces_the_model_under_cache_dit(
    cls: str, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    module, _, result = _generated(cls, tmp_path)
    # the cache part (CP may refuse a plan the steps cannot carry: `stepped_cp_plan`)
    assert "cache" not in [r["part"] for r in result["refused"]]
    assert_caches_exactly(module, _model(cls), tokens, _extra(cls))


@pytest.mark.parametrize(
    ("cls", "kind", "says"),
    [
        ("ReversedDiT", "reversed_loop", "runs its blocks last to first"),
        ("EvenBlocksDiT", "partial_loop", "`self.blocks[::2]` runs part of `self.blocks`"),
        ("EarlyExitDiT", "early_exit", "can stop before its last block (`break`"),
    ],
)
def test_loops_cache_dit_cannot_rerun_are_refused_at_enable(
    cls: str, kind: str, says: str, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    assert says in _reasons(cls)[kind]
    module, _, result = _generated(cls, tmp_path)
    assert [r["part"] for r in result["refused"]] == ["cache"]
    with pytest.raises(NotImplementedError, match=kind):
        module.enable(None, transformer=_model(cls)(), cache_config=dbcache_config(1e-12))


def test_an_enumerate_start_is_the_steps_index_start(tmp_path: Path) -> None:
    """Control: the step counting from 0 again puts the residuals after other blocks."""
    pytest.importorskip("cache_dit")
    path = _generated("ControlEveryDiT", tmp_path)[1]
    index = 'i = step.__dict__["_cdit_index"]'
    assert f"    {index} + 1\n" in path.read_text()
    from_zero = _mutant(path, f"{index} + 1", index, "controlevery_from_zero")
    extra = _extra("ControlEveryDiT")
    baseline = run_plain(_model("ControlEveryDiT")(), tokens, extra)
    control = run_cached(from_zero, _model("ControlEveryDiT")(), 1e-12, tokens, extra=extra)
    assert (control[0] - baseline[0]).abs().max().item() > 1e-2


def test_a_continue_of_the_block_loop_returns_the_streams_from_the_step(tmp_path: Path) -> None:
    """Control: the step running the block anyway is off (the named block is not skipped)."""
    pytest.importorskip("cache_dit")
    path = _generated("SkipLayerDiT", tmp_path)[1]
    skip = "    if i in skip_layers:\n        return x\n"
    assert skip in path.read_text()
    runs_all = _mutant(path, skip, "", "skiplayer_runs_all")
    extra = _extra("SkipLayerDiT")
    baseline = run_plain(_model("SkipLayerDiT")(), tokens, extra)
    control = run_cached(runs_all, _model("SkipLayerDiT")(), 1e-12, tokens, extra=extra)
    assert (control[0] - baseline[0]).abs().max().item() > 1e-2


def test_reading_the_block_in_its_call_is_per_block_work(tmp_path: Path) -> None:
    """`blk.use_rope` in the call: per-block steps read it from each block. Control: without
    the steps installed every block gets the table (the wrapper passes one call's arguments)."""
    pytest.importorskip("cache_dit")
    assert "blk.use_rope" in _reasons("FlagBlockDiT")["loop_index_dependent"]
    path = _generated("FlagBlockDiT", tmp_path)[1]
    assert "rope if step.use_rope else None" in path.read_text()
    unstepped = without(path, "block.forward = _blocks_step.__get__(block)", "flag_unstepped")
    baseline = run_plain(_model("FlagBlockDiT")())
    control = run_cached(unstepped, _model("FlagBlockDiT")(), 1e-12)
    assert (control[0] - baseline[0]).abs().max().item() > 1e-2


def test_a_one_element_unpack_of_the_block_output_runs_through_steps(tmp_path: Path) -> None:
    """Control: the model's own loop under cache-dit (the forward copy not installed) unpacks
    the wrapper's tensor along its batch axis."""
    pytest.importorskip("cache_dit")
    assert "`[0]`" in _reasons("SingleTupleDiT")["block_output_access"]
    path = _generated("SingleTupleDiT", tmp_path)[1]
    assert "    (x,) = type(step).forward(step, x, c)\n" in path.read_text()
    uncopied = without(
        path, "transformer.forward = _patched_forward.__get__(transformer)", "tuple_uncopied"
    )
    baseline = run_plain(_model("SingleTupleDiT")())
    control = run_cached(uncopied, _model("SingleTupleDiT")(), 1e-12)
    assert control[0].shape != baseline[0].shape


def test_element_zero_taken_by_a_second_statement_runs_through_steps(tmp_path: Path) -> None:
    """`out = blk(x, c)` then `x = out[0]`: the same as one statement."""
    pytest.importorskip("cache_dit")
    text = SOURCE.read_text()
    one = "            x = blk(x, c)[0]\n"
    assert one in text
    source = tmp_path / "cache_redteam_two.py"
    source.write_text(text.replace(one, "            out = blk(x, c)\n            x = out[0]\n"))
    (t,) = analyze_path(source, "TupleIndexDiT", registry=False).to_json()["transformers"]
    assert [r["kind"] for r in t["patchFunctor"]["reasons"]] == ["block_output_access"]
    generate_standalone(source, "TupleIndexDiT", tmp_path)
    module = load_module("index_two", tmp_path / "tupleindexdit_integration.py")
    assert_caches_exactly(
        module, lambda: seeded_model(source, "TupleIndexDiT", "cache_redteam_two"), tokens
    )


def test_element_zero_of_a_one_output_list_runs_through_steps(tmp_path: Path) -> None:
    """`x = blk(x, c)[0]` on blocks returning a one-element tuple: cache-dit's wrapper of a
    Pattern_3 list hands back the tensor. Control: the model's own loop under cache-dit (the
    forward copy not installed) takes the batch's first row."""
    pytest.importorskip("cache_dit")
    assert "`[0]`" in _reasons("TupleIndexDiT")["block_output_access"]
    path = _generated("TupleIndexDiT", tmp_path)[1]
    assert "    x = type(step).forward(step, x, c)[0]\n" in path.read_text()
    uncopied = without(
        path, "transformer.forward = _patched_forward.__get__(transformer)", "index_uncopied"
    )
    baseline = run_plain(_model("TupleIndexDiT")())
    control = run_cached(uncopied, _model("TupleIndexDiT")(), 1e-12)
    assert control[0].shape != baseline[0].shape


def test_a_block_input_computed_from_the_stream_is_per_block_work(tmp_path: Path) -> None:
    """Control: without the steps installed every block gets the loop's `c` unpooled."""
    pytest.importorskip("cache_dit")
    assert "`cond = c + self.pool(x.mean(1)).tanh()`" in _reasons("StreamCondDiT")["per_block_work"]
    path = _generated("StreamCondDiT", tmp_path)[1]
    step = "    cond = c + self.pool(x.mean(1)).tanh()\n    x = type(step).forward(step, x, cond)"
    assert step in path.read_text()
    unstepped = without(path, STEP_INSTALL, "cond_unstepped")
    baseline = run_plain(_model("StreamCondDiT")())
    control = run_cached(unstepped, _model("StreamCondDiT")(), 1e-12)
    assert (control[0] - baseline[0]).abs().max().item() > 1e-2


@pytest.mark.parametrize(
    ("cls", "step"),
    [
        (
            "TokenRouteDiT",
            "    routed = type(step).forward(step, torch.gather(x, 1, idx), c)\n"
            "    x = x.scatter(1, idx, routed)\n    return x\n",
        ),
        (
            "IndexRouteDiT",
            "    h = h.index_copy(\n"
            "        1, keep, type(step).forward(step, h.index_select(1, keep), c=temb)\n"
            "    )\n    return h\n",
        ),
    ],
)
def test_a_routed_stream_runs_whole_through_each_step(cls: str, step: str, tmp_path: Path) -> None:
    """The step takes the stream whole and routes it itself. Control: the model's own loop
    under cache-dit (neither the steps nor the forward copy installed) runs every block on the
    first block's tokens and writes them back once."""
    pytest.importorskip("cache_dit")
    assert "per_block_work" in _reasons(cls)
    path = _generated(cls, tmp_path)[1]
    assert step in path.read_text()
    text = path.read_text()
    for code in (STEP_INSTALL, COPY_INSTALL):
        assert code in text
        text = text.replace(code, "pass")
    unpatched = path.with_name(f"{cls.lower()}_unpatched.py")
    unpatched.write_text(text)
    baseline = run_plain(_model(cls)())
    control = run_cached(load_module(unpatched.stem, unpatched), _model(cls)(), 1e-12)
    assert (control[0] - baseline[0]).abs().max().item() > 1e-2


@pytest.mark.parametrize(
    ("cls", "pattern", "step"),
    [
        ("TextFirstDiT", "Pattern_0", "def _blocks_step(step, x, ctx, c):"),
        ("TextLeadDiT", "Pattern_1", "def _blocks_step(step, img, txt, temb):"),
    ],
)
def test_a_text_first_block_runs_through_a_step_taking_the_image_first(
    cls: str, pattern: str, step: str, tmp_path: Path
) -> None:
    """The step's first stream is the image (cache-dit decides caching on the first), and the
    list runs as the pattern through the step. Control: the block's own pattern with the step
    hands the text on as the image (the streams' token counts differ: it raises)."""
    pytest.importorskip("cache_dit")
    (t,) = analyze_path(SOURCE, cls, registry=False).to_json()["transformers"]
    assert [b["forwardPattern"] for b in t["blockLists"]] == [pattern]
    path = _generated(cls, tmp_path)[1]
    assert step in path.read_text()
    own = {"Pattern_0": "Pattern_1", "Pattern_1": "Pattern_0"}[pattern]
    mutant = _mutant(
        path, f"ForwardPattern.{pattern}", f"ForwardPattern.{own}", f"{cls.lower()}_own"
    )
    with pytest.raises(RuntimeError, match="must match the size"):
        run_cached(mutant, _model(cls)(), 1e-12, extra=_extra(cls))


def test_a_text_first_block_handing_back_a_dict_is_refused(tmp_path: Path) -> None:
    """The dict's two streams are not read as the block's outputs (its pattern reads one
    stream), so the step would carry the image as a loop value: refused, not reordered."""
    pytest.importorskip("cache_dit")
    module, _, result = _generated("DictTextFirstDiT", tmp_path)
    (refused,) = result["refused"]
    assert refused["part"] == "cache" and "the loop carries img" in refused["reasons"][0]
    with pytest.raises(NotImplementedError, match="the loop carries img"):
        model = _model("DictTextFirstDiT")()
        module.enable(None, transformer=model, cache_config=dbcache_config(1e-12))
