"""Name resolution across modules for one analysis run, without importing anything: classes by
name (following imports, aliases and re-exports), their bases and method resolution order, their
methods and `__init__`s (`Resolver`). The files it reads come from `sources.read_source`."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from .model import AnalysisError
from .sources import ClassRef, SourceFile, module_path, qualified, read_source


def _class_key(cls: ClassRef) -> tuple[int, int, str]:
    """What a class's MRO depends on: its node and file (by identity) and its qualified name."""
    return id(cls.node), id(cls.source), cls.qualname


def _same_class(kept: ClassRef, cls: ClassRef) -> bool:
    return kept.node is cls.node and kept.source is cls.source and kept.qualname == cls.qualname


class Resolver:
    """Resolves names used in a module to class definitions, following imports across files."""

    def __init__(self, max_depth: int = 8) -> None:
        self.max_depth = max_depth
        # One resolver serves one analysis run, whose passes ask the same questions again and
        # again (the MRO of each block, each base's bases): answers are kept for the resolver's
        # life, keyed by the identity of the file or class node asked about (held in the value,
        # so the id is not reused). Files read during the run are the same objects throughout.
        self._classes: dict[tuple[int, str, int], tuple[SourceFile, ClassRef]] = {}
        self._bases: dict[int, tuple[ast.ClassDef, SourceFile, tuple[ClassRef, ...]]] = {}
        self._mros: dict[tuple[int, int, str], tuple[ClassRef, tuple[ClassRef, ...]]] = {}
        self._methods: dict[
            tuple[int, int, str, str], tuple[ClassRef, tuple[ast.FunctionDef, ClassRef] | None]
        ] = {}
        self._inits: dict[
            tuple[int, int, str], tuple[ClassRef, tuple[tuple[ast.FunctionDef, ClassRef], ...]]
        ] = {}

    def resolve_class(self, source: SourceFile, name: str, depth: int = 0) -> ClassRef:
        """`name` may be dotted (`nn.Module`, `attention.Block`)."""
        key = (id(source), name, depth)
        hit = self._classes.get(key)
        if hit is not None and hit[0] is source:
            return hit[1]
        ref = self._resolve_class(source, name, depth)
        self._classes[key] = (source, ref)
        return ref

    def _resolve_class(self, source: SourceFile, name: str, depth: int) -> ClassRef:
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

    def find_function(
        self, source: SourceFile, name: str
    ) -> tuple[ast.FunctionDef, SourceFile] | None:
        """A function defined in `source`, or imported into it by name (`from ..embeddings
        import apply_rotary_emb`), with the file that defines it; None when not found."""
        stmt = source.top_level.get(name)
        if isinstance(stmt, ast.FunctionDef):
            return stmt, source
        imp = source.imports.get(name)
        if imp is None or imp[2] is None:
            return None
        module, level, attr = imp
        path = module_path(module, level, source.path)
        if path is None:
            return None
        try:
            target = read_source(path, lazy=True)
        except AnalysisError:
            return None
        stmt = target.top_level.get(attr)
        return (stmt, target) if isinstance(stmt, ast.FunctionDef) else None

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
        hit = self._bases.get(id(cls.node))
        if hit is not None and hit[0] is cls.node and hit[1] is cls.source:
            return list(hit[2])
        out = self._read_bases(cls.node, cls.source)
        self._bases[id(cls.node)] = (cls.node, cls.source, tuple(out))
        return out

    def _read_bases(self, node: ast.ClassDef, source: SourceFile) -> list[ClassRef]:
        out = []
        for base in node.bases:
            try:
                text = ast.unparse(base)
            except Exception:  # pragma: no cover - unparse of odd nodes
                continue
            if isinstance(base, ast.Subscript):  # Generic[T]
                text = ast.unparse(base.value)
            out.append(self.resolve_class(source, text))
        return out

    def mro(self, cls: ClassRef) -> list[ClassRef]:
        """Linearized ancestors (depth-first, left to right, duplicates dropped), `cls` first."""
        return list(self.iter_mro(cls))

    def iter_mro(self, cls: ClassRef) -> Iterator[ClassRef]:
        """Like `mro`, lazily: base files are read only when the walk reaches them. A walk that
        ran to its end is kept for the resolver's life."""
        key = _class_key(cls)
        hit = self._mros.get(key)
        if hit is not None and _same_class(hit[0], cls):
            yield from hit[1]
            return
        walked: list[ClassRef] = []
        seen: set[str] = set()
        stack = [cls]
        count = 0
        while stack and count < 64:
            current = stack.pop(0)
            if current.qualname in seen:
                continue
            seen.add(current.qualname)
            count += 1
            walked.append(current)
            yield current
            stack = self.bases(current) + stack
        self._mros[key] = (cls, tuple(walked))

    def find_method(self, cls: ClassRef, name: str) -> tuple[ast.FunctionDef, ClassRef] | None:
        key = (*_class_key(cls), name)
        hit = self._methods.get(key)
        if hit is not None and _same_class(hit[0], cls):
            return hit[1]
        found = self._find_method(cls, name)
        self._methods[key] = (cls, found)
        return found

    def _find_method(self, cls: ClassRef, name: str) -> tuple[ast.FunctionDef, ClassRef] | None:
        for ancestor in self.iter_mro(cls):
            if ancestor.node is None:
                continue
            for stmt in ancestor.node.body:
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
                    return stmt, ancestor  # type: ignore[return-value]
        return None

    def init_methods(self, cls: ClassRef) -> list[tuple[ast.FunctionDef, ClassRef]]:
        """Every `__init__` of `cls` and its bases, the most derived first: the attributes a
        class builds include those its bases' `__init__` build through `super().__init__()` (a
        block subclass that only changes an argument keeps its base's modules). Readers take
        an attribute from the first `__init__` that assigns it."""
        key = _class_key(cls)
        hit = self._inits.get(key)
        if hit is not None and _same_class(hit[0], cls):
            return list(hit[1])
        out: list[tuple[ast.FunctionDef, ClassRef]] = []
        for ancestor in self.iter_mro(cls):
            if ancestor.node is None:
                continue
            out += [
                (stmt, ancestor)
                for stmt in ancestor.node.body
                if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__"
            ]
        self._inits[key] = (cls, tuple(out))
        return out

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
