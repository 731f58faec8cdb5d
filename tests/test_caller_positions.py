"""A position module that indexes its table with whatever it is handed (`self.table[pos]`) shows
no sequence axis by itself: the caller's `torch.arange(n)` does. The rows it returns follow the
positions, so the table is split on axis 0 with the tokens (`table_rope_dit.py`; both run on 2
gloo ranks in tests/test_cp_plans_gloo.py with the table split on axis 1 as the control). A new
axis whose position depends on the rank (`unsqueeze(-4)`) keeps the refusal, with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES, diffusers_file

TABLE_ROPE = FIXTURES / "models" / "third_party" / "table_rope_dit.py"


def _cp(path: Path, cls: str | None) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


@pytest.mark.parametrize(("cls", "attr"), [("TableRopeDiT", "rope"), ("StackRopeDiT", "pos_embed")])
def test_rows_picked_by_the_callers_arange_are_split_on_axis_0(cls: str, attr: str) -> None:
    cp = _cp(TABLE_ROPE, cls)
    assert cp["approach"] == "single_point"
    split = cp["plan"][attr]["0"]
    assert split["split_dim"] == 0 and split["split_output"]
    assert "rows picked by the positions the caller builds" in split["reason"]


def test_an_axis_added_where_the_rank_decides_keeps_the_refusal_with_its_reason() -> None:
    path = diffusers_file("models/transformers/transformer_kandinsky6.py")
    cp = _cp(path, "Kandinsky6Transformer3DModel")
    assert cp["approach"] == "none"
    (audio,) = [w for w in cp["warnings"] if "audio_rope_embeddings" in w["message"]]
    assert "rows picked by the positions the caller builds" in audio["message"]
    assert "`unsqueeze(-4)` adds an axis where the rank decides" in audio["message"].replace(
        "rope.view(*rope.shape[:-1], 2, 2).", ""
    )


def test_an_id_tensor_the_caller_passes_through_is_not_read_as_positions(tmp_path: Path) -> None:
    """The same module handed a forward parameter (ids of any shape) stays refused."""
    source = (
        TABLE_ROPE.read_text()
        .replace("        pos = torch.arange(x.shape[1], device=x.device)\n", "")
        .replace(
            "    def forward(self, x: Tensor, t: Tensor) -> Tensor:\n        x = self.embed(x)"
            ".flatten(2).transpose(1, 2)\n        c = self.time(t[:, None])\n        rope",
            "    def forward(self, x: Tensor, t: Tensor, pos: Tensor) -> Tensor:\n"
            "        x = self.embed(x).flatten(2).transpose(1, 2)\n"
            "        c = self.time(t[:, None])\n        rope",
        )
    )
    assert "t: Tensor, pos: Tensor" in source
    path = tmp_path / "ids_rope_dit.py"
    path.write_text(source)
    cp = _cp(path, "TableRopeDiT")
    assert cp["approach"] == "none"
    assert any("`self.rope(...)`" in w["message"] for w in cp["warnings"])
