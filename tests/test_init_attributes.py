"""Attributes a constructor binds: `self.x = ...` and modules attached with `setattr`, also by an
f-string name inside a loop over literal tuples (Kandinsky 6 attaches its per-modality text RoPE
modules so; `grid_rope_dit.py` its per-stream position tables)."""

from __future__ import annotations

import ast
import textwrap

from lsp_server.analysis.init_attributes import init_attributes


def _attrs(body: str) -> dict[str, str]:
    source = "def __init__(self, dim, n):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    (init,) = ast.parse(source).body
    assert isinstance(init, ast.FunctionDef)
    return {a.attr: ast.unparse(a.value) for a in init_attributes(init)}


def test_assignments_and_literal_setattr() -> None:
    got = _attrs(
        """
        self.proj = nn.Linear(dim, dim)
        self.scale: float = 0.5
        setattr(self, "norm", nn.LayerNorm(dim))
        """
    )
    assert got == {"proj": "nn.Linear(dim, dim)", "scale": "0.5", "norm": "nn.LayerNorm(dim)"}


def test_f_string_names_in_a_loop_over_literal_tuples() -> None:
    got = _attrs(
        """
        for prefix, width in (("video", dim), ("audio", dim // 2)):
            setattr(self, f"{prefix}_rope", Rope(width))
            setattr(self, f"{prefix}_blocks", nn.ModuleList([Block(width) for _ in range(n)]))
        for name in ["q", "k"]:
            setattr(self, f"to_{name}", nn.Linear(dim, dim))
        """
    )
    assert set(got) == {
        "video_rope",
        "audio_rope",
        "video_blocks",
        "audio_blocks",
        "to_q",
        "to_k",
    }
    assert got["audio_rope"] == "Rope(width)"


def test_names_that_cannot_be_rendered_are_not_invented() -> None:
    got = _attrs(
        """
        for i in range(n):
            setattr(self, f"block_{i}", Block(dim))
        for prefix in names:
            setattr(self, f"{prefix}_rope", Rope(dim))
        for prefix, width in (("video", dim),):
            setattr(self, f"{prefix!r}_{width}", Rope(width))
        setattr(other, "x", Rope(dim))
        """
    )
    assert got == {}
