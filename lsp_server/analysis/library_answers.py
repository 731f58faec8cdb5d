"""Answers about code of installed libraries, kept across analysis runs.

Every diffusers transformer's attention runs one of a few processors of diffusers'
`attention_processor.py` / `transformer_*.py`; reading one (the windows it cuts, in its own body
or in the functions it hands its tokens to) costs milliseconds and gives the same answer for
every model that runs it. Such an answer is kept when every file it starts from lies in an
installed library (a `site-packages` or `dist-packages` folder: not the user's project, which the
editor changes), keyed by the identity of the nodes it reads (held, so their ids are not reused:
a file parsed again gives new nodes and a new answer). Emptied with the parse cache
(`sources.clear_caches`) and bounded like the walks.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .astutil import keep_with_walks

_T = TypeVar("_T")
_INSTALLED = frozenset({"site-packages", "dist-packages"})
_LIMIT = 10_000
_KEPT: dict[tuple[object, ...], tuple[tuple[ast.AST, ...], object]] = keep_with_walks({})


def installed(path: Path) -> bool:
    """Whether `path` lies in an installed library (never edited during a session)."""
    return not _INSTALLED.isdisjoint(path.parts)


def library_answer(
    kind: str,
    nodes: tuple[ast.AST, ...],
    paths: tuple[Path, ...],
    extra: tuple[object, ...],
    compute: Callable[[], _T],
) -> _T:
    """`compute()`, kept under (`kind`, the identity of `nodes`, `extra`) when every one of
    `paths` (the files of `nodes`) lies in an installed library."""
    if not paths or not all(installed(p) for p in paths):
        return compute()
    key = (kind, tuple(id(n) for n in nodes), extra)
    hit = _KEPT.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], nodes, strict=True)):
        return hit[1]  # type: ignore[return-value]
    value = compute()
    if len(_KEPT) >= _LIMIT:
        _KEPT.clear()
    _KEPT[key] = (nodes, value)
    return value
