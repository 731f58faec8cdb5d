"""The use reading of a position table's sequence axis through integer indices (`t[..., 0]`)
and through functions called on the queries (`q * cos + rotate(q) * sin`).

`turned_pairs_dit.py` (invented): `PairTableDiT` reads an `(S, D/2, 2)` table as
`rope[..., 0].unsqueeze(1)` (axis 0); `SwapCallDiT` multiplies its sines by the return value of
a processor method and of a module-level function that hand the queries back in their layout
(axis 1, for both elements); `HeadsFirstDiT`'s method hands them back heads-first: refused. The
first two run on 2 gloo ranks (tests/test_cp_plans_gloo.py: `index_rope`, `rotate_call`, with
the table split on a wrong axis as the control that fails).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from lsp_server.analysis import analyze_path
from lsp_server.analysis.context_parallel.query_layout import Layout
from lsp_server.analysis.context_parallel.table_broadcast import TableView, solve_axis
from lsp_server.analysis.context_parallel.value_layouts import ValueLayouts
from tests.conftest import FIXTURES, diffusers_file

TURNED = FIXTURES / "models" / "third_party" / "turned_pairs_dit.py"
T = "models/transformers/"


def _cp(path: Path | str, cls: str | None = None) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


def _layout(code: str, **names: Layout) -> Layout | None:
    return ValueLayouts(dict(names)).layout(ast.parse(code, mode="eval").body)


def test_integer_indices_are_followed_on_queries_and_tables() -> None:
    """`qkv[0]` takes the leading axis away, `pairs[..., 1]` the last; a subscript that picks
    or cuts the tokens leaves no layout. A table read as `t[..., 0].unsqueeze(1)` against
    `(B, S, H, D/2)` pairs fits one rank only (3: `(S, D/2, 2)`): axis 0."""
    assert _layout("qkv[0]", qkv=Layout(5, 3)) == Layout(4, 2)
    assert _layout("pairs[..., 1]", pairs=Layout(5, 1)) == Layout(4, 1)
    assert _layout("q[:, None]", q=Layout(4, 2)) == Layout(5, 3)
    assert _layout("x[:, 0]", x=Layout(3, 1)) is None
    assert _layout("x[:, :n]", x=Layout(3, 1)) is None
    pairs = TableView(None, (("index", ("...", "int")), ("unsqueeze", 1)))
    assert solve_axis(pairs, Layout(4, 1)) == 0
    # the rows a bounded slice picks are not the whole table's: not read
    cut = TableView(None, (("index", ("cut", "new")),))
    assert solve_axis(cut, Layout(4, 1)) is None


def test_a_pairs_table_indexed_on_its_last_axis_is_split_on_its_rows() -> None:
    cp = _cp(TURNED, "PairTableDiT")
    assert cp["approach"] == "single_point"
    spec = cp["plan"]["stages.*"]["rope"]
    assert spec["split_dim"] == 0
    assert "`turn_pairs` multiplies a 4-D query by it (`cos`" in spec["reason"]
    assert "(`sin`" in spec["reason"]


def test_layout_ops_spelled_as_torch_functions_and_rotations() -> None:
    """`torch.transpose(q, 1, 2)` moves the tokens as `q.transpose(1, 2)` does (before, any
    `torch.<f>(q)` kept q's layout); `stack` adds an axis; `flip` keeps the layout unless it
    reverses the tokens."""
    q = Layout(4, 1)
    assert _layout("torch.transpose(q, 1, 2)", q=q) == Layout(4, 2)
    assert _layout("torch.stack([-b, a], dim=-1).flatten(3)", a=q, b=q) == q
    assert _layout("q.flip(-1)", q=q) == q
    assert _layout("q.flip(1)", q=q) is None
    assert _layout("t.reshape(*q.shape)", t=q, q=q) == q


def test_reductions_branches_and_reshapes_back_to_another_rank() -> None:
    """One reader for the use reading and the windows of called functions: a reduction over
    another axis than the tokens' drops it (keeps it with `keepdim`), so Kandinsky 6 SR's
    `apply_rotary` (`(rope * x_).sum(dim=-1).reshape(*x.shape)`) hands x's layout back; a
    reshape to x's shape keeps x's layout only where the tokens are on x's axis; a conditional
    expression reads as its branches when they agree; `view_as_real` adds an axis."""
    x = Layout(4, 1)
    pairs = "(rope * x.reshape(*x.shape[:-1], -1, 1, 2)).sum(dim=-1)"
    assert _layout(pairs, x=x) == Layout(5, 1)
    assert _layout(f"{pairs}.reshape(*x.shape)", x=x) == x
    assert _layout("t.reshape(*x.shape)", t=Layout(4, 2), x=x) is None
    assert _layout("x.sum(dim=-1, keepdim=True)", x=x) == x
    assert _layout("x.mean(1)", x=x) is None
    assert _layout("torch.sum(x, dim=0)", x=x) == Layout(3, 0)
    assert _layout("a if flag else b", a=x) == x
    assert _layout("a if flag else b", a=x, b=Layout(4, 2)) is None
    assert _layout("q / scale", q=x) == x
    assert _layout("torch.view_as_real(q)", q=x) == Layout(5, 1)


def test_sines_met_by_a_called_rotation_of_the_queries_are_read() -> None:
    """`self._swap_halves(q) * sin` (a method: `flip`, the module-level `_quarter_turn`,
    `flip`) and `_quarter_turn(k) * sin`: both hand the queries back in their layout, so both
    sine uses are read, axis 1, as the cosines' (`q * cos.unsqueeze(2)`)."""
    cp = _cp(TURNED, "SwapCallDiT")
    rope = cp["plan"]["blocks.*"]["rope"]
    assert [spec["split_dim"] for spec in rope] == [1, 1]
    reason = rope[1]["reason"]
    assert reason.count("(`sin.unsqueeze(2)`") == 2  # the method's line and the function's


def test_a_called_function_that_moves_the_tokens_leaves_the_use_unread() -> None:
    """`HeadsFirstDiT`: the method returns `_quarter_turn(x).transpose(1, 2)`, not the layout it
    was handed: the sines' use is not read, CP is refused (the tuple and its line named)."""
    cp = _cp(TURNED, "HeadsFirstDiT")
    assert cp["approach"] == "none" and cp["plan"] == {}
    (why,) = [w["message"] for w in cp["warnings"] if "tuple of 2 position tensors" in w["message"]]
    assert "`rope`" in why and "read neither from how forward builds it" in why


def test_an_imported_rotation_is_followed(tmp_path: Path) -> None:
    """The rotation imported from a sibling module (`from .turns import _quarter_turn`)."""
    source = TURNED.read_text()
    start = source.index("def _quarter_turn")
    end = source.index("class SwapProcessor")
    (tmp_path / "turns.py").write_text("import torch\n\n\n" + source[start:end])
    model = source[:start] + source[end:]
    model = model.replace(
        "from torch.nn import functional as F\n",
        "from torch.nn import functional as F\n\nfrom .turns import _quarter_turn\n",
    )
    path = tmp_path / "imported_turn_dit.py"
    path.write_text(model)
    rope = _cp(path, "SwapCallDiT")["plan"]["blocks.*"]["rope"]
    assert [spec["split_dim"] for spec in rope] == [1, 1]
    assert rope[1]["reason"].count("(`sin.unsqueeze(2)`") == 2


def _attention_method_variant(tmp_path: Path, body: str) -> Path:
    """`turned_pairs_dit.py` with the processors' rotation a method of the attention module they
    serve, called as `attn.turn(q)`; `body` is the method's return statement."""
    source = TURNED.read_text()
    for old, new in (
        ("self._swap_halves(q) * sin.unsqueeze(2)", "attn.turn(q) * sin.unsqueeze(2)"),
        ("_quarter_turn(k) * sin.unsqueeze(2)", "attn.turn(k) * sin.unsqueeze(2)"),
        ("self._swap_halves(q) * sin.unsqueeze(1)", "attn.turn(q) * sin.unsqueeze(1)"),
        ("self._swap_halves(k) * sin.unsqueeze(1)", "attn.turn(k) * sin.unsqueeze(1)"),
        (
            "    def forward(self, x, rope):\n        return self.processor(self, x, rope)\n",
            f"    def turn(self, x):\n        {body}\n\n"
            "    def forward(self, x, rope):\n        return self.processor(self, x, rope)\n",
        ),
    ):
        assert old in source, old
        source = source.replace(old, new)
    path = tmp_path / "attention_turn_dit.py"
    path.write_text(source)
    return path


def test_a_method_of_the_served_attention_module_is_read(tmp_path: Path) -> None:
    """A processor's `attn.turn(q)` runs the method of the attention module it serves (bound by
    the `attn` parameter of `__call__`). Keeping the queries' layout: read, axis 1 for both
    elements. Handing them back heads-first (`.transpose(1, 2)`): the sines' use is unread and CP
    is refused (before, any `attn.<name>(q)` counted as a module keeping the layout, and
    `HeadsFirstDiT` split its sines on axis 0, its cosines on axis 1)."""
    keeps = _attention_method_variant(tmp_path, "return _quarter_turn(x)")
    rope = _cp(keeps, "SwapCallDiT")["plan"]["blocks.*"]["rope"]
    assert [spec["split_dim"] for spec in rope] == [1, 1]
    moves = _attention_method_variant(tmp_path, "return _quarter_turn(x).transpose(1, 2)")
    cp = _cp(moves, "HeadsFirstDiT")
    assert cp["approach"] == "none" and cp["plan"] == {}
    assert any("tuple of 2 position tensors" in w["message"] for w in cp["warnings"])


def test_joyimage_edit_plus_table_is_read_through_its_local_rotate_half() -> None:
    """JoyImage Edit Plus multiplies its sines by `_rotate_half(xq)`, a function defined inside
    `_apply_rotary_emb_batched` (`reshape(*x.shape[:-1], -1, 2).unbind(-1)`, `stack([-x_imag,
    x_real], dim=-1).flatten(3)`): the queries' layout comes back, so both `(B, S, D)` tables
    are read on axis 1 (refused before: the sines' use was not read). The per-sample method
    `_get_rotary_pos_embed_for_range` is still reported as a patch, so CP is not generated."""
    cp = _cp(diffusers_file(T + "transformer_joyimage_edit_plus.py"))
    rope = cp["plan"]["double_blocks.*"]["image_rotary_emb"]
    assert [spec["split_dim"] for spec in rope] == [1, 1]
    assert "`_apply_rotary_emb_batched` multiplies a 4-D query by it (`sin`" in rope[1]["reason"]
    assert any("_get_rotary_pos_embed_for_range" in p["message"] for p in cp["patches"])


def test_prx_table_indexed_on_its_last_axes_stays_refused() -> None:
    """PRX meets its table as `freqs_cis[..., 0] * xq_[..., 0]`, the queries followed to `(B, H,
    S, D/2, 1)`: now read through the indices, but a 4-, 5- and 6-axis table broadcast alike
    (no unit axis pins the rank), naming axes 0, 1 and 2: not read, CP refused, never guessed."""
    view = TableView(None, (("index", ("...", "int")),))
    assert solve_axis(view, Layout(5, 2)) is None
    cp = _cp(diffusers_file(T + "transformer_prx.py"))
    assert cp["approach"] == "none"
    assert any("`pe`" in w["message"] and w["code"] == "CDIT220" for w in cp["warnings"])
