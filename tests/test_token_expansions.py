"""Per-frame conditioning expanded to one row per token in forward (diffusion forcing).

`FrameForcingDiT` / `ExpandForcingDiT` (tests/fixtures/models/third_party/frame_cond_dit.py) take
a 5-D latent grid and one timestep per frame; forward repeats each frame's row over the frame's
tokens and hands it to every block. Before this was read the latent grid was root-split on its
frame axis and the expansion left whole: the run went on with garbage shapes. Now the grid input
blocks the root split, and the expansion is split with the tokens at every block, on the axis the
expansion made. Both run on 2 gloo ranks in tests/test_cp_plans_gloo.py (Ulysses and ring), with
the expansion left whole as the control (it stops).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

FRAME_COND = FIXTURES / "models" / "third_party" / "frame_cond_dit.py"


def _cp(path: Path, cls: str) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


@pytest.mark.parametrize(
    ("cls", "how"),
    [
        ("FrameForcingDiT", "c.repeat_interleave(h * w, dim=1)"),
        ("ExpandForcingDiT", "flatten(1, 2)"),
    ],
)
def test_a_per_frame_conditioning_expanded_per_token_is_split_with_the_tokens(
    cls: str, how: str
) -> None:
    cp = _cp(FRAME_COND, cls)
    assert cp["approach"] == "single_point"
    assert "" not in cp["plan"]  # the 5-D latent grid is not root-split
    assert cp["plan"]["blocks.0"]["x"]["split_dim"] == 1
    split = cp["plan"]["blocks.*"]["c"]
    assert split["split_dim"] == 1 and not split["split_output"]
    assert how in split["reason"]
    messages = " ".join(e["message"] for e in cp["evidence"])
    assert "unpacks 5 sizes from its shape" in messages


_NEGATIVE_DIM = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ada = nn.Linear(8, 8)

    def forward(self, x, c):
        q = x * (1 + self.ada(c))
        return x + torch.nn.functional.scaled_dot_product_attention(q, q, q)


class NegDimDiT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.time = nn.Linear(1, 8)
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(8, 4)

    def forward(self, latents, t):
        b, f, h, w, _ = latents.shape
        x = self.embed(latents.flatten(1, 3))
        c = self.time(t.reshape(-1, 1)).view(b, f, -1)
        c = c.repeat_interleave(h * w, dim=-2)
        for block in self.blocks:
            x = block(x, c)
        return self.head(x)
"""


def test_an_expansion_whose_axis_is_not_read_refuses_context_parallelism(tmp_path: Path) -> None:
    path = tmp_path / "neg_dim_dit.py"
    path.write_text(_NEGATIVE_DIM)
    cp = _cp(path, "NegDimDiT")
    assert cp["approach"] == "none" and cp["plan"] == {}
    (refusal,) = [w for w in cp["warnings"] if w["code"] == "CDIT220"]
    assert "expanded to one row per token" in refusal["message"]
    assert "the axis it expands is not read" in refusal["message"]


def test_a_latent_grid_flattened_into_tokens_is_not_root_split(tmp_path: Path) -> None:
    """Without the shape unpack: `x.flatten(1, 3)` of the input alone shows the grid."""
    source = _NEGATIVE_DIM.replace("        b, f, h, w, _ = latents.shape\n", "").replace(
        "        c = self.time(t.reshape(-1, 1)).view(b, f, -1)\n"
        "        c = c.repeat_interleave(h * w, dim=-2)\n",
        "        c = self.time(t[:, None])[:, None]\n",
    )
    path = tmp_path / "flat_dit.py"
    path.write_text(source)
    cp = _cp(path, "NegDimDiT")
    assert "" not in cp["plan"], cp["plan"]
    assert cp["plan"]["blocks.0"]["x"]["split_dim"] == 1
    assert any("flattens its axis 1" in e["message"] for e in cp["evidence"])
