"""A position table seen through the ops that give it unit axes (`unsqueeze(k)`, `t[None, :,
None]`) or take axes away (`t[..., 0]`), and the one of its axes that meets a query's sequence
axis under broadcasting.
"""

from __future__ import annotations

from dataclasses import dataclass

from .index_syntax import DROP, indexed
from .query_layout import Layout


@dataclass(frozen=True)
class TableView:
    """The table seen through ops: which element of a tuple, then unit axes added and
    subscripts (`("index", pattern)`, `index_syntax`)."""

    element: int | None = None
    ops: tuple[tuple[str, object], ...] = ()

    def then(self, op: str, arg: object) -> TableView:
        return TableView(self.element, (*self.ops, (op, arg)))


def solve_axis(view: TableView, layout: Layout) -> int | None:
    """The table axis that meets the queries' sequence axis, over every table rank for which
    the view broadcasts that way: its last axis that integer indices leave on the features, a
    table axis (not a unit one) on the sequence. None when no rank or several answers fit, or
    when the sequence meets an axis a bounded slice cut."""
    answers: set[int] = set()
    for rank in range(1, layout.rank + _dropped(view.ops) + 1):
        applied = _apply(view.ops, rank)
        if applied is None:
            continue
        axes, cut = applied
        kept = [a for a in axes if a is not None]
        if not kept or axes[-1] != max(kept) or len(axes) > layout.rank:
            continue
        offset = layout.rank - len(axes)
        if layout.seq < offset:
            continue
        meets = axes[layout.seq - offset]
        if meets in cut:  # the tokens meet rows a slice picks: not a whole table's axis
            return None
        if meets is not None:
            answers.add(meets)
    return next(iter(answers)) if len(answers) == 1 else None


def _apply(
    ops: tuple[tuple[str, object], ...], rank: int
) -> tuple[list[int | None], set[int]] | None:
    """The table's axes after the ops (None for a unit axis) and those a slice cut, or None
    where an op does not fit a table of `rank` axes."""
    axes: list[int | None] = list(range(rank))
    cut: set[int] = set()
    for op, arg in ops:
        if op == "unsqueeze":
            assert isinstance(arg, int)
            at = arg if arg >= 0 else len(axes) + 1 + arg
            if not 0 <= at <= len(axes):
                return None
            axes.insert(at, None)
        elif op == "index":
            assert isinstance(arg, tuple)
            done = indexed(axes, arg)
            if done is None:
                return None
            axes, more = done
            cut |= more
    return axes, cut


def _dropped(ops: tuple[tuple[str, object], ...]) -> int:
    """How many axes the ops' integer indices take away."""
    return sum(
        sum(1 for p in arg if p == DROP)
        for op, arg in ops
        if op == "index" and isinstance(arg, tuple)
    )
