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
"""

from __future__ import annotations

import ast
import bisect
import os
import re
import stat
import sys
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .model import AnalysisError

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
            chunks = _chunks(self.text) if self.lazy and self._tree is None else None
            if chunks is not None:
                self._top = _LazyDefinitions(self, chunks)
            else:
                self._top = _definitions(_flat_top_level(self.tree.body))
        return self._top

    @property
    def imports(self) -> dict[str, tuple[str, int, str | None]]:
        """Local name -> (module, relative level, imported attribute or None for `import m`)."""
        if self._imports is None:
            if self.lazy and self._tree is None and isinstance(self.top_level, _LazyDefinitions):
                statements = self.top_level.import_statements()
            else:
                statements = list(_flat_top_level(self.tree.body))
            imports: dict[str, tuple[str, int, str | None]] = {}
            for stmt in statements:
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


def _definitions(statements: Iterable[ast.stmt]) -> dict[str, ast.stmt]:
    top: dict[str, ast.stmt] = {}
    for stmt in statements:
        if isinstance(stmt, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            top[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    top[target.id] = stmt
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            top[stmt.target.id] = stmt
    return top


_DEFINITION = re.compile(
    r"^(?:@|(?:async\s+)?def\s+(?P<def>\w+)|class\s+(?P<cls>\w+)|(?P<var>\w+)\s*(?::[^=]*)?=[^=])"
)


@dataclass(frozen=True)
class _Chunk:
    start: int  # 0-based first line
    end: int  # exclusive
    name: str | None  # defined name (class, def, simple assignment)
    compound: bool  # `if`/`try`/`with` block: may define or import names inside


_STATEMENT_START = re.compile(
    r"^(?![ \t#)\]}\n\r]|else\b|elif\b|except\b|finally\b|case\b|\"|\')", re.M
)


def _chunks(text: str) -> list[_Chunk] | None:
    """Split a module into top-level statements by a scan for column-0 lines (C-speed regex).
    A column-0 line inside a multi-line string or bracket would split a statement; such a piece
    fails to parse and the caller then parses the whole file."""
    offsets = [m.start() for m in _STATEMENT_START.finditer(text)]
    if not offsets:
        return None
    newlines = [m.start() for m in re.finditer("\n", text)]
    lines = text.split("\n")
    starts: list[int] = []
    decorated = False
    for offset in offsets:
        line = bisect.bisect_left(newlines, offset)
        if not decorated:
            starts.append(line)
        decorated = lines[line].startswith("@")
    chunks: list[_Chunk] = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        head = next((ln for ln in lines[start:end] if not ln.startswith("@")), "")
        match = _DEFINITION.match(head)
        name = None
        if match:
            name = match.group("def") or match.group("cls") or match.group("var")
        compound = head.startswith(("if ", "try:", "with ", "for "))
        chunks.append(_Chunk(start, end, name, compound))
    return chunks


class _LazyDefinitions(Mapping[str, ast.stmt]):
    """Top-level definitions of a lazily read file, each parsed when first looked up."""

    def __init__(self, source: SourceFile, chunks: list[_Chunk]) -> None:
        self._source = source
        self._lines = source.text.split("\n")
        self._spans: dict[str, _Chunk] = {c.name: c for c in chunks if c.name}
        self._parsed: dict[str, ast.stmt] = {}
        self._compound = [c for c in chunks if c.compound]
        self._compound_done = False
        self._imports = [c for c in chunks if self._lines[c.start].startswith(("from ", "import "))]

    def _parse(self, chunk: _Chunk) -> list[ast.stmt]:
        # Leading newlines keep the file's line numbers without rewriting the tree.
        segment = "\n" * chunk.start + "\n".join(self._lines[chunk.start : chunk.end])
        try:
            return ast.parse(segment).body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            # the line scan cut a statement (a column-0 line inside a string): parse whole file
            try:
                tree = self._source.tree
            except AnalysisError:
                return []
            return [
                s
                for s in tree.body
                if chunk.start < getattr(s, "end_lineno", s.lineno) and s.lineno <= chunk.end
            ]

    def _load_compound(self) -> None:
        """Definitions inside top-level `if`/`try` blocks (optional imports, fallbacks)."""
        if self._compound_done:
            return
        self._compound_done = True
        for chunk in self._compound:
            for name, stmt in _definitions(_flat_top_level(self._parse(chunk))).items():
                self._parsed.setdefault(name, stmt)
                self._spans.setdefault(name, chunk)

    def __getitem__(self, name: str) -> ast.stmt:
        if name not in self._parsed:
            if name not in self._spans:
                self._load_compound()
                if name in self._parsed:
                    return self._parsed[name]
                raise KeyError(name)
            found = _definitions(_flat_top_level(self._parse(self._spans[name]))).get(name)
            if found is None:
                raise KeyError(name)
            self._parsed[name] = found
        return self._parsed[name]

    def __iter__(self) -> Iterator[str]:
        self._load_compound()
        return iter(self._spans)

    def __len__(self) -> int:
        self._load_compound()
        return len(self._spans)

    def import_statements(self) -> list[ast.stmt]:
        """All top-level imports, parsed together (their line numbers are not needed)."""
        text = "\n".join(
            "\n".join(self._lines[c.start : c.end]) for c in [*self._imports, *self._compound]
        )
        try:
            body = ast.parse(text).body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            try:
                body = self._source.tree.body
            except AnalysisError:
                return []
        return [s for s in _flat_top_level(body) if isinstance(s, ast.Import | ast.ImportFrom)]


def _flat_top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Top-level statements, looking inside `if`/`try` blocks (TYPE_CHECKING, optional imports)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            yield from _flat_top_level(stmt.body)
            yield from _flat_top_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from _flat_top_level(stmt.body)
            for handler in stmt.handlers:
                yield from _flat_top_level(handler.body)
            yield from _flat_top_level(stmt.orelse)
        else:
            yield stmt


# Parsed files, least recently used first. Bounded: ASTs are large and a long-lived server that
# has seen thousands of files would otherwise spend its time in the garbage collector.
_CACHE: OrderedDict[Path, tuple[tuple[int, int], SourceFile]] = OrderedDict()
CACHE_SIZE = 96


# The latest parsed version of each path (from disk or the editor's text), for `module_path`:
# it is given only the importer's path, and the importer's anchor depends on its text.
_LATEST: weakref.WeakValueDictionary[Path, SourceFile] = weakref.WeakValueDictionary()


def clear_caches() -> None:
    """Forget every parsed file (used by benchmarks to measure cold runs)."""
    _CACHE.clear()
    _package_dirs.clear()
    _package_trees.clear()


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
        source = SourceFile(
            path=path, text=decoded, module_name=_guess_module_name(path), lazy=True
        )
    else:
        source = _parse(path, decoded)
    _CACHE[path] = (key, source)
    _LATEST[path] = source
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return source


def _parse(path: Path, text: str) -> SourceFile:
    tree = _parse_tree(path, text)
    return SourceFile(path=path, text=text, _tree=tree, module_name=_guess_module_name(path))


def _parse_tree(path: Path, text: str) -> ast.Module:
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise AnalysisError(
            "syntax-error", f"{path}:{exc.lineno or 0}: syntax error: {exc.msg}"
        ) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise AnalysisError("unparsable", f"{path}: cannot parse ({type(exc).__name__})") from None


def _is_file(path: Path) -> bool:
    """`path.is_file()`, False for a name the file system refuses (too long, a NUL byte): an
    import naming such a module is an import that cannot be followed, not a failed analysis."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _guess_module_name(path: Path) -> str | None:
    """Dotted module name from the package folders above `path` (folders with __init__.py)."""
    parts = [path.stem] if path.stem != "__init__" else []
    parent = path.parent
    while _is_file(parent / "__init__.py"):
        parts.insert(0, parent.name)
        if parent.parent == parent:
            break
        parent = parent.parent
    return ".".join(parts) if parts else None


_package_dirs: dict[str, Path | None] = {}


def _find_top_level(name: str) -> Path | None:
    """Locate an installed top-level package or module on sys.path, without importing it."""
    if name in _package_dirs:
        return _package_dirs[name]
    found: Path | None = None
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        candidate = Path(entry) / name
        if _is_file(candidate / "__init__.py"):
            found = candidate
            break
        if _is_file(candidate.with_suffix(".py")):
            found = candidate.with_suffix(".py")
            break
    _package_dirs[name] = found
    return found


def module_path(module: str, level: int, importer: Path) -> Path | None:
    """File of `module` imported from `importer` (`level` dots of relative import).

    A relative import of a file that has an anchor (see `SourceFile.anchor`) resolves from the
    anchor's place in the installed package."""
    if level:
        key = Path(importer)
        source = _LATEST.get(key)
        if source is None and key in _CACHE:
            source = _CACHE[key][1]
        anchor = source.anchor if source is not None else None
        if anchor is not None:
            return _relative_path(module, level, anchor.path, anchor.root)
        return _relative_path(module, level, importer)
    parts = module.split(".")
    if not parts or parts[0] in _OPAQUE_ROOTS:
        return None
    # A sibling module of a loose (non-package) script.
    sibling = importer.parent / (parts[0] + ".py")
    sibling_pkg = importer.parent / parts[0] / "__init__.py"
    if _is_file(sibling) or _is_file(sibling_pkg):
        base = importer.parent
    else:
        top = _find_top_level(parts[0])
        if top is None:
            return None
        if top.suffix == ".py":
            return top if len(parts) == 1 else None
        base = top.parent
    return _module_file(base.joinpath(*parts))


def _relative_path(module: str, level: int, origin: Path, root: Path | None = None) -> Path | None:
    """`module` imported with `level` dots from a file at `origin`; with `root`, the import may
    not climb above that package folder (as Python refuses to leave the top-level package)."""
    base = origin.parent
    for _ in range(level - 1):
        if root is not None and base == root:
            return None
        base = base.parent
    parts = module.split(".") if module else []
    return _module_file(base.joinpath(*parts) if parts else base)


def _module_file(target: Path) -> Path | None:
    if _is_file(target / "__init__.py"):
        return target / "__init__.py"
    if _is_file(target.with_suffix(".py")):
        return target.with_suffix(".py")
    return None


# --- anchors: relative imports of a module copied out of its package ----------------------------

# Installed packages a copied module is matched against, in order.
ANCHOR_PACKAGES = ("diffusers",)

_RELATIVE_IMPORT = re.compile(r"^[ \t]*from[ \t]+\.", re.M)


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
        return self.path if _is_file(self.path) else None

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
    if source.lazy and source._tree is None and isinstance(source.top_level, _LazyDefinitions):
        statements: Iterable[ast.stmt] = source.top_level.import_statements()
    else:
        statements = _flat_top_level(source.tree.body)
    return [
        RelativeImport(s.module or "", s.level, tuple(a.name for a in s.names), s.lineno)
        for s in statements
        if isinstance(s, ast.ImportFrom) and s.level
    ]


def resolves_from(spec: RelativeImport, origin: Path, root: Path | None = None) -> bool:
    """Whether `spec` resolves for a file at `origin` (the module, or for `from . import x`
    each name as a submodule or the package itself)."""
    if _relative_path(spec.module, spec.level, origin, root) is not None:
        return True
    if spec.module:
        return False
    return all(_relative_path(name, spec.level, origin, root) is not None for name in spec.names)


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
        if root is None or _inside(path, root):
            continue
        scored = []
        for folder in _package_tree(root):
            origin = folder / path.name
            if not all(resolves_from(s, origin, root) for s in specs):
                continue
            names_found = all(_names_defined(s, origin, root) for s in specs)
            words = _affinity(path.stem, folder.relative_to(root).parts)
            depth = len(folder.relative_to(root).parts)
            key = (not names_found, not _is_file(origin), -words)
            scored.append((key, depth, folder, origin))
        if scored:
            best = min(item[0] for item in scored)
            tied = [item for item in scored if item[0] == best]
            if len(tied) > 1:  # prefer the folder whose modules import what this one imports
                spelled = {s.spelled for s in specs}
                tied.sort(key=lambda item: (-_import_likeness(item[2], spelled), item[1], item[2]))
            origin = tied[0][3]
            parts = [package, *origin.parent.relative_to(root).parts]
            if origin.stem != "__init__":
                parts.append(origin.stem)
            return Anchor(package, root, origin, ".".join(parts), _package_version(root))
    return None


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except (ValueError, OSError):
        return False


_package_trees: dict[Path, list[Path]] = {}


def _package_tree(root: Path) -> list[Path]:
    """Every package folder (with `__init__.py`) under `root`, `root` included."""
    if root not in _package_trees:
        found: list[Path] = []
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            if "__init__.py" in files:
                found.append(Path(folder))
            else:
                dirs[:] = []  # not a package: nothing below is importable relative to it
        _package_trees[root] = found
    return _package_trees[root]


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
    target = _relative_path(spec.module, spec.level, origin, root)
    text = None
    for name in spec.names:
        if name == "*":
            continue
        sub = f"{spec.module}.{name}" if spec.module else name
        if _relative_path(sub, spec.level, origin, root) is not None:
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


def installed_package(name: str) -> Path | None:
    """The folder of an installed top-level package, located without importing it."""
    top = _find_top_level(name)
    if top is not None:
        return top if top.suffix != ".py" else None
    try:
        import importlib.util

        spec = importlib.util.find_spec(name)  # a top-level name: nothing is executed
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


_VERSION = re.compile(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", re.M)


def _package_version(root: Path) -> str | None:
    try:
        match = _VERSION.search((root / "__init__.py").read_text(encoding="utf-8"))
    except OSError:
        match = None
    if match:
        return match.group(1)
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version(root.name)
    except (PackageNotFoundError, ValueError):
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


class Resolver:
    """Resolves names used in a module to class definitions, following imports across files."""

    def __init__(self, max_depth: int = 8) -> None:
        self.max_depth = max_depth

    def resolve_class(self, source: SourceFile, name: str, depth: int = 0) -> ClassRef:
        """`name` may be dotted (`nn.Module`, `attention.Block`)."""
        qual = qualified(source, name)
        if depth > self.max_depth:
            return ClassRef(name.split(".")[-1], qual)
        head, _, rest = name.partition(".")
        if not rest:
            stmt = source.top_level.get(name)
            if isinstance(stmt, ast.ClassDef):
                return ClassRef(name, qual, stmt, source)
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name | ast.Attribute):
                alias = ast.unparse(stmt.value)
                if alias != name:
                    return self.resolve_class(source, alias, depth + 1)
        imp = source.imports.get(head)
        if imp is None:
            return ClassRef(name.split(".")[-1], qual)
        module, level, attr = imp
        if attr is not None:
            # from module import attr  -> attr may be a class or a submodule
            target = module_path(module, level, source.path)
            sub = module_path(f"{module}.{attr}" if module else attr, level, source.path)
            if rest and sub is not None:
                return self._resolve_in_file(sub, rest, qual, depth)
            if target is not None:
                return self._resolve_in_file(
                    target, attr if not rest else f"{attr}.{rest}", qual, depth
                )
            return ClassRef(name.split(".")[-1], qual)
        # import module [as alias]; name = alias.Class
        if not rest:
            return ClassRef(name, qual)
        mod_parts = rest.split(".")
        for split in range(len(mod_parts) - 1, -1, -1):
            mod = ".".join([module, *mod_parts[:split]])
            path = module_path(mod, 0, source.path)
            if path is not None:
                return self._resolve_in_file(path, ".".join(mod_parts[split:]), qual, depth)
        return ClassRef(name.split(".")[-1], qual)

    def _resolve_in_file(self, path: Path, name: str, qual: str, depth: int) -> ClassRef:
        try:
            target = read_source(path, lazy=True)
        except AnalysisError:
            return ClassRef(name.split(".")[-1], qual)
        ref = self.resolve_class(target, name, depth + 1)
        if ref.node is None and ref.qualname.endswith(name):
            return ClassRef(ref.name, ref.qualname)
        return ref

    def bases(self, cls: ClassRef) -> list[ClassRef]:
        if cls.node is None or cls.source is None:
            return []
        out = []
        for base in cls.node.bases:
            try:
                text = ast.unparse(base)
            except Exception:  # pragma: no cover - unparse of odd nodes
                continue
            if isinstance(base, ast.Subscript):  # Generic[T]
                text = ast.unparse(base.value)
            out.append(self.resolve_class(cls.source, text))
        return out

    def mro(self, cls: ClassRef) -> list[ClassRef]:
        """Linearized ancestors (depth-first, left to right, duplicates dropped), `cls` first."""
        return list(self.iter_mro(cls))

    def iter_mro(self, cls: ClassRef) -> Iterator[ClassRef]:
        """Like `mro`, lazily: base files are read only when the walk reaches them."""
        seen: set[str] = set()
        stack = [cls]
        count = 0
        while stack and count < 64:
            current = stack.pop(0)
            if current.qualname in seen:
                continue
            seen.add(current.qualname)
            count += 1
            yield current
            stack = self.bases(current) + stack

    def find_method(self, cls: ClassRef, name: str) -> tuple[ast.FunctionDef, ClassRef] | None:
        for ancestor in self.iter_mro(cls):
            if ancestor.node is None:
                continue
            for stmt in ancestor.node.body:
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
                    return stmt, ancestor  # type: ignore[return-value]
        return None

    def base_qualnames(self, cls: ClassRef) -> list[str]:
        """Dotted names of the direct bases, without reading any other file."""
        if cls.node is None or cls.source is None:
            return []
        out = []
        for base in cls.node.bases:
            node = base.value if isinstance(base, ast.Subscript) else base
            if isinstance(node, ast.Name | ast.Attribute):
                out.append(qualified(cls.source, ast.unparse(node)))
        return out

    def derives_from(self, cls: ClassRef, simple_name: str, package: str | None = None) -> bool:
        """Whether an ancestor is named `simple_name` (optionally from `package`).

        Direct bases are checked by their imported names first; other files are read only when
        that does not decide it (an intermediate base class of the user's own).
        """

        def matches(qual: str) -> bool:
            return qual.rsplit(".", 1)[-1] == simple_name and (
                package is None or qual.split(".")[0] == package
            )

        seen: set[str] = set()
        frontier = [cls]
        while frontier and len(seen) < 64:
            current = frontier.pop(0)
            quals = self.base_qualnames(current)
            if any(matches(q) for q in quals):
                return True
            for base in self.bases(current):
                if base.qualname not in seen and base.node is not None:
                    seen.add(base.qualname)
                    frontier.append(base)
        return False

    def is_subclass_of(self, cls: ClassRef, simple_names: tuple[str, ...]) -> bool:
        """Whether an ancestor's name (last dotted part) is one of `simple_names`."""
        return any(a.name in simple_names for a in list(self.iter_mro(cls))[1:])
