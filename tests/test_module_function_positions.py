"""Position tables made by a plain function of the transformer's file (`cos, sin =
rotary_tables(n, d)`, no class around it) are read through that function, and a tuple forward
packs them into (`rope = (cos, sin)`) gets one split per element. Before, neither was read and the
table got the batch-first default (axis 1): the feature axis of an `(S, D)` table. The invented
`free_rope_dit.py` runs on 2 gloo ranks (tests/test_cp_plans_gloo.py, `free_rope`), with the
table split on axis 1 as the control that stops.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES, diffusers_file

FREE_ROPE = FIXTURES / "models" / "third_party" / "free_rope_dit.py"


def _cp(path: Path | str) -> dict[str, Any]:
    (t,) = analyze_path(path, registry=False).to_json()["transformers"]
    return t["contextParallel"]


def test_a_tuple_of_tables_from_a_module_function_is_split_per_element_on_rows() -> None:
    cp = _cp(FREE_ROPE)
    assert cp["approach"] == "single_point"
    rope = cp["plan"]["stages.*"]["rope"]
    assert isinstance(rope, list) and len(rope) == 2
    assert all(spec["split_dim"] == 0 for spec in rope)
    assert all("in `rotary_tables`" in spec["reason"] for spec in rope)


def test_ace_step_rotary_pair_is_split_on_its_rows() -> None:
    """ACE-Step builds `(cos, sin)` with `_ace_step_rotary_freqs(seq_len, ...)` (a module-level
    function over `get_1d_rotary_pos_embed`): `(S, D)` tables, split on axis 0, one per element
    (axis 1 before: the head dimension)."""
    cp = _cp(diffusers_file("models/transformers/ace_step_transformer.py"))
    rope = cp["plan"]["layers.*"]["position_embeddings"]
    assert [spec["split_dim"] for spec in rope] == [0, 0]
    assert "_ace_step_rotary_freqs" in rope[0]["reason"]


def test_a_tuple_of_tables_whose_axes_are_not_read_refuses_cp(tmp_path: Path) -> None:
    """The same model with the angles from an `einsum` (no axis read): one guessed split could
    not fit the tuple's elements (it was axis 1 for the whole tuple), so CP is refused, with the
    tuple and its line named."""
    source = FREE_ROPE.read_text().replace(
        "angles = torch.outer(steps, inv)", 'angles = torch.einsum("i,j->ij", steps * 1.0, inv)'
    )
    path = tmp_path / "free_rope_einsum.py"
    path.write_text(source)
    cp = _cp(path)
    assert cp["approach"] == "none" and cp["plan"] == {}
    (why,) = [w["message"] for w in cp["warnings"] if "tuple of 2 position tensors" in w["message"]]
    assert "`rope`" in why and "not read" in why
