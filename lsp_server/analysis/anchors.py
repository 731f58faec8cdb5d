"""Anchors: where the relative imports of a module copied out of its package resolve (see
`sources.anchor_of`, which picks the package). `RelativeImport` is one such import and `Anchor`
its resolution: a place in an installed package; `anchor_in_package` scores the package folders
of one installed package where all of a file's relative imports resolve."""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .lazy_definitions import LazyDefinitions, flat_top_level
from .module_files import is_file, package_version, relative_path

if TYPE_CHECKING:
    from .sources import SourceFile


@dataclass(frozen=True)
class RelativeImport:
    """`from <level dots><module> import <names>` at `line`."""

    module: str
    level: int
    names: tuple[str, ...]
    line: int

    @property
    def spelled(self) -> str:
        return "." * self.level + self.module


@dataclass(frozen=True)
class Anchor:
    """Where a copied module's relative imports resolve: `path` (which need not exist) in the
    installed package `package` at `root`, as module `module`."""

    package: str
    root: Path
    path: Path
    module: str
    version: str | None

    @property
    def installed_file(self) -> Path | None:
        """The installed module of the same name, when there is one (the file was copied)."""
        return self.path if is_file(self.path) else None

    def to_json(self) -> dict[str, object]:
        installed = self.installed_file
        return {
            "package": self.package,
            "version": self.version,
            "module": self.module,
            "path": str(self.path),
            "installedFile": str(installed) if installed else None,
        }


def relative_imports(source: SourceFile) -> list[RelativeImport]:
    """The top-level relative imports of `source` (inside `if`/`try` blocks too)."""
    if source.lazy and source._tree is None and isinstance(source.top_level, LazyDefinitions):
        statements: Iterable[ast.stmt] = source.top_level.import_statements()
    else:
        statements = flat_top_level(source.tree.body)
    return [
        RelativeImport(s.module or "", s.level, tuple(a.name for a in s.names), s.lineno)
        for s in statements
        if isinstance(s, ast.ImportFrom) and s.level
    ]


def resolves_from(spec: RelativeImport, origin: Path, root: Path | None = None) -> bool:
    """Whether `spec` resolves for a file at `origin` (the module, or for `from . import x`
    each name as a submodule or the package itself)."""
    if relative_path(spec.module, spec.level, origin, root) is not None:
        return True
    if spec.module:
        return False
    return all(relative_path(name, spec.level, origin, root) is not None for name in spec.names)


def anchor_in_package(
    package: str, root: Path, path: Path, specs: list[RelativeImport]
) -> Anchor | None:
    """The folder of installed `package` (at `root`) where a file at `path` would have all its
    relative imports (`specs`) resolve, ranked as `sources.anchor_of` describes; None if none."""
    scored = []
    for folder in _package_tree(root):
        origin = folder / path.name
        if not all(resolves_from(s, origin, root) for s in specs):
            continue
        names_found = all(_names_defined(s, origin, root) for s in specs)
        words = _affinity(path.stem, folder.relative_to(root).parts)
        depth = len(folder.relative_to(root).parts)
        key = (not names_found, not is_file(origin), -words)
        scored.append((key, depth, folder, origin))
    if not scored:
        return None
    best = min(item[0] for item in scored)
    tied = [item for item in scored if item[0] == best]
    if len(tied) > 1:  # prefer the folder whose modules import what this one imports
        spelled = {s.spelled for s in specs}
        tied.sort(key=lambda item: (-_import_likeness(item[2], spelled), item[1], item[2]))
    origin = tied[0][3]
    parts = [package, *origin.parent.relative_to(root).parts]
    if origin.stem != "__init__":
        parts.append(origin.stem)
    return Anchor(package, root, origin, ".".join(parts), package_version(root))


def inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except (ValueError, OSError):
        return False


# Package root -> its package folders (`_package_tree`); cleared by `sources.clear_caches`.
package_trees: dict[Path, list[Path]] = {}


def _package_tree(root: Path) -> list[Path]:
    """Every package folder (with `__init__.py`) under `root`, `root` included."""
    if root not in package_trees:
        found: list[Path] = []
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            if "__init__.py" in files:
                found.append(Path(folder))
            else:
                dirs[:] = []  # not a package: nothing below is importable relative to it
        package_trees[root] = found
    return package_trees[root]


_HEAD_IMPORT = re.compile(r"^from[ \t]+(\.+[\w.]*)[ \t]+import", re.M)


def _import_likeness(folder: Path, spelled: set[str]) -> float:
    """The share of this file's relative imports that the modules of `folder` also make (their
    first 8 KB, averaged over the modules)."""
    total, count = 0.0, 0
    try:
        files = sorted(folder.glob("*.py"))[:200]
    except OSError:
        return 0.0
    for file in files:
        try:
            with file.open("r", encoding="utf-8", errors="replace") as handle:
                head = handle.read(8192)
        except OSError:
            continue
        theirs = set(_HEAD_IMPORT.findall(head))
        if theirs:
            total += len(spelled & theirs) / len(spelled)
            count += 1
    return total / count if count else 0.0


def _names_defined(spec: RelativeImport, origin: Path, root: Path) -> bool:
    """Whether each imported name is a submodule or a word of the imported module's text."""
    target = relative_path(spec.module, spec.level, origin, root)
    text = None
    for name in spec.names:
        if name == "*":
            continue
        sub = f"{spec.module}.{name}" if spec.module else name
        if relative_path(sub, spec.level, origin, root) is not None:
            continue
        if target is None:
            return False
        if text is None:
            try:
                text = target.read_text(encoding="utf-8", errors="replace")
            except OSError:
                return False
        if not re.search(rf"\b{re.escape(name)}\b", text):
            return False
    return True


def _affinity(stem: str, folders: tuple[str, ...]) -> int:
    """Words shared by a file name and a package path (plural `s` ignored)."""

    def words(text: str) -> set[str]:
        return {w.rstrip("s") for w in re.split(r"[_\W]+", text.lower()) if len(w) > 1}

    return len(words(stem) & set().union(*(words(f) for f in folders))) if folders else 0
