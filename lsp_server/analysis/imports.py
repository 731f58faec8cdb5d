"""The imports of a source file: which do not resolve, what the analysis lost, and the rewrite of
a copied module's relative imports into absolute ones. Static: nothing is imported.

Codes (the CDIT4xx family, sources and imports):
- CDIT401 (warning): an import that resolves neither in the workspace nor in an installed package;
  the message names what the analysis could not read because of it.
- CDIT402 (info): the file's relative imports resolve only against an installed package (a module
  copied out of diffusers): the analysis read them there (`sources.Anchor`). Importing the file as
  it is still fails; the fix is the installed module or absolute imports (`absolute_imports`).
- CDIT403 (warning): relative imports that the analysis can follow by folder, but Python refuses:
  the file is not inside a package (no `__init__.py`), or they climb above its top-level package.

The statements themselves are collected by `import_sites`; the rewrite is `import_rewrite` (its
functions are re-exported here).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .astutil import walk
from .import_rewrite import absolute_imports as absolute_imports
from .import_rewrite import absolute_module as absolute_module
from .import_sites import ImportSite, import_sites
from .model import Diagnostic
from .module_files import find_top_level, guess_module_name, is_file
from .sources import (
    _OPAQUE_ROOTS,
    Anchor,
    RelativeImport,
    SourceFile,
    module_path,
    resolves_from,
)

UNRESOLVED = "CDIT401"
ANCHORED = "CDIT402"
OUTSIDE_PACKAGE = "CDIT403"

NO_PARENT = "attempted relative import with no known parent package"


@dataclass
class Unresolved:
    site: ImportSite
    reason: str
    lost: str

    def to_json(self) -> dict[str, Any]:
        return {
            "line": self.site.line,
            "module": self.site.spelled,
            "names": list(self.site.names),
            "reason": self.reason,
            "lost": self.lost,
        }


@dataclass
class ImportReport:
    """What `check_imports` found for one file."""

    path: Path
    anchor: Anchor | None
    anchored: list[ImportSite] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    outside_package: list[ImportSite] = field(default_factory=list)
    # anchored imports Python refuses where the file lies (the ones importing it would fail on)
    anchored_failing: list[ImportSite] = field(default_factory=list)
    # whether the file's text equals the installed module of the anchor's name (a plain copy)
    identical: bool | None = None

    @property
    def runtime_importable(self) -> bool:
        """Whether importing the file as it lies can get past its own imports (as far as a static
        check tells): no module-level import is unresolved or refused by Python."""
        failing = [u.site for u in self.unresolved] + self.outside_package + self.anchored_failing
        return not any(s.top_level and not s.guarded for s in failing)

    @property
    def import_error(self) -> str | None:
        """The error importing the file as it lies raises first, as far as a static check tells."""
        depth = _package_depth(self.path)
        failing = [u.site for u in self.unresolved] + self.outside_package + self.anchored_failing
        for site in sorted(failing, key=lambda s: (s.line, s.col)):
            if not site.top_level or site.guarded:
                continue
            if not site.level:
                return f"No module named '{site.module}'"
            if depth == 0:
                return NO_PARENT
            if site.level > depth:
                return _BEYOND
            return f"No module named '{site.spelled}' in its package"
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "anchor": (
                {**self.anchor.to_json(), "identical": self.identical} if self.anchor else None
            ),
            "anchoredLines": [s.line for s in self.anchored],
            "unresolved": [u.to_json() for u in self.unresolved],
            "outsidePackageLines": [s.line for s in self.outside_package],
            "runtimeImportable": self.runtime_importable,
            "importError": self.import_error,
        }

    def diagnostics(self) -> list[Diagnostic]:
        path = str(self.path)
        out = [
            Diagnostic("warning", UNRESOLVED, _unresolved_message(u), path, u.site.line)
            for u in self.unresolved
        ]
        if self.outside_package:
            first = self.outside_package[0]
            out.append(
                Diagnostic("warning", OUTSIDE_PACKAGE, _outside_message(self), path, first.line)
            )
        if self.anchor is not None and self.anchored:
            out.append(
                Diagnostic("info", ANCHORED, _anchored_message(self), path, self.anchored[0].line)
            )
        return sorted(out, key=lambda d: d.line)


def check_imports(source: SourceFile) -> ImportReport:
    """Every import of `source` (functions included) checked against the file system."""
    anchor = source.anchor
    report = ImportReport(source.path, anchor)
    installed = anchor.installed_file if anchor is not None else None
    if installed is not None:
        try:
            report.identical = installed.read_text(encoding="utf-8") == source.text
        except (OSError, UnicodeDecodeError):
            report.identical = False
    uses = _LazyUses(source.tree)  # walked only when an import does not resolve
    depth = _package_depth(source.path)
    for site in import_sites(source.tree):
        if site.level:
            if not _relative_resolves(site, source.path):
                reason = _relative_reason(site, source.path, depth, anchor)
                report.unresolved.append(Unresolved(site, reason, uses.lost(site)))
            elif anchor is not None:
                report.anchored.append(site)
                if site.level > depth or not _resolves_in_place(site, source.path):
                    report.anchored_failing.append(site)
            elif site.level > depth:
                report.outside_package.append(site)
        else:
            missing = _missing_module(site.module, source.path)
            if missing is not None and not site.guarded:
                report.unresolved.append(Unresolved(site, missing, uses.lost(site)))
    return report


# --- resolution ---------------------------------------------------------------------------------


def _package_depth(path: Path) -> int:
    """How many dots a relative import in `path` may use (0: not inside a package)."""
    name = guess_module_name(path)
    if not name:
        return 0
    parts = name.split(".")
    return len(parts) if path.stem == "__init__" else len(parts) - 1


def _relative_resolves(site: ImportSite, path: Path) -> bool:
    if module_path(site.module, site.level, path) is not None:
        return True
    if site.module:
        return False
    return all(module_path(n, site.level, path) is not None for n in site.names if n != "*")


def _resolves_in_place(site: ImportSite, path: Path) -> bool:
    """Whether a relative import resolves where the file lies (its anchor left aside)."""
    spec = RelativeImport(site.module, site.level, site.names, site.line)
    return resolves_from(spec, path)


def _relative_reason(site: ImportSite, path: Path, depth: int, anchor: Anchor | None) -> str:
    where = site.spelled
    if anchor is not None:
        return f"no module {where} here nor in installed {anchor.package} (as {anchor.module})"
    if depth == 0:
        return (
            f"no module {where} next to this file nor in an installed package whose layout "
            f"matches, and this file is not inside a package ({NO_PARENT})"
        )
    if site.level > depth:
        return f"{where} climbs above the top-level package ({_BEYOND})"
    return f"no module {where} in this package"


_BEYOND = "attempted relative import beyond top-level package"


def _missing_module(module: str, importer: Path) -> str | None:
    """Why an absolute import cannot be found (None: it can)."""
    parts = module.split(".")
    top = parts[0]
    if not top or top == "__future__" or top in sys.builtin_module_names:
        return None
    sibling = importer.parent / f"{top}.py"
    if is_file(sibling) or _is_dir(importer.parent / top):
        base = importer.parent / top
    else:
        found = find_top_level(top)
        if found is None:
            try:
                spec = importlib.util.find_spec(top)  # a top-level name: nothing is executed
            except (ImportError, ValueError):
                spec = None
            if spec is None:
                return f"no module named '{top}' in the workspace or installed"
            locations = list(spec.submodule_search_locations or [])
            if not locations:
                return None  # an extension or frozen module: no submodules to check
            base = Path(locations[0])
        elif found.suffix == ".py":
            return None if len(parts) == 1 else f"'{top}' is a module, not a package"
        else:
            base = found
    for depth, part in enumerate(parts[1:], start=2):
        if not _submodule_exists(base, part):
            return f"no module named '{'.'.join(parts[:depth])}'"
        base = base / part
    return None


def _is_dir(path: Path) -> bool:
    """`path.is_dir()`, False for a name the file system refuses (too long, a NUL byte)."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _submodule_exists(folder: Path, name: str) -> bool:
    if is_file(folder / f"{name}.py") or _is_dir(folder / name):
        return True
    try:
        return any(folder.glob(f"{name}.*.so")) or any(folder.glob(f"{name}.*.pyd"))
    except OSError:
        return False


# --- what the analysis lost -------------------------------------------------------------------


class _LazyUses:
    def __init__(self, tree: ast.Module) -> None:
        self._tree = tree
        self._uses: _Uses | None = None

    def lost(self, site: ImportSite) -> str:
        if self._uses is None:
            self._uses = _Uses(self._tree)
        return self._uses.lost(site)


class _Uses:
    """Where the names an import binds are used: class bases, sub-modules built in methods,
    other reads (each with the class or function reading it)."""

    def __init__(self, tree: ast.Module) -> None:
        self.bases: dict[str, list[str]] = {}
        self.built: dict[str, list[str]] = {}
        self.read: dict[str, list[str]] = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef):
                for base in stmt.bases:
                    root = _root_name(base.value if isinstance(base, ast.Subscript) else base)
                    if root:
                        self.bases.setdefault(root, []).append(stmt.name)
                for item in stmt.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        self._scan(item, f"{stmt.name}.{item.name}")
            elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                self._scan(stmt, stmt.name)

    def _scan(self, fn: ast.AST, where: str) -> None:
        for node in walk(fn):
            if isinstance(node, ast.Call):
                root = _root_name(node.func)
                if root and where.endswith(".__init__"):
                    _add(self.built, root, where.rsplit(".", 1)[0])
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                _add(self.read, node.id, where)

    def lost(self, site: ImportSite) -> str:
        if not site.level and site.module.split(".")[0] in _OPAQUE_ROOTS:
            return "nothing: the analysis does not read this library"
        parts = []
        for name in site.bound:
            if name in self.bases:
                parts.append(
                    f"{name}, a base class of {', '.join(self.bases[name])} (its methods and "
                    "attributes are not read)"
                )
            elif name in self.built:
                parts.append(
                    f"{name}, built as a sub-module in {', '.join(self.built[name])} (its layers "
                    "are missing from the tensor-parallel plan and its attention from the "
                    "context-parallel checks)"
                )
            elif name in self.read:
                parts.append(f"{name}, used in {', '.join(self.read[name][:3])}")
        if not parts:
            return "nothing the analysis reads uses it"
        return "; ".join(parts)


def _add(table: dict[str, list[str]], key: str, value: str) -> None:
    values = table.setdefault(key, [])
    if value not in values:
        values.append(value)


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


# --- messages -----------------------------------------------------------------------------------


def _statement(site: ImportSite) -> str:
    names = ", ".join(site.names[:4]) + (", ..." if len(site.names) > 4 else "")
    return f"from {site.spelled} import {names}" if site.is_from else f"import {site.module}"


def _unresolved_message(u: Unresolved) -> str:
    return f"unresolved import `{_statement(u.site)}`: {u.reason}. The analysis lost: {u.lost}." + (
        "" if not u.site.top_level else " Importing this file fails at this line."
    )


def _outside_message(report: ImportReport) -> str:
    lines = ", ".join(str(s.line) for s in report.outside_package[:6])
    reason = NO_PARENT if _package_depth(report.path) == 0 else _BEYOND
    return (
        f"relative imports (lines {lines}) resolve for the analysis by folder, but Python refuses "
        f"them here ({reason}): the runtime cannot import this file as it is. Fix: add the "
        "`__init__.py` files that make its folder a package, or use absolute imports."
    )


def _anchored_message(report: ImportReport) -> str:
    anchor = report.anchor
    assert anchor is not None
    version = f" {anchor.version}" if anchor.version else ""
    if anchor.installed_file:
        fix = (
            f"use the installed module {anchor.module}, or rewrite the relative imports as "
            f"absolute {anchor.package} imports"
        )
    else:
        fix = f"rewrite the relative imports as absolute {anchor.package} imports"
    return (
        f"relative imports resolved against installed {anchor.package}{version} as "
        f"{anchor.module} ({len(report.anchored)} import(s)"
        + ("" if anchor.installed_file else f"; {anchor.package} has no module of this name")
        + f"). Importing this file as it is fails ({report.import_error or NO_PARENT}). "
        f"Fix: {fix}."
    )
