"""A position table seen through the ops that give it unit axes (`unsqueeze(k)`, `t[None, :,
None]`) and the one of its axes that meets a query's sequence axis under broadcasting.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .query_layout import Layout


@dataclass(frozen=True)
class TableView:
    """The table seen through ops: which element of a tuple, then unit axes added."""

    element: int | None = None
    ops: tuple[tuple[str, object], ...] = ()

    def then(self, op: str, arg: object) -> TableView:
        return TableView(self.element, (*self.ops, (op, arg)))


def solve_axis(view: TableView, layout: Layout) -> int | None:
    """The table axis that meets the queries' sequence axis, over every table rank for which
    the view broadcasts that way: its last axis on the features, a table axis (not a unit one)
    on the sequence. None when no rank or several answers fit."""
    answers: set[int] = set()
    for rank in range(1, layout.rank + 1):
        axes = _apply(view.ops, rank)
        if axes is None or len(axes) > layout.rank or axes[-1] != rank - 1:
            continue
        offset = layout.rank - len(axes)
        if layout.seq < offset:
            continue
        meets = axes[layout.seq - offset]
        if meets is not None:
            answers.add(meets)
    return next(iter(answers)) if len(answers) == 1 else None


def _apply(ops: tuple[tuple[str, object], ...], rank: int) -> list[int | None] | None:
    """The table's axes after the ops (None for a unit axis), or None where an op does not fit
    a table of `rank` axes."""
    axes: list[int | None] = list(range(rank))
    for op, arg in ops:
        if op == "unsqueeze":
            assert isinstance(arg, int)
            at = arg if arg >= 0 else len(axes) + 1 + arg
            if not 0 <= at <= len(axes):
                return None
            axes.insert(at, None)
        elif op == "index":
            assert isinstance(arg, tuple)
            axes = _indexed(axes, arg)
            if axes is None:
                return None
    return axes


def _indexed(axes: list[int | None], pattern: tuple[str, ...]) -> list[int | None] | None:
    """`t[None, :, None]` (`new`, `keep`, `...`): unit axes among the kept ones; axes past the
    pattern are kept."""
    kept = sum(1 for p in pattern if p == "keep")
    if kept > len(axes):
        return None
    rest = list(axes)
    out: list[int | None] = []
    for p in pattern:
        if p == "new":
            out.append(None)
        elif p == "keep":
            out.append(rest.pop(0))
        else:  # Ellipsis: the axes the later entries do not take
            later = sum(1 for q in pattern[pattern.index(p) + 1 :] if q == "keep")
            take = len(rest) - later
            if take < 0:
                return None
            out += rest[:take]
            rest = rest[take:]
    return out + rest


def index_pattern(index: ast.expr) -> tuple[str, ...] | None:
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    out: list[str] = []
    for part in parts:
        if isinstance(part, ast.Constant) and part.value is None:
            out.append("new")
        elif isinstance(part, ast.Constant) and part.value is Ellipsis:
            out.append("...")
        elif (
            isinstance(part, ast.Slice)
            and part.lower is None
            and part.upper is None
            and part.step is None
        ):
            out.append("keep")
        else:
            return None
    if out.count("...") > 1 or "new" not in out:
        return None
    return tuple(out)
