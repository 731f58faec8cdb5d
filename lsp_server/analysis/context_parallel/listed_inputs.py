"""Stream inputs that are Python sequences of per-sample tensors, not one token tensor: forward
iterates them sample by sample before the blocks (`[self.embed(u.unsqueeze(0)) for u in x]`,
`for u, v in zip(x, y)`, `enumerate(x)`). Cache-dit's split hooks cut tensors; a list of latents
(each `(C, F, H, W)`, patchified and padded one by one) has no token axis to cut at the root."""

from __future__ import annotations

import ast

from ..astutil import names_read, walk
from ..model import Evidence
from ..parallel_input import ParallelContext
from .flow import ForwardFlow, before_the_blocks
from .forward_statements import short_stmt

_WRAPPERS = ("zip", "enumerate", "reversed", "list", "tuple")


def _iterated(iterable: ast.expr) -> set[str]:
    """The names a `for` or a comprehension walks element by element: `x`, or the arguments of
    `zip(x, y)` / `enumerate(x)` (not `range(len(x))`, not `x.tolist()`, not `self.blocks`)."""
    if isinstance(iterable, ast.Name):
        return {iterable.id}
    if (
        isinstance(iterable, ast.Call)
        and isinstance(iterable.func, ast.Name)
        and iterable.func.id in _WRAPPERS
    ):
        return set().union(*(_iterated(a) for a in iterable.args)) if iterable.args else set()
    return set()


def comprehension_aliases(expr: ast.expr, tracked: set[str]) -> dict[str, str]:
    """Names the comprehensions in `expr` bind to elements of tracked values, each with the value
    it walks (`u` -> `x` in `[u.shape[2:] for u in x]`; `u`, `v` in `zip(x, y)` -> `x`)."""
    out: dict[str, str] = {}
    for node in walk(expr):
        walked = _iterated(node.iter) & tracked if isinstance(node, ast.comprehension) else set()
        if walked:
            for name in walk(node.target):  # type: ignore[union-attr]
                if isinstance(name, ast.Name):
                    out[name.id] = sorted(walked)[0]
    return out


def iterated_streams(ctx: ParallelContext, flow: ForwardFlow, streams: set[str]) -> list[Evidence]:
    """Evidence that forward walks a stream input element by element before the blocks."""
    for stmt in before_the_blocks(flow):
        for node in walk(stmt):
            if isinstance(node, ast.comprehension | ast.For):
                walked = _iterated(node.iter) & streams
                if walked and not names_read(node.iter) - walked - set(_WRAPPERS):
                    name = sorted(walked)[0]
                    return [
                        Evidence(
                            f"`{short_stmt(stmt)}` walks `{name}` element by element: it is a "
                            "sequence of per-sample tensors, not one token tensor (a root split "
                            "cuts tensors, not Python lists)",
                            ctx.path,
                            stmt.lineno,
                        )
                    ]
    return []
