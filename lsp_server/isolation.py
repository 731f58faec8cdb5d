"""Keep workspace code out of the language-server process (standard library only).

The server reads the workspace's Python files; it never imports them. Two things would break that:

* `python -m lsp_server` puts its working directory first on `sys.path` (unless `-P` or
  `PYTHONSAFEPATH=1`, Python 3.11+), so a `pygls.py` there would be imported instead of pygls.
  `lsp_server/__main__.py` removes that entry before it imports anything (the extension also
  starts the server with `PYTHONSAFEPATH=1` in a neutral working directory).
* The analysis and codegen locate modules by scanning `sys.path` (`import models.blocks` →
  `<root>/models/blocks.py`) and name generated imports after the longest `sys.path` prefix. The
  workspace folders must take part in that lookup, as they did when the server ran in the workspace.
  `add_source_roots` puts them on `sys.path` with a path-entry finder that finds nothing, so the
  import system skips them while the source lookup sees them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from importlib.machinery import ModuleSpec
from types import ModuleType


class _SourceOnly:
    """Path-entry finder of a source root: nothing is ever imported from it."""

    def find_spec(self, fullname: str, target: ModuleType | None = None) -> ModuleSpec | None:
        return None

    def invalidate_caches(self) -> None:
        """Kept in `sys.path_importer_cache` by `importlib.invalidate_caches()` (None is not)."""

    def __repr__(self) -> str:
        return "<cdit source-only path entry>"


SOURCE_ONLY = _SourceOnly()


def add_source_roots(roots: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Make `roots` visible to the source lookup, never to the import system; returns the added.

    A root that is already on `sys.path` was put there by the interpreter's own configuration
    (a `.pth` file, `PYTHONPATH`) and is left alone.
    """
    added: list[str] = []
    for root in roots:
        entry = os.path.abspath(os.fspath(root))
        if not os.path.isdir(entry) or entry in sys.path:
            continue
        sys.path_importer_cache[entry] = SOURCE_ONLY  # type: ignore[assignment]
        sys.path.insert(0, entry)
        added.append(entry)
    return added
