"""Position tables forward gets from a call handed the stream's length, and tables the blocks
receive under names that say nothing about positions (`drift_tables_dit.py`).

- A function of the file (`make_angles(x.shape[1], d)`: `arange`), a method (`self._angles(n)`
  with `n = x.size(1)`: `linspace`) or an imported function (diffusers'
  `get_1d_rotary_pos_embed(d, x.shape[1])`) that builds positions from the length it is handed
  blocks the root split: every rank's forward would count its own tokens from 0. The split is
  at the first block, with the table split where the blocks receive it, as for a table built
  inline; an axis read neither from the build nor from the use refuses CP (ImportedTableDiT).
- A table handed to the blocks as `table` or `pe_cache` is split there as it is when the block
  parameter is called `rope`: the decision comes from how it is built, not the name; tables the
  caller hands in as `even` and `odd` are split where the attention's use of them shows the axis.
- A table built at a constant length and picked by position ids (`index_select(0, ids)`) keeps
  the root split, the ids split with the tokens (CutCacheDiT).

tests/test_cp_plans_gloo.py runs each plan on 2 gloo ranks, with the root split or the table left
whole as controls that are wrong."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

DRIFT = FIXTURES / "models" / "third_party" / "drift_tables_dit.py"


def _cp(path: Path, cls: str) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


def _evidence(cp: dict[str, Any]) -> str:
    return "\n".join(e["message"] for e in cp["evidence"])


@pytest.mark.parametrize(
    ("cls", "call", "how"),
    [
        ("FnTableDiT", "make_angles(x.shape[1], self.head_dim)", "torch.arange(length"),
        ("MethodTableDiT", "self._angles(n)", "torch.linspace(0, n - 1, n)"),
        ("ImportedTableDiT", "get_1d_rotary_pos_embed(self.head_dim, x.shape[1]", "arange(pos)"),
    ],
)
def test_a_table_built_by_a_call_handed_the_stream_length_blocks_the_root_split(
    cls: str, call: str, how: str
) -> None:
    cp = _cp(DRIFT, cls)
    assert "" not in cp["plan"]
    evidence = _evidence(cp)
    assert f"`{call}" in evidence and how in evidence
    assert "position drift" in evidence


@pytest.mark.parametrize("cls", ["FnTableDiT", "MethodTableDiT"])
def test_the_table_is_split_where_the_blocks_receive_it_as_an_inline_one_is(cls: str) -> None:
    cp = _cp(DRIFT, cls)
    assert cp["approach"] == "single_point"
    assert cp["plan"]["blocks.0"]["x"]["split_dim"] == 1
    for name in ("cos", "sin"):  # names without "rope"/"freq"/"pos"/"rotary"
        assert cp["plan"]["blocks.*"][name]["split_dim"] == 0
        assert "position tensor at full length" in cp["plan"]["blocks.*"][name]["reason"]


def test_a_table_whose_axis_is_not_read_refuses_cp_rather_than_a_root_split() -> None:
    cp = _cp(DRIFT, "ImportedTableDiT")
    assert cp["approach"] == "none" and cp["plan"] == {}
    refused = "\n".join(w["message"] for w in cp["warnings"])
    assert "`cos` of the blocks of `blocks` gets `cos`" in refused
    assert "read neither from how forward builds it" in refused


@pytest.mark.parametrize(("cls", "param"), [("PlainNameDiT", "table"), ("CutNameDiT", "pe_cache")])
def test_a_table_is_split_at_the_blocks_whatever_the_blocks_call_it(cls: str, param: str) -> None:
    cp = _cp(DRIFT, cls)
    assert cp["approach"] == "single_point"
    spec = cp["plan"]["blocks.*"][param]
    assert spec["split_dim"] == 0 and "`outer` of positions" in spec["reason"]
    assert "`grid_table(rows, cols, self.head_dim)`, handed the length of `h`" in _evidence(cp)


def test_tables_the_caller_hands_are_split_where_their_use_reads_the_axis() -> None:
    cp = _cp(DRIFT, "CallerTableDiT")
    assert cp["approach"] == "single_point"
    for name in ("even", "odd"):
        spec = cp["plan"]["blocks.*"][name]
        assert spec["split_dim"] == 0 and "multiplies a 4-D query" in spec["reason"]
    assert "(the blocks' attention multiplies its queries by it)" in _evidence(cp)


def test_renaming_the_block_parameter_to_a_position_word_changes_no_split(
    tmp_path: Path,
) -> None:
    renamed = tmp_path / "renamed_dit.py"
    text = DRIFT.read_text()
    renamed.write_text(text.replace("table: Tensor", "rope: Tensor").replace("table.c", "rope.c"))
    plain = _cp(DRIFT, "PlainNameDiT")["plan"]["blocks.*"]["table"]
    named = _cp(renamed, "PlainNameDiT")["plan"]["blocks.*"]["rope"]
    assert plain["split_dim"] == named["split_dim"] == 0


def test_a_constant_length_table_picked_by_ids_keeps_the_root_split() -> None:
    cp = _cp(DRIFT, "CutCacheDiT")
    assert cp["approach"] == "root_split"
    root = cp["plan"][""]
    assert root["x"]["split_dim"] == 1
    assert (root["position_ids"]["split_dim"], root["position_ids"]["expected_dims"]) == (0, 1)
    assert "`cos.index_select(0, position_ids)`" in root["position_ids"]["reason"]
    assert "position drift" not in _evidence(cp)


_MODEL = """
import torch
import torch.nn.functional as F
from torch import nn

{helper}

class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, c, angles):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, 2, d // 2).permute(2, 0, 3, 1, 4)
        q, k = q * angles.cos(), k * angles.cos()
        return x + F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d) + c

class HelperDiT(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.embed = nn.Linear(8, dim)
        self.blocks = nn.ModuleList([Block(dim) for _ in range(2)])
        self.out = nn.Linear(dim, 8)
        self.table = nn.Parameter(torch.randn(64, 16))

    def forward(self, x, c):
        h = self.embed(x)
        angles = helper(x.shape[1], 16)
        for block in self.blocks:
            h = block(h, c, angles)
        return self.out(h)
"""

_HELPERS = {
    # positions counted up to the length, through a loop and a list
    "range_loop": """
def helper(n, d):
    rows = []
    for i in range(n):
        rows.append(torch.full((d,), float(i)))
    return torch.stack(rows)
""",
    # a table cut to the length, through a function it calls in turn
    "nested_cut": """
def cut(t, m):
    return t[:m]

def helper(n, d):
    return cut(torch.randn(64, d), n + 0)
""",
    # the length only sizes a constant fill and is checked: no positions
    "size_only": """
def helper(n, d):
    assert n > 0
    return torch.zeros(n, d)
""",
}


@pytest.mark.parametrize(
    ("helper", "drift"), [("range_loop", True), ("nested_cut", True), ("size_only", False)]
)
def test_the_call_is_followed_into_the_function_for_positions_built_from_the_length(
    tmp_path: Path, helper: str, drift: bool
) -> None:
    path = tmp_path / f"{helper}_dit.py"
    path.write_text(_MODEL.format(helper=textwrap.dedent(_HELPERS[helper]).strip()))
    cp = _cp(path, "HelperDiT")
    evidence = _evidence(cp)
    assert ("`helper(x.shape[1], 16)` is handed the length of `x`" in evidence) is drift
    assert ("" in cp["plan"]) is not drift
