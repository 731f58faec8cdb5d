"""Packed sequences: a token stream forward assembles by writing rows at sequence-wide indices
blocks a root split; ids that pick one AdaLN row per token inside the blocks are split with the
tokens; a module after the loops that picks rows by such ids comes after the gather, and rows
selected back by sequence-wide indices (`index_select(1, slots)`) need the whole sequence.

On diffusers' MiniMax H3 (`index_copy` of three modalities, `adaln_indices`, `norm_out(...,
timestep_indices)`, two heads selecting their rows) and the invented `packed_rows_dit.py`, which
tests/test_cp_plans_gloo.py also runs on 2 gloo ranks (Ulysses exact, Ring 3.6e-7; the ids left
whole and the gather after the norm both stop)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from typing import Any

from lsp_server.analysis import analyze_path
from lsp_server.analysis.context_parallel.row_ids import row_id_params
from tests.conftest import FIXTURES, diffusers_file

PACKED_ROWS = FIXTURES / "models" / "third_party" / "packed_rows_dit.py"


def _cp(path: Path, cls: str) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


def _evidence(cp: dict[str, Any]) -> str:
    return "\n".join(e["message"] for e in cp["evidence"])


def test_minimax_h3_packs_rows_so_it_splits_at_the_first_block() -> None:
    cp = _cp(
        diffusers_file("models/transformers/transformer_minimax_h3.py"),
        "MiniMaxH3Transformer3DModel",
    )
    assert cp["approach"] == "single_point"
    assert "" not in cp["plan"]  # it split the 1-D slot indices "on dim 1" at the root
    assert "index_copy" in _evidence(cp)
    plan = cp["plan"]
    assert plan["transformer_blocks.0"]["hidden_states"]["split_dim"] == 1
    ids = plan["transformer_blocks.*"]["adaln_indices"]
    assert (ids["split_dim"], ids["expected_dims"]) == (0, 1)
    assert set(plan["rope"]) == {"0", "1"}
    # gathered before `norm_out(hidden_states, temb, timestep_indices)`, not at a head
    gathers = [k for k, v in plan.items() if "gather_dim" in str(v)]
    assert gathers == ["transformer_blocks.<last>"], gathers


def test_invented_packed_rows_plan() -> None:
    cp = _cp(PACKED_ROWS, "PackedRowsDiT")
    assert cp["approach"] == "single_point", cp["warnings"]
    plan = cp["plan"]
    assert "" not in plan
    assert plan["layers.*"]["level_ids"]["split_dim"] == 0
    assert plan["rope"]["0"]["split_dim"] == 0  # `pos.float()[:, None] * self.inv[None, :]`
    assert "`self.norm_out` picks rows per token with `row_level`" in _evidence(cp)


def test_rows_written_by_an_indexed_assignment_also_block_the_root_split(tmp_path: Path) -> None:
    source = PACKED_ROWS.read_text().replace(
        "tokens = tokens.index_copy(1, image_slots, image_rows)",
        "tokens[:, image_slots] = image_rows",
    )
    assert "tokens[:, image_slots] = image_rows" in source
    path = tmp_path / "written_rows_dit.py"
    path.write_text(source)
    cp = _cp(path, "PackedRowsDiT")
    assert cp["approach"] == "single_point" and "" not in cp["plan"]
    assert "writes rows of the token stream at sequence-wide indices" in _evidence(cp)


def _ids(body: str) -> dict[str, bool]:
    (func,) = ast.parse(textwrap.dedent(body)).body
    assert isinstance(func, ast.FunctionDef)
    return {k: v.by_index_select for k, v in row_id_params(func).items()}


def test_row_ids_are_ids_whose_rows_meet_the_tokens_without_a_new_axis() -> None:
    assert _ids(
        """
        def forward(self, x, table, ids, labels, other):
            shift = table.index_select(0, ids).to(x.dtype)
            y = self.norm(x) + shift
            z = y * (1 + table[labels])
            w = y + table.index_select(0, other)[:, None]  # (B, D) rows given a token axis
            return z + w
        """
    ) == {"ids": True, "labels": False}


def test_rows_picked_for_something_else_are_not_row_ids() -> None:
    assert (
        _ids(
            """
            def forward(self, x, temb, ids):
                emb = temb.index_select(0, ids)
                scale = self.proj(emb)
                return x * scale.unsqueeze(1)
            """
        )
        == {}
    )
