"""Learned absolute positions cut to the stream's length before the blocks
(`self.pos_embed[:, : x.shape[1]]`, `self.pos_table[:n]` with `n = x.size(1)`) block a root split:
every rank would cut the first rows (position drift). Split at the first block instead, after
the positions are added (`learned_pos_dit.py`, run on 2 gloo ranks by
tests/test_cp_plans_gloo.py: exact; the root split as the control is 2.7 off). A table of that
kind the loop body adds to the stream outside the block call (`for ...: x = x + pos`) refuses
CP: from the second block on the stream is this rank's and the table whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

THIRD_PARTY = FIXTURES / "models" / "third_party"


def _cp(path: Path, cls: str) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


@pytest.mark.parametrize("cls", ["LearnedPosDiT", "CutTableDiT"])
def test_a_table_cut_to_the_stream_length_blocks_the_root_split(cls: str) -> None:
    cp = _cp(THIRD_PARTY / "learned_pos_dit.py", cls)
    assert cp["approach"] == "single_point"
    assert "" not in cp["plan"] and cp["plan"]["blocks.0"]["x"]["split_dim"] == 1
    evidence = "\n".join(e["message"] for e in cp["evidence"])
    assert "to a length read from the token stream" in evidence
    assert "position drift" in evidence


def test_the_bundled_demo_mmdit_adds_cut_positions_so_it_splits_at_the_first_block() -> None:
    cp = _cp(FIXTURES / "models" / "demo_mmdit.py", "DemoMMDiTTransformer2DModel")
    assert cp["approach"] == "single_point"
    assert "" not in cp["plan"]


def test_a_cut_table_added_in_the_loop_body_refuses_cp() -> None:
    cp = _cp(THIRD_PARTY / "tap_dit.py", "PosReinjectDiT")
    assert cp["approach"] == "none"
    (warning,) = [w for w in cp["warnings"] if "`x = x + pos`" in w["message"]]
    assert "no hook reaches a statement of forward" in warning["message"]
