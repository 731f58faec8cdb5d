"""Blocks that take their stream sequence-first `(tokens, batch, channels)`: the split and the
gather follow the layout (axis 0), read from the layout ops forward applies before the loop
(`seq_first_dit.py`; both fixtures run on 2 gloo ranks in tests/test_cp_plans_gloo.py, with the
batch-first axis 1 as the control, which cuts the batch). Batch-first models keep axis 1."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from lsp_server.analysis.context_parallel.flow import ForwardFlow
from lsp_server.analysis.context_parallel.stream_layout import batch_axis
from tests.conftest import FIXTURES, diffusers_file

SEQ_FIRST = FIXTURES / "models" / "third_party" / "seq_first_dit.py"


def _batch_axis(body: str) -> int | None:
    func = ast.parse(f"def forward(self, x, t):\n{body}").body[0]
    assert isinstance(func, ast.FunctionDef)
    statements = sorted(
        (n for n in ast.walk(func) if isinstance(n, ast.stmt) and n is not func),
        key=lambda n: n.lineno,
    )
    return batch_axis(ForwardFlow(["x", "t"], set(), "x", 100, 100, statements), "x")


@pytest.mark.parametrize(
    ("body", "axis"),
    [
        ("  x = self.embed(x).transpose(0, 1)\n", 1),
        ("  x = torch.transpose(self.embed(x), 0, 1).contiguous()\n", 1),
        ("  x = self.patch(x).flatten(2).permute(2, 0, 1)\n", 1),
        ('  x = rearrange(x, "b n c -> n b c")\n', 1),
        ("  x = x.movedim(0, 1)\n", 1),
        # moved and moved back, or never moved
        ("  x = x.transpose(0, 1)\n  x = self.enc(x)\n  x = x.transpose(1, 0)\n", 0),
        ("  x = self.patch(x).flatten(2).transpose(1, 2)\n  x = x + self.pos\n", 0),
        ('  x = rearrange(x, "b c (h w) -> b (h w) c", h=4)\n', 0),
        (
            "  x = x.permute(0, 2, 1, 3, 4).flatten(0, 1)\n"
            "  x = self.embed(x).unflatten(0, (2, -1))\n",
            0,
        ),
        # a reshape around a moved batch axis: not read
        ("  x = x.transpose(0, 1).reshape(4, 2, -1)\n", None),
    ],
)
def test_the_batch_axis_follows_the_layout_ops_before_the_loop(body: str, axis: int | None) -> None:
    assert _batch_axis(body) == axis


def _cp(path: Path, cls: str) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


@pytest.mark.parametrize("cls", ["SeqFirstDiT", "DetrStyleDiT"])
def test_sequence_first_blocks_are_split_and_gathered_on_axis_0(cls: str) -> None:
    cp = _cp(SEQ_FIRST, cls)
    assert cp["approach"] == "single_point"
    assert cp["plan"]["blocks.0"]["x"]["split_dim"] == 0
    assert cp["plan"]["blocks.<last>"]["gather_dim"] == 0
    assert any("sequence-first" in e["message"] for e in cp["evidence"])


def test_batch_first_models_keep_axis_1() -> None:
    """Allegro merges its batch with the frames and unflattens it back: still batch-first."""
    path = diffusers_file("models/transformers/transformer_allegro.py")
    cp = _cp(path, "AllegroTransformer3DModel")
    assert cp["plan"]["transformer_blocks.0"]["hidden_states"]["split_dim"] == 1
    assert not any("sequence-first" in e["message"] for e in cp["evidence"])
