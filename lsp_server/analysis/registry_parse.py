"""Parsing cache-dit's modules for the registries: the `@<Register>.register("name")`
decorators (`RawReg`), the activation calls (`_safe_import(".module", "Target")`) and imports
that load modules (`Activation`), and each register class' lookup mode and separate-CFG prefix
list (`ModuleInfo`). Static: `ast` only."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .astutil import simple_name, walk
from .registry_types import MatchMode, RegistryKind

_ACTIVATOR_FUNCS = frozenset({"_safe_import", "import_module"})


@dataclass(frozen=True)
class RawReg:
    kind: RegistryKind
    name: str
    register_class: str
    line: int
    target: str
    sort_key: tuple[int, int]  # (def line, position from the bottom of the decorator stack)
    handled_names: frozenset[str] = frozenset()
    sets_separate_cfg: bool = False


@dataclass(frozen=True)
class Activation:
    scope: str  # enclosing top-level function name, or "<module>"
    line: int
    modules: tuple[Path, ...]
    target: str | None
    conditional: bool


@dataclass
class ModuleInfo:
    path: Path
    rel: str
    regs: list[RawReg] = field(default_factory=list)
    imports: list[tuple[int, tuple[Path, ...]]] = field(default_factory=list)
    activations: list[Activation] = field(default_factory=list)
    match_modes: dict[RegistryKind, MatchMode] = field(default_factory=dict)
    separate_cfg_prefixes: tuple[tuple[str, ...], int] | None = None  # (names, line)


def _kind_of_register_class(name: str) -> RegistryKind | None:
    if name.startswith("BlockAdapterRegist"):
        return "adapter"
    if not name.endswith(("Register", "Registry")) or "Planner" not in name:
        return None
    if "ControlNet" in name:
        return "controlnet_cp"
    if "TextEncoder" in name:
        return "text_encoder_tp"
    if "AutoEncoder" in name or "Autoencoder" in name or "Vae" in name or "VAE" in name:
        return "vae_dp"
    if "ContextParallel" in name:
        return "cp"
    if "TensorParallel" in name:
        return "tp"
    return None


def _str_const(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _resolve_module(
    from_file: Path, module: str | None, level: int, root: Path, names: Iterable[str] = ()
) -> tuple[Path, ...]:
    """Files a (relative or ``cache_dit.``-absolute) import may execute, most general first."""
    if level > 0:
        base = from_file.parent
        for _ in range(level - 1):
            base = base.parent
        parts = module.split(".") if module else []
    else:
        if not module:
            return ()
        parts = module.split(".")
        if parts[0] != root.name:
            return ()
        base = root.parent
    target = base.joinpath(*parts)
    out: list[Path] = []
    if target.is_dir():
        out.append(target / "__init__.py")
        out.extend(target / f"{n}.py" for n in names if n != "*")
    else:
        out.append(target.with_name(target.name + ".py"))
    return tuple(p for p in out if p.is_file())


def _factory_facts(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[frozenset[str], bool]:
    """(names an adapter factory uses, whether it passes `has_separate_cfg=True`)."""
    names: set[str] = set()
    separate = False
    for sub in walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            names.add(sub.attr)
        elif isinstance(sub, ast.alias):
            names.add(sub.name.rsplit(".", 1)[-1])
            if sub.asname:
                names.add(sub.asname)
        elif (
            isinstance(sub, ast.keyword)
            and sub.arg == "has_separate_cfg"
            and isinstance(sub.value, ast.Constant)
            and sub.value.value is True
        ):
            separate = True
    return frozenset(names), separate


def _separate_cfg_prefixes(node: ast.ClassDef) -> tuple[tuple[str, ...], int] | None:
    """A class-level list of names that a method of the register matches with `startswith`
    and answers `True` for: names whose pipelines get separate CFG whatever the adapter says."""
    lists: dict[str, tuple[tuple[str, ...], int]] = {}
    for stmt in node.body:
        target = value = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign):
            target, value = stmt.target, stmt.value
        if not isinstance(target, ast.Name) or not isinstance(value, ast.List | ast.Tuple):
            continue
        items = [_str_const(e) for e in value.elts]
        if items and all(isinstance(i, str) for i in items):
            lists[target.id] = (tuple(i for i in items if i is not None), stmt.lineno)
    for sub in walk(node):
        if not (isinstance(sub, ast.For) and isinstance(sub.iter, ast.Attribute)):
            continue
        if sub.iter.attr not in lists:
            continue
        body = [n for stmt in sub.body for n in walk(stmt)]
        matches = any(isinstance(n, ast.Call) and simple_name(n.func) == "startswith" for n in body)
        answers_true = any(
            isinstance(n, ast.Return)
            and isinstance(n.value, ast.Constant)
            and n.value.value is True
            for n in body
        )
        if matches and answers_true:
            return lists[sub.iter.attr]
    return None


class Parser:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.problems: list[str] = []

    def rel(self, path: Path) -> str:
        try:
            return (Path(self.root.name) / path.relative_to(self.root)).as_posix()
        except ValueError:
            return path.as_posix()

    def parse(self, path: Path, text: str) -> ModuleInfo | None:
        info = ModuleInfo(path=path, rel=self.rel(path))
        try:
            tree = ast.parse(text, filename=str(path))
        except (SyntaxError, ValueError) as exc:
            self.problems.append(f"{info.rel}: not parsed ({exc.__class__.__name__})")
            return None
        self._module_body(info, tree.body, conditional=False)
        return info

    # Module level: decorated definitions, imports, module-level activation calls.
    def _module_body(self, info: ModuleInfo, body: list[ast.stmt], conditional: bool) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._decorators(info, stmt)
                if isinstance(stmt, ast.ClassDef):
                    self._register_class(info, stmt)
                else:
                    self._calls_in(info, stmt.body, stmt.name, conditional=False)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self._import(info, stmt)
            elif isinstance(stmt, ast.If):
                self._module_body(info, stmt.body, True)
                self._module_body(info, stmt.orelse, True)
            elif _is_try(stmt):
                for part, part_conditional in _try_parts(stmt):
                    self._module_body(info, part, conditional or part_conditional)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                self._module_body(info, stmt.body, conditional)
            else:
                self._calls_in(info, [stmt], "<module>", conditional)

    def _import(self, info: ModuleInfo, stmt: ast.Import | ast.ImportFrom) -> None:
        paths: tuple[Path, ...] = ()
        if isinstance(stmt, ast.ImportFrom):
            names = [a.name for a in stmt.names]
            paths = _resolve_module(info.path, stmt.module, stmt.level, self.root, names)
        else:
            for alias in stmt.names:
                paths += _resolve_module(info.path, alias.name, 0, self.root)
        if paths:
            info.imports.append((stmt.lineno, paths))

    def _decorators(
        self, info: ModuleInfo, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    ) -> None:
        # Stacked decorators apply bottom-up, so the lowest one registers first.
        for depth, deco in enumerate(reversed(node.decorator_list)):
            if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)):
                continue
            if deco.func.attr != "register":
                continue
            register_class = simple_name(deco.func.value)
            kind = _kind_of_register_class(register_class or "")
            if kind is None or register_class is None:
                continue
            name_node = deco.args[0] if deco.args else None
            supported_node = deco.args[1] if len(deco.args) > 1 else None
            for kw in deco.keywords:
                if kw.arg == "name":
                    name_node = kw.value
                elif kw.arg == "supported":
                    supported_node = kw.value
            name = _str_const(name_node)
            if name is None:
                self.problems.append(
                    f"{info.rel}:{deco.lineno}: {register_class}.register() name is not a string "
                    "literal; skipped"
                )
                continue
            if isinstance(supported_node, ast.Constant) and supported_node.value is False:
                continue  # `supported=False` -> never stored in the registry
            handled: frozenset[str] = frozenset()
            separate = False
            if kind == "adapter" and not isinstance(node, ast.ClassDef):
                handled, separate = _factory_facts(node)
            info.regs.append(
                RawReg(
                    kind,
                    name,
                    register_class,
                    deco.lineno,
                    node.name,
                    (node.lineno, depth),
                    handled,
                    separate,
                )
            )

    def _register_class(self, info: ModuleInfo, node: ast.ClassDef) -> None:
        kind = _kind_of_register_class(node.name)
        if kind is None:
            return
        # Lookup by `.startswith(...)` -> prefix registry; otherwise `name in registry` -> exact.
        uses_startswith = False
        uses_in = False
        for sub in walk(node):
            if isinstance(sub, ast.Call) and simple_name(sub.func) == "startswith":
                uses_startswith = True
            elif isinstance(sub, ast.Compare) and any(isinstance(o, ast.In) for o in sub.ops):
                uses_in = True
        if uses_startswith or uses_in:
            info.match_modes.setdefault(kind, "prefix" if uses_startswith else "exact")
        if kind == "adapter":
            found = _separate_cfg_prefixes(node)
            if found is not None:
                info.separate_cfg_prefixes = found

    def _calls_in(
        self, info: ModuleInfo, body: list[ast.stmt], scope: str, conditional: bool
    ) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue  # runs only when called
            if isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While)):
                self._calls_in(info, stmt.body, scope, True)
                self._calls_in(info, stmt.orelse, scope, True)
            elif _is_try(stmt):
                for part, part_conditional in _try_parts(stmt):
                    self._calls_in(info, part, scope, conditional or part_conditional)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                self._calls_in(info, stmt.body, scope, conditional)
            elif isinstance(stmt, ast.Match):
                for case in stmt.cases:
                    self._calls_in(info, case.body, scope, True)
            else:
                for sub in walk(stmt):
                    if isinstance(sub, ast.Call):
                        self._activation(info, sub, scope, conditional)

    def _activation(self, info: ModuleInfo, call: ast.Call, scope: str, cond: bool) -> None:
        if simple_name(call.func) not in _ACTIVATOR_FUNCS or not call.args:
            return
        module = _str_const(call.args[0])
        if module is None:
            return
        level = len(module) - len(module.lstrip("."))
        target = _str_const(call.args[1]) if len(call.args) > 1 else None
        paths = _resolve_module(info.path, module.lstrip(".") or None, level, self.root)
        if paths:
            info.activations.append(Activation(scope, call.lineno, paths, target, cond))


def _is_try(stmt: ast.stmt) -> bool:
    # ast.Try, and ast.TryStar on Python >= 3.11.
    return isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar"


def _try_parts(stmt: ast.stmt) -> list[tuple[list[ast.stmt], bool]]:
    """The statement lists of a try statement, each with whether it runs only conditionally."""
    parts: list[tuple[list[ast.stmt], bool]] = [(getattr(stmt, "body", []), False)]
    parts += [(handler.body, True) for handler in getattr(stmt, "handlers", [])]
    parts += [(getattr(stmt, "orelse", []), False), (getattr(stmt, "finalbody", []), False)]
    return parts
