"""Source files and name resolution across modules, without importing anything.

`SourceFile` holds a parsed module (standard `ast`, cached by path, size, mtime); `Resolver` turns
a name used in a module into where it is defined: a class in this or another source file (relative
imports, sibling modules, packages installed on `sys.path`), or a dotted qualified name when the
defining module is not worth reading (torch) or cannot be found.

A module copied out of its package (`transformer_x.py` taken from diffusers into a project, with
its `from ..attention import ...`) keeps relative imports that do not resolve where it now lies.
Such a file gets an `Anchor`: the package of an installed library (diffusers) where ALL its
relative imports resolve, chosen structurally (see `anchor_of`). Its relative imports are then
resolved, and its names qualified, as if it lay there.

Helpers live next to this module: `lazy_definitions` (parsing a file one definition at a time),
`module_files` (finding module files on disk and `sys.path`) and `anchors` (scoring the folders
of an installed package for an anchor).
"""

from __future__ import annotations

import ast
import re
import stat
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .anchors import Anchor as Anchor
from .anchors import RelativeImport as RelativeImport
from .anchors import anchor_in_package, inside, package_trees, relative_imports
from .anchors import resolves_from as resolves_from
from .astutil import clear_walks, run_memo
from .lazy_definitions import (
    LazyDefinitions,
    definitions,
    flat_top_level,
    parse_quietly,
    top_level_chunks,
)
from .model import AnalysisError
from .module_files import (
    find_top_level,
    guess_module_name,
    is_file,
    module_file,
    package_dirs,
    relative_path,
)
from .module_files import installed_package as installed_package

MAX_SOURCE_BYTES = 5_000_000

# Modules whose classes are terminal for our purposes: reading torch's sources would cost time and
# tell us nothing about a model's structure.
_OPAQUE_ROOTS = ("torch", "numpy", "typing", "einops", "math", "functools", "dataclasses")


@dataclass
class SourceFile:
    """A parsed module. Files read only to resolve names (`lazy`) are indexed by a line scan and
    parsed one top-level definition at a time; the whole tree is parsed on first use of `tree`."""

    path: Path
    text: str
    _tree: ast.Module | None = field(default=None, repr=False)
    module_name: str | None = None
    lazy: bool = False
    _top: Mapping[str, ast.stmt] | None = field(default=None, repr=False)
    _imports: dict[str, tuple[str, int, str | None]] | None = field(default=None, repr=False)
    _import_nodes: list[ast.Import | ast.ImportFrom] | None = field(default=None, repr=False)
    _anchor: Anchor | bool | None = field(default=False, repr=False)  # False: not decided yet

    @property
    def tree(self) -> ast.Module:
        if self._tree is None:
            self._tree = _parse_tree(self.path, self.text)
        return self._tree

    @property
    def top_level(self) -> Mapping[str, ast.stmt]:
        """Top-level classes, functions and simple assignments by name (last definition wins)."""
        if self._top is None:
            chunks = top_level_chunks(self.text) if self.lazy and self._tree is None else None
            if chunks is not None:
                self._top = LazyDefinitions(self, chunks)
            else:
                self._top = definitions(flat_top_level(self.tree.body))
        return self._top

    @property
    def imports(self) -> dict[str, tuple[str, int, str | None]]:
        """Local name -> (module, relative level, imported attribute or None for `import m`)."""
        if self._imports is None:
            imports: dict[str, tuple[str, int, str | None]] = {}
            for stmt in self.import_statements():
                if isinstance(stmt, ast.ImportFrom):
                    for alias in stmt.names:
                        if alias.name != "*":
                            local = alias.asname or alias.name
                            imports.setdefault(local, (stmt.module or "", stmt.level, alias.name))
                elif isinstance(stmt, ast.Import):
                    for alias in stmt.names:
                        if alias.asname:
                            imports.setdefault(alias.asname, (alias.name, 0, None))
                        else:
                            top = alias.name.split(".")[0]
                            imports.setdefault(top, (top, 0, None))
            self._imports = imports
        return self._imports

    def import_statements(self) -> list[ast.Import | ast.ImportFrom]:
        """Module-level imports, also inside `if`/`try` blocks; a file read lazily is not
        parsed whole for them."""
        if self._import_nodes is None:
            if self.lazy and self._tree is None and isinstance(self.top_level, LazyDefinitions):
                statements = self.top_level.import_statements()
            else:
                statements = list(flat_top_level(self.tree.body))
            self._import_nodes = [
                s for s in statements if isinstance(s, ast.Import | ast.ImportFrom)
            ]
        return self._import_nodes

    def classes(self) -> list[ast.ClassDef]:
        return [s for s in self.tree.body if isinstance(s, ast.ClassDef)]

    @property
    def anchor(self) -> Anchor | None:
        """Where this file's relative imports resolve when they do not where it lies (a module
        copied out of an installed package), else None. Decided once per parsed version."""
        if self._anchor is False:
            self._anchor = None
            if _RELATIVE_IMPORT.search(self.text):
                self._anchor = anchor_of(self.path, relative_imports(self))
        return self._anchor  # type: ignore[return-value]

    @property
    def dotted_name(self) -> str | None:
        """The module name its names are qualified with: the anchor's, else its package path's."""
        anchor = self.anchor
        return anchor.module if anchor is not None else self.module_name


# Parsed files, least recently used first. Bounded: ASTs are large and a long-lived server that
# has seen thousands of files would otherwise spend its time in the garbage collector.
_CACHE: OrderedDict[Path, tuple[tuple[int, int], SourceFile]] = OrderedDict()
CACHE_SIZE = 128


# The latest parsed version of each path (from disk or the editor's text), for `module_path`:
# it is given only the importer's path, and the importer's anchor depends on its text.
_LATEST: weakref.WeakValueDictionary[Path, SourceFile] = weakref.WeakValueDictionary()


def clear_caches() -> None:
    """Forget every parsed file (used by benchmarks to measure cold runs)."""
    _CACHE.clear()
    package_dirs.clear()
    package_trees.clear()
    clear_walks()


def read_source(path: Path, text: str | None = None, *, lazy: bool = False) -> SourceFile:
    """Parse `path` (or the given `text` for it). Raises AnalysisError with a one-line message.

    `lazy`: the file is only read to resolve names in it; its definitions are parsed on demand.
    """
    path = Path(path)
    if text is not None:
        source = _parse(path, text)
        _LATEST[path] = source
        return source
    try:
        st = path.stat()
    except FileNotFoundError:
        raise AnalysisError("file-not-found", f"{path}: no such file") from None
    except OSError as exc:
        raise AnalysisError("unreadable", f"{path}: cannot read ({exc.strerror})") from None
    except ValueError:  # a NUL byte in the name
        raise AnalysisError("unreadable", f"{path!r}: not a usable file name") from None
    if not stat.S_ISREG(st.st_mode):
        raise AnalysisError("not-a-file", f"{path}: not a regular file")
    key = (st.st_size, st.st_mtime_ns)
    cached = _CACHE.get(path)
    if cached and cached[0] == key:
        _CACHE.move_to_end(path)
        if not lazy:
            _ = cached[1].tree  # surfaces a syntax error of a file read lazily before
        _LATEST.setdefault(path, cached[1])
        return cached[1]
    if st.st_size > MAX_SOURCE_BYTES:
        raise AnalysisError("too-large", f"{path}: {st.st_size} bytes is too large to analyze")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise AnalysisError("unreadable", f"{path}: cannot read ({exc.strerror})") from None
    if b"\x00" in raw[:8192]:
        raise AnalysisError("binary-file", f"{path}: binary file, not Python source")
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AnalysisError(
            "not-utf8", f"{path}: not UTF-8 text (byte {exc.start}); is this a Python source?"
        ) from None
    if lazy:
        source = SourceFile(path=path, text=decoded, module_name=guess_module_name(path), lazy=True)
    else:
        source = _parse(path, decoded)
    _CACHE[path] = (key, source)
    _LATEST[path] = source
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return source


def _parse(path: Path, text: str) -> SourceFile:
    tree = _parse_tree(path, text)
    return SourceFile(path=path, text=text, _tree=tree, module_name=guess_module_name(path))


def _parse_tree(path: Path, text: str) -> ast.Module:
    try:
        return parse_quietly(text, filename=str(path))
    except SyntaxError as exc:
        raise AnalysisError(
            "syntax-error", f"syntax error: {exc.msg}", path=str(path), line=exc.lineno or 0
        ) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise AnalysisError(
            "unparsable", f"cannot parse ({type(exc).__name__})", path=str(path)
        ) from None


def module_path(module: str, level: int, importer: Path) -> Path | None:
    """File of `module` imported from `importer` (`level` dots of relative import).

    A relative import of a file that has an anchor (see `SourceFile.anchor`) resolves from the
    anchor's place in the installed package. Inside an analysis run the answers are kept for
    the run (the same imports are followed again and again; each asks the file system)."""
    anchor = _importer_anchor(importer) if level else None
    memo = run_memo("module_path")
    if memo is None:
        return _module_path(module, level, importer, anchor)
    key = (module, level, importer, anchor)
    if key not in memo:
        memo[key] = _module_path(module, level, importer, anchor)
    return memo[key]


def _importer_anchor(importer: Path) -> Anchor | None:
    key = Path(importer)
    source = _LATEST.get(key)
    if source is None and key in _CACHE:
        source = _CACHE[key][1]
    return source.anchor if source is not None else None


def _module_path(module: str, level: int, importer: Path, anchor: Anchor | None) -> Path | None:
    if level:
        if anchor is not None:
            return relative_path(module, level, anchor.path, anchor.root)
        return relative_path(module, level, importer)
    parts = module.split(".")
    if not parts or parts[0] in _OPAQUE_ROOTS:
        return None
    # A sibling module of a loose (non-package) script.
    sibling = importer.parent / (parts[0] + ".py")
    sibling_pkg = importer.parent / parts[0] / "__init__.py"
    if is_file(sibling) or is_file(sibling_pkg):
        base = importer.parent
    else:
        top = find_top_level(parts[0])
        if top is None:
            return None
        if top.suffix == ".py":
            return top if len(parts) == 1 else None
        base = top.parent
    return module_file(base.joinpath(*parts))


# --- anchors: relative imports of a module copied out of its package ----------------------------

# Installed packages a copied module is matched against, in order.
ANCHOR_PACKAGES = ("diffusers",)

_RELATIVE_IMPORT = re.compile(r"^[ \t]*from[ \t]+\.", re.M)


def anchor_of(path: Path, specs: list[RelativeImport]) -> Anchor | None:
    """The installed package where ALL `specs` resolve, when they do not all resolve at `path`.

    Candidates are the package folders of each `ANCHOR_PACKAGES` library (found on `sys.path`
    without importing it); among those where every import resolves, the one whose imported names
    are all found there, then the one holding a module of the same file name (a copy), then the
    one whose folder names share the most words with the file name wins (`transformer_x.py` ->
    `models/transformers`, `pipeline_x_y.py` -> `pipelines/x_y`), then the shallowest."""
    if not specs or all(resolves_from(s, path) for s in specs):
        return None
    for package in ANCHOR_PACKAGES:
        root = installed_package(package)
        if root is None or inside(path, root):
            continue
        found = anchor_in_package(package, root, path, specs)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class ClassRef:
    """A resolved class: its AST node and source file, or only a qualified name."""

    name: str
    qualname: str
    node: ast.ClassDef | None = None
    source: SourceFile | None = None


def qualified(source: SourceFile, name: str) -> str:
    """Best-effort dotted name of `name` as seen from `source` (no file access)."""
    head, _, rest = name.partition(".")
    imp = source.imports.get(head)
    if imp is None:
        prefix = source.dotted_name or source.path.stem
        return f"{prefix}.{name}"
    module, level, attr = imp
    if level:
        base = (source.dotted_name or "").split(".")
        if source.path.stem != "__init__":
            base = base[:-1]
        base = base[: len(base) - (level - 1)] if level > 1 else base
        module = ".".join([*base, module] if module else base)
    full = f"{module}.{attr}" if attr else module
    return f"{full}.{rest}" if rest else full
