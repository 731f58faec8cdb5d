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


def _cp(path: Path | str, cls: str | None = None) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


def test_a_tuple_of_tables_from_a_module_function_is_split_per_element_on_rows() -> None:
    cp = _cp(FREE_ROPE, "FreeRopeDiT")
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


def test_a_table_whose_build_is_not_read_is_split_as_the_queries_use_it() -> None:
    """UsedRopeDiT: the angles come from an `einsum` (no axis read from the build); `turn`
    multiplies `(B, S, H, D)` queries (followed from the block's `(B, S, C)` input through
    `view(b, n, 3, heads, -1).unbind(2)`) by `cos[:, None]`: only an `(S, D)` table broadcasts
    with its features last and a table axis on the tokens, so axis 0, for both elements."""
    (t,) = analyze_path(FREE_ROPE, "UsedRopeDiT", registry=False).to_json()["transformers"]
    rope = t["contextParallel"]["plan"]["stages.*"]["rope"]
    assert [spec["split_dim"] for spec in rope] == [0, 0]
    assert all("multiplies a 4-D query by it" in spec["reason"] for spec in rope)


def test_a_table_read_neither_from_its_build_nor_its_use_refuses_cp(tmp_path: Path) -> None:
    """With `cos.unsqueeze(-2)` instead, `(S, D)` and `(B, S, D)` tables broadcast alike: the
    use does not tell the axis either, so CP is refused, the tuple and its line named (the
    batch-first default, axis 1 for the whole tuple, was generated before)."""
    source = (
        FREE_ROPE.read_text()
        .replace("cos[:, None]", "cos.unsqueeze(-2)")
        .replace("sin[:, None]", "sin.unsqueeze(-2)")
    )
    path = tmp_path / "free_rope_ambiguous.py"
    path.write_text(source)
    (t,) = analyze_path(path, "UsedRopeDiT", registry=False).to_json()["transformers"]
    cp = t["contextParallel"]
    assert cp["approach"] == "none" and cp["plan"] == {}
    (why,) = [w["message"] for w in cp["warnings"] if "tuple of 2 position tensors" in w["message"]]
    assert "`rope`" in why and "read neither from how forward builds it" in why


def test_a_grid_flattened_as_the_latent_is_takes_the_streams_axis() -> None:
    """MirrorGridDiT: an angle grid neither its build (an `einsum`) nor its use
    (`angles.cos().unsqueeze(-2)`) places, flattened by `angles.flatten(1, 2)` beside
    `x = x.flatten(1, 2)`: the stream's axis 1 (2 gloo ranks: `mirror_grid`, with axis 0 as
    the control that stops)."""
    (t,) = analyze_path(FREE_ROPE, "MirrorGridDiT", registry=False).to_json()["transformers"]
    spec = t["contextParallel"]["plan"]["stages.*"]["rope"]
    assert spec["split_dim"] == 1
    assert "laid out as the token stream is (`angles.flatten(1, 2)`)" in spec["reason"]


T = "models/transformers/"


def test_diffusers_tables_read_from_their_use_or_their_layout() -> None:
    """No diffusers table takes a default axis any more. Z-Image's padded `freqs_cis` is read
    where its processor multiplies `(B, S, H, D/2)` queries by `freqs_cis.unsqueeze(2)`;
    Helios's where forward flattens it as the latents (`rotary_emb.flatten(2).transpose(1,
    2)`); Kandinsky 5's through `fractal_flatten`, which flattens the video and the table
    alike. All on axis 1, as before, now with the reason."""
    z = _cp(diffusers_file(T + "transformer_z_image.py"), "ZImageTransformer2DModel")
    for stage in ("noise_refiner", "context_refiner", "layers"):
        spec = z["plan"][f"{stage}.*"]["freqs_cis"]
        assert spec["split_dim"] == 1 and "multiplies a 4-D query" in spec["reason"]
    helios = _cp(diffusers_file(T + "transformer_helios.py"), "HeliosTransformer3DModel")
    spec = helios["plan"]["blocks.*"]["rotary_emb"]
    assert spec["split_dim"] == 1 and "laid out as the token stream is" in spec["reason"]
    k5 = _cp(diffusers_file(T + "transformer_kandinsky.py"), "Kandinsky5Transformer3DModel")
    spec = k5["plan"]["visual_transformer_blocks.*"]["rope"]
    assert spec["split_dim"] == 1 and "laid out by `fractal_flatten`" in spec["reason"]


def test_kandinsky6_sr_sequence_first_table_is_refused_not_split_on_axis_1() -> None:
    """Kandinsky 6 SR flattens its table sequence-first (`_local_patch(visual_rope, ...,
    dim=0).flatten(0, 1)`, the stream batch-first: `dim=1).flatten(1, 2)`), so its rows are on
    axis 0; the batch-first default put the split on axis 1. Not read either way: refused."""
    cp = _cp(diffusers_file(T + "transformer_kandinsky6_sr.py"), "Kandinsky6SRTransformer3DModel")
    assert cp["approach"] == "none"
    assert any("`visual_rope`" in w["message"] for w in cp["warnings"])
