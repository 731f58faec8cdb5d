"""What a subscript does to a tensor's axes (`t[..., 0]`, `t[:, None]`, `qkv[0]`, `x[:, :n]`):
an integer index removes an axis, `None` adds a unit axis, `...` keeps the axes the other
entries do not take, a slice keeps its axis (cut when it has bounds), and axes past the index
are kept. Shared by the query layouts and the position-table views of the use reading.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import TypeVar

from ..astutil import int_literal

NEW, REST, KEEP, CUT, DROP = "new", "...", "keep", "cut", "int"
_TAKES = (KEEP, CUT, DROP)  # entries that take one axis each

A = TypeVar("A")


def index_pattern(index: ast.expr) -> tuple[str, ...] | None:
    """The entries of a subscript, one token each; None when one is not read (a name, a tensor
    of indices: it might pick along any axis)."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    out: list[str] = []
    for part in parts:
        if isinstance(part, ast.Constant) and part.value is None:
            out.append(NEW)
        elif isinstance(part, ast.Constant) and part.value is Ellipsis:
            out.append(REST)
        elif isinstance(part, ast.Slice):
            bounded = part.lower is not None or part.upper is not None or part.step is not None
            out.append(CUT if bounded else KEEP)
        elif int_literal(part) is not None:
            out.append(DROP)
        else:
            return None
    return tuple(out) if out.count(REST) <= 1 else None


def indexed(
    axes: Sequence[A | None], pattern: tuple[str, ...]
) -> tuple[list[A | None], set[A]] | None:
    """`axes` after the subscript (None for a unit axis added), with the axes a bounded slice
    cut; None when the subscript takes more axes than there are."""
    if sum(1 for p in pattern if p in _TAKES) > len(axes):
        return None
    rest = list(axes)
    out: list[A | None] = []
    cut: set[A] = set()
    for at, p in enumerate(pattern):
        if p == NEW:
            out.append(None)
        elif p == REST:  # the axes the later entries do not take
            take = len(rest) - sum(1 for q in pattern[at + 1 :] if q in _TAKES)
            out += rest[:take]
            rest = rest[take:]
        else:
            axis = rest.pop(0)
            if p == DROP:
                continue
            out.append(axis)
            if p == CUT and axis is not None:
                cut.add(axis)
    return out + rest, cut
