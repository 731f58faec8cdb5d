"""Batched CFG: cond and uncond stacked into one denoiser call, the prediction split after it.

The first denoiser call of a step is batched when one of its inputs comes (through the definitions
it was computed from) from a doubling on dim 0: `torch.cat([x] * 2)`, `torch.cat([x, x])`,
`x.repeat(2, ...)`. Its output being split on dim 0 afterwards (`pred.chunk(2)`,
`torch.chunk(pred, 2)`, `pred.split(...)`) is supporting evidence.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..astutil import names_in, short_text, simple_name, walk

if TYPE_CHECKING:
    from .calls import Site
    from .values import Def


def _dim0(call: ast.Call, pos: int) -> bool:
    """True when a cat/chunk/split call works on dim 0 (the default)."""
    dim: ast.expr | None = None
    for k in call.keywords:
        if k.arg in ("dim", "axis"):
            dim = k.value
    if dim is None and len(call.args) > pos:
        dim = call.args[pos]
    return dim is None or (isinstance(dim, ast.Constant) and dim.value == 0)


_SEQ = (ast.List, ast.Tuple)
_SPLITS = ("chunk", "split", "tensor_split")


def doubling(node: ast.AST) -> ast.AST | None:
    """The sub-expression stacking a batch twice: `cat([x] * 2)`, `cat([x, x])`, `x.repeat(2)`."""
    for sub in walk(node):
        if not isinstance(sub, ast.Call):
            continue
        name = simple_name(sub.func)
        if name in ("cat", "concat", "concatenate", "stack") and sub.args and _dim0(sub, 1):
            seq = sub.args[0]
            if (
                isinstance(seq, ast.BinOp)
                and isinstance(seq.op, ast.Mult)
                and (isinstance(seq.left, _SEQ) or isinstance(seq.right, _SEQ))
            ):
                return sub
            if isinstance(seq, _SEQ) and len(seq.elts) >= 2:
                texts = {short_text(e) for e in seq.elts}
                if len(texts) == 1:
                    return sub
        if name == "repeat" and isinstance(sub.func, ast.Attribute) and sub.args:
            first = sub.args[0]
            if (
                isinstance(first, ast.Constant)
                and isinstance(first.value, int)
                and first.value >= 2
            ):
                return sub
    return None


def find_doubling(defs: Iterable[Def], depth: int = 0, seen: set[int] | None = None) -> Def | None:
    """The definition among `defs`, or those they were computed from, that doubles a batch."""
    seen = set() if seen is None else seen
    for d in defs:
        if id(d) in seen or isinstance(d.value, (ast.For, ast.AsyncFor)):
            continue
        seen.add(id(d))
        if doubling(d.value) is not None:
            return d
        if depth < 4:
            for _, deps in d.deps:
                hit = find_doubling(deps, depth + 1, seen)
                if hit is not None:
                    return hit
    return None


def _targets(stmt: ast.stmt | None) -> set[str]:
    if isinstance(stmt, ast.Assign):
        out: set[str] = set()
        for t in stmt.targets:
            if isinstance(t, (ast.Name, ast.Tuple, ast.List)):
                out |= names_in(t)
        return out
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return {stmt.target.id}
    return set()


def _passthrough(value: ast.AST, name: str) -> bool:
    """`x.to(...)`, `x[0]`, `x.float()`, `x.sample`: a value still holding the same batch."""
    node = value
    while True:
        if isinstance(node, ast.Name):
            return node.id == name
        if isinstance(node, (ast.Subscript, ast.Attribute)):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("chunk", "split"):
                return False
            node = node.func.value
        else:
            return False


def output_split(site: Site) -> ast.Call | None:
    """`pred.chunk(2)` / `torch.chunk(pred, 2)` / `pred.split(...)` on dim 0 after the call."""
    names = _targets(site.stmt)
    if not names or site.stmt is None:
        return None
    start = getattr(site.stmt, "end_lineno", site.call.lineno) or site.call.lineno
    events: list[tuple[int, int, ast.AST]] = []
    for node in walk(site.scope):
        line = getattr(node, "lineno", 0)
        if line <= start:
            continue
        if isinstance(node, ast.Assign):
            events.append((line, 1, node))
        elif isinstance(node, ast.Call) and simple_name(node.func) in _SPLITS:
            events.append((line, 0, node))
    live = set(names)
    for _, kind, node in sorted(events, key=lambda e: (e[0], e[1])):
        if kind == 1:
            assert isinstance(node, ast.Assign)
            for t in node.targets:
                for n in names_in(t) & live:
                    if not _passthrough(node.value, n):
                        live.discard(n)
            continue
        assert isinstance(node, ast.Call)
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in live:
            if _dim0(node, 1):
                return node
        elif (
            node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in live
            and _dim0(node, 2)
        ):
            return node
        if not live:
            break
    return None
