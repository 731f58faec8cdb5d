"""Pipeline classes: their modules, flattened bases, methods, properties and components.

Files are parsed through `sources.read_source` (cached across the analysis) and relative imports
are located with `sources.module_path`; nothing is imported.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..astutil import self_attr, simple_name, walk
from ..model import AnalysisError
from ..sources import SourceFile, module_path, read_source

Func = ast.FunctionDef | ast.AsyncFunctionDef

# regex sources: compiled (and cached by `re`) on first use, not at import
_SELF_ATTR = r"\bself\.(\w+)"
_SELF_CALL = r"\bself\.(\w+)(?:\.forward|\.__call__)?\s*\("


@dataclass
class Module:
    """A parsed file's top-level classes, functions and imports."""

    source: SourceFile
    classes: dict[str, ast.ClassDef]
    functions: dict[str, Func]

    @property
    def path(self) -> pathlib.Path:
        return self.source.path

    @functools.cached_property
    def lines(self) -> list[str]:
        return self.source.text.splitlines()


@dataclass
class Member:
    mod: Module
    fn: Func
    owner: str
    closure: bool = False  # defined inside the walked function: sees its variables


def _build_module(source: SourceFile) -> Module:
    classes: dict[str, ast.ClassDef] = {}
    functions: dict[str, Func] = {}
    for node in source.tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = node
    return Module(source, classes, functions)


class Loader:
    """Modules of one analysis: the analyzed file, and others read on demand."""

    def __init__(self) -> None:
        self._cache: dict[pathlib.Path, Module | None] = {}

    def add(self, source: SourceFile) -> Module:
        mod = _build_module(source)
        self._cache[source.path] = mod
        return mod

    def load(self, path: pathlib.Path) -> Module | None:
        if path not in self._cache:
            try:
                self._cache[path] = _build_module(read_source(path))
            except AnalysisError:
                self._cache[path] = None
        return self._cache[path]

    def resolve_class(self, mod: Module, name: str) -> tuple[Module, ast.ClassDef] | None:
        """A class by local name: defined in `mod`, or imported into it with a relative import."""
        if name in mod.classes:
            return mod, mod.classes[name]
        imp = mod.source.imports.get(name)
        if imp is None:
            return None
        module, level, orig = imp
        if not level or orig is None:
            return None
        target = module_path(module, level, mod.path)
        other = self.load(target) if target is not None else None
        if other is not None and orig in other.classes:
            return other, other.classes[orig]
        return None


def _decorator_names(fn: Func) -> set[str]:
    return {name for d in fn.decorator_list if (name := simple_name(d)) is not None}


class ClassCtx:
    """A pipeline class with its same-file (optionally cross-file) bases flattened, first wins."""

    def __init__(
        self,
        loader: Loader,
        mod: Module,
        cls: ast.ClassDef,
        cross_file: bool,
        call_args: Mapping[str, object] | None = None,
    ) -> None:
        self.mod = mod
        # the arguments the caller says `__call__` gets (values, or `GIVEN`); None: not told, the
        # defaults hold and an optional input defaulting to None may be passed (`UNSET`)
        self.call_args = call_args
        # how evidence names the path the reading follows
        self.path_words = "on the default path" if call_args is None else "for the call given"
        self.cls = cls
        self.name = cls.name
        self.methods: dict[str, Member] = {}
        self.properties: dict[str, Member] = {}
        self.mro: list[tuple[Module, ast.ClassDef]] = []
        seen: set[int] = set()
        queue: list[tuple[Module, ast.ClassDef]] = [(mod, cls)]
        while queue and len(self.mro) < 16:
            m, c = queue.pop(0)
            if id(c) in seen:
                continue
            seen.add(id(c))
            self.mro.append((m, c))
            for b in c.bases:
                name = simple_name(b)
                if name is None:
                    continue
                found = (
                    loader.resolve_class(m, name)
                    if cross_file
                    else ((m, m.classes[name]) if name in m.classes else None)
                )
                if found is not None:
                    queue.append(found)
        for m, c in self.mro:
            for node in c.body:
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if node.name in self.methods or node.name in self.properties:
                    continue
                decos = _decorator_names(node)
                if "property" in decos or "cached_property" in decos:
                    self.properties[node.name] = Member(m, node, c.name)
                elif "setter" not in decos:
                    self.methods[node.name] = Member(m, node, c.name)
        self.components, self.subpipes = self._components()
        # self attributes read / called anywhere in the class (a cheap scan of the source text)
        self.read_attrs: set[str] = set()
        self.called_attrs: set[str] = set()
        for m, c in self.mro:
            segment = "\n".join(m.lines[c.lineno - 1 : c.end_lineno or c.lineno])
            self.read_attrs.update(re.findall(_SELF_ATTR, segment))
            self.called_attrs.update(re.findall(_SELF_CALL, segment))
        members = set(self.methods) | set(self.properties)
        self.read_attrs -= members
        self.called_attrs -= members
        # ids of "hot" nodes: ancestors of calls that may reach a denoiser (the walker skips
        # others), and of the functions already indexed (filled by `calls.mark_hot`)
        self.hot: set[int] = set()
        self.indexed: set[int] = set()

    def _components(self) -> tuple[set[str], dict[str, tuple[Module, str]]]:
        """`__init__` parameters / `register_modules` names, and `self.x = SomePipeline(...)`."""
        comps: set[str] = set()
        subpipes: dict[str, tuple[Module, str]] = {}
        init = self.methods.get("__init__")
        if init is None:
            return comps, subpipes
        a = init.fn.args
        comps.update(p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs][1:])
        for node in walk(init.fn):
            if not isinstance(node, (ast.Call, ast.Assign)):
                continue
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Attribute) and f.attr == "register_modules":
                    comps.update(k.arg for k in node.keywords if k.arg)
                continue
            if not isinstance(node.value, ast.Call):
                continue
            callee = simple_name(node.value.func)
            for t in node.targets:
                attr = self_attr(t)
                if attr and callee and callee[:1].isupper():
                    subpipes[attr] = (init.mod, callee)
        return comps, subpipes

    def has_call(self) -> bool:
        return "__call__" in self.methods


def own_or_local_methods(mod: Module, cls: ast.ClassDef) -> Iterator[str]:
    """Method names of `cls` and of its bases defined in the same file."""
    seen: set[int] = set()
    queue = [cls]
    while queue:
        c = queue.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        for node in c.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node.name
        for b in c.bases:
            name = simple_name(b)
            if name and name in mod.classes:
                queue.append(mod.classes[name])
