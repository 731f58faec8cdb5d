"""Research code of the HunyuanVideo family gets its rotary `cos` / `sin` tables from the caller,
hands them to the blocks as one tuple, applies them through a file function that unpacks the tuple
with a generator (`cos, sin = (t[None, :, None, :] for t in tables)`) and rotates in a closure,
splits heads with einops (`q, k, v = rearrange(qkv, "B L (K H D) -> K B L H D", K=3)`) and
normalises them in one statement (`q, k = q_norm(q), k_norm(k)`); its single-stream blocks cut the
joint stream by the text length forward hands them (`q[:, :-txt_len]`); every block's arguments
are written out in a list in the loop (`args = [img, txt, ...]`, `block(*args)`).
`third_party/harbor_video.py` has those shapes.

Before: the tables' use was not read (each of the four shapes above hid it), so they reached the
blocks whole while the streams were split, and the text length cut this rank's joint tokens with
the whole text's length; both stopped at the first call. Now the tables are split per element on
axis 0 where the blocks receive them (Ulysses and Ring exact on 2 gloo ranks; the same module
without that split stops), and a whole length that cuts tokens inside blocks refuses CP upfront.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

SOURCE = FIXTURES / "models" / "third_party" / "harbor_video.py"
HERE = Path(__file__).resolve().parent
TABLE_SPLIT = """            "freqs_cis": [
                _ContextParallelInput(split_dim=0),
                _ContextParallelInput(split_dim=0),
            ],
"""


def _cp(cls: str) -> dict[str, Any]:
    return analyze_path(SOURCE, cls, registry=False).to_json()["transformers"][0]["contextParallel"]


def test_caller_tables_in_a_tuple_are_split_per_element_where_the_blocks_receive_them() -> None:
    cp = _cp("HarborDualModel")
    assert cp["approach"] == "single_point"
    specs = cp["plan"]["double_blocks.*"]["freqs_cis"]
    assert [s["split_dim"] for s in specs] == [0, 0]
    assert "`turn` multiplies a 4-D query by it (`cos`" in specs[0]["reason"]


def test_a_whole_text_length_cutting_joint_tokens_refuses_cp() -> None:
    cp = _cp("HarborLeanModel")
    assert cp["approach"] == "none"
    assert any(
        "get `txt_seq_len`, a length measured on the whole `txt`" in e["message"]
        and "`q[:, :-txt_len]`" in e["message"]
        for e in cp["evidence"]
    )
    assert _cp("HarborVideoModel")["approach"] == "none"


def test_the_split_tables_match_one_process_on_two_gloo_ranks(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.cp_runs import routed_cases
    from tests.gloo_launch import run_two_ranks
    from tests.redteam_cp_worker import build

    cases = routed_cases(SOURCE, ["HarborDualModel"], tmp_path)
    module = Path(cases["HarborDualModel"]["module"])
    text = module.read_text()
    assert TABLE_SPLIT in text
    control = tmp_path / "whole_tables.py"
    control.write_text(text.replace(TABLE_SPLIT, ""))
    cases["ring"] = {**cases["HarborDualModel"], "ring": True}
    cases["whole tables"] = {**cases["HarborDualModel"], "module": str(control)}
    got = run_two_ranks(HERE / "redteam_cp_worker.py", cases, tmp_path)
    model, inputs = build(str(SOURCE), "HarborDualModel")
    with torch.no_grad():
        baseline = model(**inputs)
    for name in ("HarborDualModel", "ring"):
        assert (got[name] - baseline).abs().max().item() < 1e-5, name
    assert isinstance(got["whole tables"], str)  # stopped on the tables' rows


def test_block_arguments_written_out_in_the_loop_need_no_functor() -> None:
    """`args = [img, txt, vec, ...]` then `block(*args)`: the call's arguments, rebuilt from the
    streams at every block. It was read as loop-invariant work to hoist, which would hand every
    block the first block's streams (diffusers' Kandinsky 6 packs its block arguments the same
    way)."""
    (t,) = analyze_path(SOURCE, "HarborVideoModel", registry=False).to_json()["transformers"]
    assert t["patchFunctor"] == {"needed": False, "reasons": []}
    spec = importlib.util.find_spec("diffusers")
    if spec is not None and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations)))
        k6 = root / "models" / "transformers" / "transformer_kandinsky6.py"
        (t,) = analyze_path(k6, "Kandinsky6Transformer3DModel", registry=False).to_json()[
            "transformers"
        ]
        assert not [r for r in t["patchFunctor"]["reasons"] if r["kind"] == "loop_invariant"]


def test_caching_the_two_lists_reproduces_the_model(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.module_loading import load_module
    from tests.transformer_cache_runs import assert_caches_exactly, cached_module, seeded_model

    fixture = load_module("harbor_inputs", SOURCE)
    latent, _, *rest = fixture.example_inputs(None, torch.Generator().manual_seed(1))
    assert_caches_exactly(
        cached_module(SOURCE, "HarborVideoModel", tmp_path),
        lambda: seeded_model(SOURCE, "HarborVideoModel", "harbor_video"),
        lambda: latent.clone(),
        lambda: tuple(rest),
    )
