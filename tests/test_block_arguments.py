"""How the CP analysis reads what the blocks receive: keyword dicts (`layer(x, **kw)` with `kw =
dict(...)` or a dict literal) are expanded, and values computed inline in the call are read as
locals forward assigns before the loop, so a rotary table cut to the stream's length keeps its per-
block split whichever way it is handed over before the loop (root-splitting instead would count
every rank's positions from 0: position drift, silently wrong). `cis_kw` runs on 2 gloo ranks in
tests/test_cp_plans_gloo.py, with the table split on the wrong axis as its control.
"""

from __future__ import annotations

from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES, diffusers_file

CIS = FIXTURES / "models" / "third_party" / "cis_dit.py"


def _cp(path: Any, cls: str) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


@pytest.mark.parametrize("cls", ["CisDiT", "CisKwDiT"])
def test_a_table_cut_to_length_is_split_per_block_however_it_is_passed(cls: str) -> None:
    cp = _cp(CIS, cls)
    assert cp["approach"] == "single_point"
    assert "" not in cp["plan"]  # no root split
    assert cp["plan"]["layers.*"]["freqs_cis"]["split_dim"] == 0
    assert cp["plan"]["layers.0"]["x"]["split_dim"] == 1


def test_a_rewritten_block_call_keeps_its_assignment() -> None:
    """LTX-2 passes `not isolate_modalities` inline (named like any inline value): the call the
    analysis reads is a copy, and the loop's `hidden_states, audio_hidden_states = block(...)`
    must still be found by its position, or the audio head loses its gather."""
    path = diffusers_file("models/transformers/transformer_ltx2.py")
    cp = _cp(path, "LTX2VideoTransformer3DModel")
    assert cp["plan"]["audio_proj_out"]["reason"] == "output head of `audio_hidden_states`"


def test_a_table_cut_to_the_carried_streams_length_in_the_loop_refuses_cp() -> None:
    """`freqs_cis = self.freqs_cis[: x.shape[1]]` before each block: after the first block `x`
    holds this rank's tokens, so the table would restart at position 0 on every rank."""
    cp = _cp(CIS, "CisLoopDiT")
    assert cp["approach"] == "none" and not cp["plan"]
    (why,) = [w["message"] for w in cp["warnings"] if w["code"] == "CDIT220"]
    assert why.startswith("the loop over `layers` computes `freqs_cis` from the length of `x`")


def test_a_table_cut_inline_in_the_block_call_refuses_cp() -> None:
    """`x = layer(x, self.freqs_cis[: x.shape[1]], c)`: the cut runs in every iteration on the
    stream the loop carries, so from the second block on it reads this rank's length (the plan
    that split it per block stopped on 2 gloo ranks: a table of 4 rows beside 8 queries)."""
    cp = _cp(CIS, "CisInlineDiT")
    assert cp["approach"] == "none" and not cp["plan"]
    (why,) = [w["message"] for w in cp["warnings"] if w["code"] == "CDIT220"]
    assert why.startswith("the loop over `layers` hands each block `self.freqs_cis[:x.shape[1]]")
