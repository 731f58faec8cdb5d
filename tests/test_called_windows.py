"""Windows cut, and reductions over the tokens made, in functions a module hands its tokens to
(called_windows.py, called_reductions.py): context parallelism is refused naming the function and
the line of the cut, as when the module cuts them itself (tests/test_token_windows.py).

Fixture: third_party/block_sparse_dit.py (invented: a processor calls `_block_sparse_mask(q, k,
block)` on `(B, H, S, D)` queries, or a method of its attention module that calls `_pool_blocks`;
the dense twin only rotates q and k in a helper). Real: diffusers 0.42.1's Kandinsky 6 SR, whose
processor calls `nabla_block_mask(query.transpose(1, 2), ...)` (`B, h, S, D = q.shape`, then
`q.reshape(B, h, S // 64, 64, D)`)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES, diffusers_file

SPARSE = FIXTURES / "models" / "third_party" / "block_sparse_dit.py"
K6_SR = diffusers_file("models/transformers/transformer_kandinsky6_sr.py")


def _cp(path: Path, cls: str) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


def _refusals(cp: dict[str, Any]) -> list[str]:
    return [w["message"] for w in cp["warnings"] if w["code"] == "CDIT220"]


def _reshape_line(path: Path, function: str) -> int:
    """The line of the first reshape in `function` (a module-level function or a method)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            calls = [
                n
                for n in ast.walk(node)
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "reshape"
            ]
            return min(c.lineno for c in calls)
    raise AssertionError(function)


@pytest.mark.parametrize(
    ("cls", "chain", "cut_in"),
    [
        ("BlockSparseDiT", ["_block_sparse_mask"], "_block_sparse_mask"),
        ("MethodSparseDiT", ["block_mask", "_pool_blocks"], "_pool_blocks"),
    ],
)
def test_blocks_cut_in_a_called_helper_refuse_cp(cls: str, chain: list[str], cut_in: str) -> None:
    cp = _cp(SPARSE, cls)
    assert cp["approach"] == "none" and not cp["plan"]
    (refusal,) = [m for m in _refusals(cp) if "cuts them into groups" in m]
    for name in chain:
        assert f"`{name}` (line " in refusal
    assert f"line {_reshape_line(SPARSE, cut_in)}):" in refusal
    places = [refusal.index(f"`{name}`") for name in chain]
    assert places == sorted(places)  # the calls in order


def test_a_helper_doing_per_token_work_keeps_the_plan() -> None:
    cp = _cp(SPARSE, "DenseRotaryDiT")
    assert cp["approach"] != "none" and cp["plan"]
    assert not _refusals(cp)


def test_kandinsky6_sr_is_refused_naming_the_nabla_mask() -> None:
    cp = _cp(K6_SR, "Kandinsky6SRTransformer3DModel")
    assert cp["approach"] == "none"
    (refusal,) = [m for m in _refusals(cp) if "nabla_block_mask" in m]
    assert "Kandinsky6SRAttnProcessor" in refusal and "cuts them into groups" in refusal
    assert f"line {_reshape_line(K6_SR, 'nabla_block_mask')}):" in refusal


_PROCESSOR_DIT = """
import torch
import torch.nn.functional as F
from torch import nn


def _group(t, n):
    b, h, s, d = t.shape
    return t.reshape(b, h // 2, 2, s, d).mean(2).repeat_interleave(2, dim=1)


def _again(t, n):
    return t if n == 0 else _again(t, n - 1)


class Proc:
    def __call__(self, attn, hidden_states):
        q = attn.to_q(hidden_states).unflatten(-1, (attn.heads, -1))
        k = attn.to_k(hidden_states).unflatten(-1, (attn.heads, -1))
        v = attn.to_v(hidden_states).unflatten(-1, (attn.heads, -1))
        q = _again(q, 2)
        grouped = _group(HANDED, 2)
        q = q + (grouped if grouped.shape == q.shape else grouped.transpose(1, 2))
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v)
        return attn.to_out(out.transpose(1, 2).flatten(2))


class Attn(nn.Module):
    def __init__(self, dim, heads, processor=None):
        super().__init__()
        self.heads = heads
        self.to_q, self.to_k = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.to_v = nn.Linear(dim, dim)
        self.to_out = nn.Linear(dim, dim)
        self.processor = processor or Proc()

    def forward(self, hidden_states):
        return self.processor(self, hidden_states)


class Blk(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = Attn(dim, heads, processor=Proc())
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, c):
        x = x + self.attn(self.norm(x) + c.unsqueeze(1))
        return BLOCK_RETURN


def _token_mean(t):
    return t.mean(dim=1, keepdim=True)


def _feature_rms(t):
    return t * torch.rsqrt(t.pow(2).mean(dim=-1, keepdim=True) + 1e-6)


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


def _write(tmp_path: Path, handed: str, block_return: str = "x") -> Path:
    path = tmp_path / "called_dit.py"
    path.write_text(_PROCESSOR_DIT.replace("HANDED", handed).replace("BLOCK_RETURN", block_return))
    return path


@pytest.mark.parametrize(
    ("handed", "refused"),
    [
        ("q.transpose(1, 2)", False),  # (B, H, S, D): `h // 2` groups heads
        ("q", True),  # (B, S, H, D): the same `h // 2` groups pairs of tokens
    ],
)
def test_the_layout_handed_decides_which_axis_holds_the_tokens(
    tmp_path: Path, handed: str, refused: bool
) -> None:
    cp = _cp(_write(tmp_path, handed), "ProcDiT")
    assert (cp["approach"] == "none") is refused
    hits = [m for m in _refusals(cp) if "`_group` (line " in m]
    assert bool(hits) is refused


@pytest.mark.parametrize(
    ("block_return", "refused"),
    [
        ("x + self.proj(_token_mean(x))", True),  # a mean over the tokens flows back
        ("x + self.proj(_feature_rms(x))", False),  # over each token's features
        ("x", False),
    ],
)
def test_a_reduction_over_the_tokens_in_a_called_function_refuses_cp(
    tmp_path: Path, block_return: str, refused: bool
) -> None:
    path = _write(tmp_path, "q.transpose(1, 2)", block_return)
    cp = _cp(path, "ProcDiT")
    assert (cp["approach"] == "none") is refused
    hits = [m for m in _refusals(cp) if "`_token_mean` (line " in m]
    assert bool(hits) is refused
    if refused:
        (hit,) = hits
        assert "reduces over them (`t.mean(dim=1, keepdim=True)`" in hit
