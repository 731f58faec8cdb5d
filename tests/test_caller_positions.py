"""A position module that indexes its table with whatever it is handed (`self.table[pos]`) shows
no sequence axis by itself: the caller's `torch.arange(n)` does. The rows it returns follow the
positions, so the table is split on axis 0 with the tokens (`table_rope_dit.py`; both run on 2
gloo ranks in tests/test_cp_plans_gloo.py with the table split on axis 1 as the control). A new
axis at a negative position (`unsqueeze(-4)`) is placed by the exact rank where every step shows
it (`grid_rope_dit.py`, also run on 2 gloo ranks), and keeps the refusal, with the reason, where
it does not.
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


def test_an_axis_added_at_a_negative_position_is_placed_by_the_exact_rank() -> None:
    """Kandinsky 6's 1-D RoPE: rows of an `outer(arange, freqs)` buffer (rank 2), stacked (3),
    `view(*rope.shape[:-1], 2, 2)` (4), then `unsqueeze(-4)`: a new axis 1, the rows stay on 0.
    Its 3-D grid RoPE has no sequence axis until forward flattens it as it flattens the video."""
    path = diffusers_file("models/transformers/transformer_kandinsky6.py")
    cp = _cp(path, "Kandinsky6Transformer3DModel")
    assert cp["approach"] == "single_point", cp["warnings"]
    audio = cp["plan"]["audio_rope_embeddings"]["0"]
    assert audio["split_dim"] == 0 and audio["split_output"]
    assert "rows picked by the positions the caller builds" in audio["reason"]
    visual = cp["plan"]["visual_transformer_blocks.*"]["vis_rope"]
    assert visual["split_dim"] == 0 and not visual["split_output"]
    assert "`visual_rope.flatten(0, 2)`" in visual["reason"]
    # the text RoPE modules attached with `setattr(self, f"{prefix}_text_rope_embeddings", ...)`
    # are modules, not plain methods a patch would have to reach
    assert not any("text_rope" in p["message"] for p in cp["patches"])


def test_an_axis_added_where_the_rank_is_not_shown_keeps_the_refusal(tmp_path: Path) -> None:
    """The same stacked table read from a file (rank not shown): `unsqueeze(-3)` stays refused."""
    source = (
        TABLE_ROPE.read_text()
        .replace(
            'self.register_buffer("angles", torch.outer(torch.arange(max_len).float(), inv))',
            'self.register_buffer("angles", torch.load("angles.pt"))',
        )
        .replace(".unsqueeze(1)", ".unsqueeze(-3)")
    )
    assert 'torch.load("angles.pt")' in source and ".unsqueeze(-3)" in source
    path = tmp_path / "loaded_rope_dit.py"
    path.write_text(source)
    cp = _cp(path, "StackRopeDiT")
    assert cp["approach"] == "none"
    (warning,) = [w for w in cp["warnings"] if "`self.pos_embed(...)`" in w["message"]]
    assert "adds an axis where the rank decides" in warning["message"]
    # with the buffer built in `__init__`, the rank is read and the rows split on axis 0
    path.write_text(
        source.replace('torch.load("angles.pt")', "torch.outer(torch.arange(max_len).float(), inv)")
    )
    split = _cp(path, "StackRopeDiT")["plan"]["pos_embed"]["0"]
    assert split["split_dim"] == 0


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
