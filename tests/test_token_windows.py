"""Attention within windows of the tokens, cut inside the attention module (window_attn_dit.py) or
a diffusers-style processor: context parallelism is refused before anything runs, naming the
call; the cache and TP plans stay. The global-attention twin keeps its plan. Why the refusal is
needed: the twin's generated module runs on the window model and is 0.15 off on 2 gloo ranks
(tests/test_cp_plans_gloo.py, `window_forced`); TP on the window model is exact there."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from lsp_server.analysis.context_parallel.token_windows import token_windows
from tests.conftest import FIXTURES

WINDOW_DIT = FIXTURES / "models" / "third_party" / "window_attn_dit.py"


def _transformer(path: Path, cls: str) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t


@pytest.mark.parametrize(
    ("cls", "said"),
    [
        ("WindowAttnDiT", "`t.transpose(1, 2).reshape(b * nw, self.window, self.heads, -1)`"),
        ("EinopsWindowDiT", "`rearrange(t, 'b h (nw w) d -> (b nw) h w d', w=self.window)`"),
    ],
)
def test_windows_cut_in_the_attention_module_refuse_cp(cls: str, said: str) -> None:
    t = _transformer(WINDOW_DIT, cls)
    cp = t["contextParallel"]
    assert cp["approach"] == "none"
    (warning,) = [
        w for w in cp["warnings"] if "cuts the tokens it sees into groups" in w["message"]
    ]
    assert said in warning["message"]
    assert "Attention" in warning["message"]
    assert [b["attr"] for b in t["blockLists"]] == ["blocks"]  # caching stays
    assert t["tensorParallel"]["layers"]  # and so does TP


def test_the_global_twin_keeps_its_cp_plan() -> None:
    assert _transformer(WINDOW_DIT, "GlobalAttnDiT")["contextParallel"]["approach"] != "none"


_PROCESSOR_DIT = """
import torch.nn.functional as F
from diffusers.models.attention_processor import Attention
from torch import nn


class LocalWindowProcessor:
    def __init__(self, window: int = 4):
        self.window = window

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None):
        b, n, _ = hidden_states.shape
        q = attn.to_q(hidden_states).unflatten(-1, (attn.heads, -1))
        k = attn.to_k(hidden_states).unflatten(-1, (attn.heads, -1))
        v = attn.to_v(hidden_states).unflatten(-1, (attn.heads, -1))
        q, k, v = (WINDOWS for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v)
        return attn.to_out[0](out.transpose(1, 2).reshape(b, n, -1))


class Blk(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = Attention(
            query_dim=dim, heads=heads, dim_head=dim // heads, processor=LocalWindowProcessor()
        )

    def forward(self, x, c):
        return x + self.attn(self.norm(x) + c.unsqueeze(1))


class ProcDiT(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, depth: int = 2):
        super().__init__()
        self.embed = nn.Linear(4, dim)
        self.time = nn.Linear(1, dim)
        self.blocks = nn.ModuleList([Blk(dim, heads) for _ in range(depth)])
        self.out = nn.Linear(dim, 4)

    def forward(self, x, t):
        h = self.embed(x)
        c = self.time(t.reshape(-1, 1))
        for blk in self.blocks:
            h = blk(h, c)
        return self.out(h)
"""


@pytest.mark.parametrize(
    ("windows", "refused"),
    [
        ("t.unflatten(1, (n // self.window, self.window)).flatten(0, 1).transpose(1, 2)", True),
        ("t.transpose(1, 2)", False),  # the control: heads only
    ],
)
def test_windows_cut_in_a_processor_refuse_cp(tmp_path: Path, windows: str, refused: bool) -> None:
    path = tmp_path / "proc_dit.py"
    path.write_text(_PROCESSOR_DIT.replace("WINDOWS", windows))
    cp = _transformer(path, "ProcDiT")["contextParallel"]
    assert (cp["approach"] == "none") is refused
    hits = [w for w in cp["warnings"] if "(LocalWindowProcessor) cuts the tokens" in w["message"]]
    assert bool(hits) is refused


def _windows(code: str) -> str | None:
    func = ast.parse(textwrap.dedent(code)).body[0]
    assert isinstance(func, ast.FunctionDef)
    found = token_windows(func)
    return found[1] if found else None


@pytest.mark.parametrize(
    "code",
    [
        # a count of windows named first, then used
        """
        def forward(self, x):
            b, n, d = x.shape
            nw = n // self.window
            q = self.q(x).view(b, n, self.heads, -1)
            return q.reshape(b * nw, self.window, self.heads, -1)
        """,
        # the length read inline
        """
        def forward(self, hidden_states):
            q = self.to_q(hidden_states).unflatten(-1, (self.heads, -1))
            return q.unflatten(1, (hidden_states.shape[1] // 8, 8))
        """,
        # einops over (b, h, n, d) queries
        """
        def forward(self, x):
            q = rearrange(self.q(x), "b n (h d) -> b h n d", h=4)
            return rearrange(q, "b h (nw w) d -> (b nw) h w d", w=4)
        """,
    ],
)
def test_window_cuts_are_read(code: str) -> None:
    assert _windows(code) is not None


@pytest.mark.parametrize(
    "code",
    [
        # head splits and merges, batch and heads flattened for bmm
        """
        def forward(self, x):
            b, n, d = x.shape
            q = self.q(x).view(b, n, self.heads, d // self.heads).transpose(1, 2)
            q = q.reshape(b * self.heads, n, -1)
            return rearrange(q, "(b h) n d -> b n (h d)", h=self.heads)
        """,
        # halves of the features
        """
        def forward(self, x):
            b, n, d = x.shape
            half = d // 2
            return x[..., :half].reshape(b, n, 2, -1)
        """,
    ],
)
def test_head_splits_are_not_windows(code: str) -> None:
    assert _windows(code) is None
