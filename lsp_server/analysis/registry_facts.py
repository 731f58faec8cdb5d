"""Registry facts: what the installed cache-dit already registers, read statically from its source.

cache-dit keeps class-level registries filled by decorators when its modules are imported:

* ``@BlockAdapterRegister.register("Name", supported=True)`` on the adapter factories
  (``cache_dit/caching/block_adapters/adapters.py``, activated by ``block_adapters/__init__.py``);
* ``@ContextParallelismPlannerRegister.register("Prefix")`` and
  ``@TensorParallelismPlannerRegister.register("Prefix")`` on the transformer planners
  (``cache_dit/distributed/transformers/*.py``, activated lazily by ``_activate_cp_planners`` /
  ``_activate_tp_planners`` in ``distributed/transformers/planners.py``);
* ``TextEncoderTensorParallelismPlannerRegister``, ``AutoEncoderDataParallelismPlannerRegister``
  and ``ControlNetContextParallelismPlannerRegister`` (``distributed/text_encoders``,
  ``distributed/autoencoders``, ``distributed/controlnets``).

Lookups walk a registry in insertion order and return the FIRST name that is a prefix of the class
name (``cls_name.startswith(name)``); the auto-encoder registry matches the exact class name. This
module reproduces that order without importing anything: it locates the package directory with
``importlib.util.find_spec("cache_dit")`` (top-level name only, which does not execute the
package), parses the relevant ``.py`` files with ``ast``, and replays the activation order (the
``_safe_import(".module", "Target")`` calls of each activation function, the top-level relative
imports of each loaded module, source order inside a module, and bottom-up order for stacked
decorators). ``supported=False`` registrations are skipped, activations nested under an ``if``
(e.g. the Nunchaku planners, only when ``nunchaku`` is installed) are marked ``conditional``, and
decorated definitions that no activation reaches are marked ``inactive``. Which registry a
decorator belongs to, and whether its lookup is by prefix or exact name, is read from the register
class names and their ``get_*`` methods, never from a hard-coded list of model names. The version
comes from the ``cache_dit-*.dist-info/METADATA`` next to the package (or ``_version.py``).

Two more facts come from the adapter registry's code, for ``shadowing_warnings``: the names each
adapter factory uses (the transformer classes it imports and asserts on: a factory registered
under a prefix of a class that it does not name belongs to another model), whether it sets
``has_separate_cfg=True``, and the register's own list of pipeline-name prefixes for which it
answers "separate CFG" (a class-level list of strings that a register method matches with
``startswith`` and answers ``True`` for). With ``cache_config.enable_separate_cfg=None`` cache-dit
consults both by pipeline class name whenever a BlockAdapter says ``has_separate_cfg=False``
(``CachedAdapter.check_context_kwargs``), which is why shadowing matters beyond the lookup.

SEPARATION OF CONCERNS: these facts are REPORTED ONLY (``RegistryFacts`` in the analyze output:
"is there already an adapter/planner for this class, would the proposed register name be shadowed
or shadow others"). The rest of the analyzer must never use them to infer block lists, forward
patterns, CFG handling or parallelism plans -- those are derived from the model source alone, so a
model that cache-dit already supports is analyzed exactly like a novel one.

Public API: ``read_registries`` (cached per package root and file mtimes) and ``registry_facts``.
Standard library only; no work happens at import time.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .model import RegistryFacts

__all__ = [
    "Registration",
    "Registries",
    "clear_cache",
    "propose_register_name",
    "read_registries",
    "registry_facts",
    "shadowing_warnings",
]

RegistryKind = Literal["adapter", "cp", "tp", "text_encoder_tp", "vae_dp", "controlnet_cp"]
Status = Literal["active", "conditional", "inactive"]
MatchMode = Literal["prefix", "exact"]

_KINDS: tuple[RegistryKind, ...] = (
    "adapter",
    "cp",
    "tp",
    "text_encoder_tp",
    "vae_dp",
    "controlnet_cp",
)

# Plain pattern strings (compiled lazily by `re`'s own cache): a file is parsed only if it can hold
# a registration decorator, an activation call, or a register class definition.
_CANDIDATE_PATTERN = (
    r"(?:BlockAdapterRegist\w*|\w*PlannerRegister\w*)\s*\.\s*register\s*\("
    r"|_safe_import\s*\(|import_module\s*\("
    r"|class\s+(?:BlockAdapterRegist\w*|\w*PlannerRegister\w*)\b"
)
# CamelCase words: acronyms before a capitalized word ("LTX|Video"), capitalized words, bare
# acronyms ("SD", "T"), digit runs, then anything else as separators.
_WORD_PATTERN = r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^A-Za-z\d]+"
# Trailing words removed from a transformer class name to propose a register name.
_GENERIC_SUFFIXES = ("Transformer", "Model", "2D", "3D", "1D", "DiT", "Dit", "Pipeline")
_ACTIVATOR_FUNCS = frozenset({"_safe_import", "import_module"})
_NOT_INSTALLED = (
    "cache-dit is not installed (no importable 'cache_dit' package), so its adapter and planner "
    "registries could not be read; install cache-dit to get registry facts."
)


@dataclass(frozen=True)
class Registration:
    """One ``@<Register>.register("name")`` decorator, in its registry's runtime order."""

    kind: RegistryKind
    name: str
    register_class: str
    path: str  # posix path starting at the package directory, e.g. "cache_dit/caching/.../x.py"
    line: int  # line of the decorator
    target: str  # the decorated factory function or planner class
    status: Status = "active"
    # Adapter factories: the names the factory's body uses (the classes it imports and checks
    # for), and whether it builds a BlockAdapter with `has_separate_cfg=True`.
    handled_names: frozenset[str] = frozenset()
    sets_separate_cfg: bool = False

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Registries:
    """The registries of one installed cache-dit, in registration (= lookup) order.

    The ``*_planners``/``adapters`` name tuples exclude ``inactive`` registrations; all
    registrations (with file, line and status) are in ``registrations``.
    """

    root: str | None
    cache_dit_version: str | None
    adapters: tuple[str, ...] = ()
    cp_planners: tuple[str, ...] = ()
    tp_planners: tuple[str, ...] = ()
    text_encoder_planners: tuple[str, ...] = ()
    vae_planners: tuple[str, ...] = ()
    controlnet_planners: tuple[str, ...] = ()
    registrations: tuple[Registration, ...] = ()
    exact_match_kinds: tuple[RegistryKind, ...] = ("vae_dp",)
    problems: tuple[str, ...] = ()
    # Pipeline-name prefixes for which the adapter register answers "separate CFG" on its own
    # (a class-level list of names that a register method matches with `startswith` and
    # answers `True` for), and where that list is defined.
    separate_cfg_prefixes: tuple[str, ...] = ()
    separate_cfg_location: str | None = None

    @property
    def installed(self) -> bool:
        return self.root is not None

    def entries(
        self, kind: RegistryKind, include_inactive: bool = False
    ) -> tuple[Registration, ...]:
        return tuple(
            r
            for r in self.registrations
            if r.kind == kind and (include_inactive or r.status != "inactive")
        )

    def match_mode(self, kind: RegistryKind) -> MatchMode:
        return "exact" if kind in self.exact_match_kinds else "prefix"

    def first_match(self, kind: RegistryKind, class_name: str) -> Registration | None:
        """The registration cache-dit's lookup would return for ``class_name`` (first match)."""
        exact = self.match_mode(kind) == "exact"
        for reg in self.entries(kind):
            matches = class_name == reg.name if exact else class_name.startswith(reg.name)
            if matches:
                return reg
        return None


# --------------------------------------------------------------------------------------------
# Locating the package and its version (no import of cache_dit).


def _find_package_root() -> Path | None:
    try:
        spec = importlib.util.find_spec("cache_dit")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or ())
    if locations:
        return Path(locations[0])
    if spec.origin and spec.origin.endswith("__init__.py"):
        return Path(spec.origin).parent
    return None


def _metadata_headers(path: Path) -> dict[str, str]:
    headers: dict[str, str] = {}
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    break
                key, sep, value = line.partition(":")
                if sep and not key.startswith((" ", "\t")):
                    headers.setdefault(key.strip().lower(), value.strip())
    except OSError:
        return {}
    return headers


def _normalize_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _dist_info_candidates(root: Path) -> list[Path]:
    try:
        entries = list(root.parent.iterdir())
    except OSError:
        return []
    out = []
    for entry in entries:
        stem = entry.name
        if not stem.endswith(".dist-info"):
            continue
        dist = stem[: -len(".dist-info")].rsplit("-", 1)[0]
        if _normalize_dist(dist) == _normalize_dist(root.name):
            out.append(entry)
    return sorted(out)


def _version_from_dist_info(root: Path) -> str | None:
    found: list[tuple[int, str]] = []
    for info in _dist_info_candidates(root):
        headers = _metadata_headers(info / "METADATA")
        version = headers.get("version")
        if not version or _normalize_dist(headers.get("name", "")) != _normalize_dist(root.name):
            continue
        try:
            record = (info / "RECORD").read_text(encoding="utf-8", errors="replace")
        except OSError:
            record = ""
        owns_package = f"{root.name}/__init__.py" in record
        found.append((0 if owns_package else 1, version))
    return min(found)[1] if found else None


def _version_from_version_py(root: Path) -> str | None:
    path = root / "_version.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
            if names & {"__version__", "version"} and isinstance(node.value.value, str):
                return node.value.value
    return None


def _read_version(root: Path) -> str | None:
    return _version_from_dist_info(root) or _version_from_version_py(root)


# --------------------------------------------------------------------------------------------
# Parsing.


@dataclass(frozen=True)
class _RawReg:
    kind: RegistryKind
    name: str
    register_class: str
    line: int
    target: str
    sort_key: tuple[int, int]  # (def line, position from the bottom of the decorator stack)
    handled_names: frozenset[str] = frozenset()
    sets_separate_cfg: bool = False


@dataclass(frozen=True)
class _Activation:
    scope: str  # enclosing top-level function name, or "<module>"
    line: int
    modules: tuple[Path, ...]
    target: str | None
    conditional: bool


@dataclass
class _ModuleInfo:
    path: Path
    rel: str
    regs: list[_RawReg] = field(default_factory=list)
    imports: list[tuple[int, tuple[Path, ...]]] = field(default_factory=list)
    activations: list[_Activation] = field(default_factory=list)
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


def _dotted_tail(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
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
    for sub in ast.walk(node):
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
    for sub in ast.walk(node):
        if not (isinstance(sub, ast.For) and isinstance(sub.iter, ast.Attribute)):
            continue
        if sub.iter.attr not in lists:
            continue
        body = [n for stmt in sub.body for n in ast.walk(stmt)]
        matches = any(
            isinstance(n, ast.Call) and _dotted_tail(n.func) == "startswith" for n in body
        )
        answers_true = any(
            isinstance(n, ast.Return)
            and isinstance(n.value, ast.Constant)
            and n.value.value is True
            for n in body
        )
        if matches and answers_true:
            return lists[sub.iter.attr]
    return None


class _Parser:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.problems: list[str] = []

    def rel(self, path: Path) -> str:
        try:
            return (Path(self.root.name) / path.relative_to(self.root)).as_posix()
        except ValueError:
            return path.as_posix()

    def parse(self, path: Path, text: str) -> _ModuleInfo | None:
        info = _ModuleInfo(path=path, rel=self.rel(path))
        try:
            tree = ast.parse(text, filename=str(path))
        except (SyntaxError, ValueError) as exc:
            self.problems.append(f"{info.rel}: not parsed ({exc.__class__.__name__})")
            return None
        self._module_body(info, tree.body, conditional=False)
        return info

    # Module level: decorated definitions, imports, module-level activation calls.
    def _module_body(self, info: _ModuleInfo, body: list[ast.stmt], conditional: bool) -> None:
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

    def _import(self, info: _ModuleInfo, stmt: ast.Import | ast.ImportFrom) -> None:
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
        self, info: _ModuleInfo, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    ) -> None:
        # Stacked decorators apply bottom-up, so the lowest one registers first.
        for depth, deco in enumerate(reversed(node.decorator_list)):
            if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)):
                continue
            if deco.func.attr != "register":
                continue
            register_class = _dotted_tail(deco.func.value)
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
                _RawReg(
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

    def _register_class(self, info: _ModuleInfo, node: ast.ClassDef) -> None:
        kind = _kind_of_register_class(node.name)
        if kind is None:
            return
        # Lookup by `.startswith(...)` -> prefix registry; otherwise `name in registry` -> exact.
        uses_startswith = False
        uses_in = False
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and _dotted_tail(sub.func) == "startswith":
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
        self, info: _ModuleInfo, body: list[ast.stmt], scope: str, conditional: bool
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
                for sub in ast.walk(stmt):
                    if isinstance(sub, ast.Call):
                        self._activation(info, sub, scope, conditional)

    def _activation(self, info: _ModuleInfo, call: ast.Call, scope: str, cond: bool) -> None:
        if _dotted_tail(call.func) not in _ACTIVATOR_FUNCS or not call.args:
            return
        module = _str_const(call.args[0])
        if module is None:
            return
        level = len(module) - len(module.lstrip("."))
        target = _str_const(call.args[1]) if len(call.args) > 1 else None
        paths = _resolve_module(info.path, module.lstrip(".") or None, level, self.root)
        if paths:
            info.activations.append(_Activation(scope, call.lineno, paths, target, cond))


def _is_try(stmt: ast.stmt) -> bool:
    # ast.Try, and ast.TryStar on Python >= 3.11.
    return isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar"


def _try_parts(stmt: ast.stmt) -> list[tuple[list[ast.stmt], bool]]:
    """The statement lists of a try statement, each with whether it runs only conditionally."""
    parts: list[tuple[list[ast.stmt], bool]] = [(getattr(stmt, "body", []), False)]
    parts += [(handler.body, True) for handler in getattr(stmt, "handlers", [])]
    parts += [(getattr(stmt, "orelse", []), False), (getattr(stmt, "finalbody", []), False)]
    return parts


# --------------------------------------------------------------------------------------------
# Replaying the activation order.


def _order_kind(
    kind: RegistryKind, modules: dict[Path, _ModuleInfo]
) -> list[tuple[_RawReg, _ModuleInfo, Status]]:
    holders = {p: m for p, m in modules.items() if any(r.kind == kind for r in m.regs)}
    if not holders:
        return []
    targets = {(p, r.target) for p, m in holders.items() for r in m.regs if r.kind == kind}

    # Activation scopes (a function such as `_activate_tp_planners`, or a module body) that import
    # a definition carrying this kind's decorator; fall back to scopes importing such a module.
    scopes: dict[tuple[str, str], list[_Activation]] = {}
    for path in sorted(modules, key=lambda p: modules[p].rel):
        for act in modules[path].activations:
            scopes.setdefault((modules[path].rel, act.scope), []).append(act)

    def relevant(acts: list[_Activation], by_target: bool) -> bool:
        if by_target:
            return any((p, a.target) in targets for a in acts for p in a.modules)
        return any(p in holders for a in acts for p in a.modules)

    chosen = [k for k, acts in scopes.items() if relevant(acts, True)]
    if not chosen:
        chosen = [k for k, acts in scopes.items() if relevant(acts, False)]

    ordered: list[tuple[_RawReg, _ModuleInfo, Status]] = []
    loaded: set[Path] = set()

    def load(path: Path, conditional: bool) -> None:
        if path in loaded or path not in modules:
            return
        loaded.add(path)
        info = modules[path]
        events: list[tuple[tuple[int, int], _RawReg | tuple[Path, ...]]] = [
            ((line, -1), paths) for line, paths in info.imports
        ]
        events += [(r.sort_key, r) for r in info.regs if r.kind == kind]
        for _, event in sorted(events, key=lambda e: e[0]):
            if isinstance(event, _RawReg):
                ordered.append((event, info, "conditional" if conditional else "active"))
            else:
                for dep in event:
                    load(dep, conditional)

    if chosen:
        for key in chosen:
            for act in sorted(scopes[key], key=lambda a: a.line):
                for path in act.modules:
                    load(path, act.conditional)
        leftover: Status = "inactive"
    else:
        leftover = "active"  # nothing activates this registry explicitly: importing registers
    for path in sorted(holders, key=lambda p: holders[p].rel):
        if path not in loaded:
            info = holders[path]
            for reg in sorted((r for r in info.regs if r.kind == kind), key=lambda r: r.sort_key):
                ordered.append((reg, info, leftover))
    return ordered


def _iter_python_files(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield Path(dirpath) / name


def _build(root: Path) -> Registries:
    parser = _Parser(root)
    modules: dict[Path, _ModuleInfo] = {}
    for path in _iter_python_files(root):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            parser.problems.append(f"{parser.rel(path)}: not read ({exc.__class__.__name__})")
            continue
        if re.search(_CANDIDATE_PATTERN, text) is None:
            continue
        info = parser.parse(path, text)
        if info is not None:
            modules[path] = info

    match_modes: dict[RegistryKind, MatchMode] = {}
    for info in modules.values():
        for kind, mode in info.match_modes.items():
            match_modes.setdefault(kind, mode)
    # Lookup mode read from each register class; without one, cache-dit's documented defaults.
    defaults: dict[RegistryKind, MatchMode] = {"vae_dp": "exact"}
    exact = tuple(k for k in _KINDS if match_modes.get(k, defaults.get(k, "prefix")) == "exact")

    registrations: list[Registration] = []
    names: dict[RegistryKind, tuple[str, ...]] = {}
    for kind in _KINDS:
        seen: set[str] = set()
        kind_names: list[str] = []
        for raw, info, status in _order_kind(kind, modules):
            if raw.name in seen:
                continue  # a dict registry keeps the first insertion position
            seen.add(raw.name)
            registrations.append(
                Registration(
                    kind,
                    raw.name,
                    raw.register_class,
                    info.rel,
                    raw.line,
                    raw.target,
                    status,
                    raw.handled_names,
                    raw.sets_separate_cfg,
                )
            )
            if status != "inactive":
                kind_names.append(raw.name)
        names[kind] = tuple(kind_names)

    prefixes: tuple[str, ...] = ()
    prefixes_at: str | None = None
    for info in sorted(modules.values(), key=lambda m: m.rel):
        if info.separate_cfg_prefixes is not None:
            prefixes, line = info.separate_cfg_prefixes
            prefixes_at = f"{info.rel}:{line}"
            break

    return Registries(
        root=str(root),
        cache_dit_version=_read_version(root),
        adapters=names["adapter"],
        cp_planners=names["cp"],
        tp_planners=names["tp"],
        text_encoder_planners=names["text_encoder_tp"],
        vae_planners=names["vae_dp"],
        controlnet_planners=names["controlnet_cp"],
        registrations=tuple(registrations),
        exact_match_kinds=exact,
        problems=tuple(parser.problems),
        separate_cfg_prefixes=prefixes,
        separate_cfg_location=prefixes_at,
    )


# --------------------------------------------------------------------------------------------
# Cache and public entry points.

_CACHE: dict[str, tuple[tuple[int, int, int], Registries]] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_MAX = 8


def _signature(root: Path) -> tuple[int, int, int]:
    """(number of .py files, newest mtime_ns, total size) of the package plus its METADATA."""
    count = newest = total = 0
    paths = list(_iter_python_files(root))
    paths += [info / "METADATA" for info in _dist_info_candidates(root)]
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        count += 1
        newest = max(newest, st.st_mtime_ns)
        total += st.st_size
    return count, newest, total


def clear_cache() -> None:
    """Forget every cached `Registries` (tests, or after installing another cache-dit)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def read_registries(cache_dit_root: Path | None = None) -> Registries:
    """Read the registries of the cache-dit package at ``cache_dit_root`` (default: the one
    ``import cache_dit`` would find, located without importing it).

    Cached per package directory; the cache is invalidated when any ``.py`` file of the package
    (or its dist-info METADATA) changes mtime/size, or files are added or removed. When no package
    is found, returns an empty ``Registries`` with ``root=None`` (``installed`` is False).
    """
    root = Path(cache_dit_root) if cache_dit_root is not None else _find_package_root()
    if root is None:
        return Registries(root=None, cache_dit_version=None, problems=(_NOT_INSTALLED,))
    if not root.is_dir():
        return Registries(
            root=None,
            cache_dit_version=None,
            problems=(f"{root} is not a directory; {_NOT_INSTALLED}",),
        )
    root = root.resolve()
    key = str(root)
    signature = _signature(root)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0] == signature:
            return hit[1]
    registries = _build(root)
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_MAX and key not in _CACHE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = (signature, registries)
    return registries


def _words(name: str) -> list[str]:
    return re.findall(_WORD_PATTERN, name)


def _strip_generic_suffixes(name: str) -> str:
    changed = True
    while changed:
        changed = False
        boundaries = set()
        offset = 0
        for word in _words(name):
            boundaries.add(offset)
            offset += len(word)
        for suffix in _GENERIC_SUFFIXES:
            cut = len(name) - len(suffix)
            if not (cut > 0 and name.endswith(suffix) and cut in boundaries):
                continue
            if suffix.startswith("Di") and name[cut - 1].isupper():
                continue  # an acronym glued to DiT is part of it: "MMDiT", "UDiT"
            name = name[:cut].rstrip("_")
            changed = True
            break
    return name


def propose_register_name(transformer_class: str, pipeline_class: str | None = None) -> str:
    """A BlockAdapter register name derived from the class names' structure only.

    With a pipeline class: the longest common leading run of CamelCase words of both classes
    (``Krea2Pipeline`` + ``Krea2Transformer2DModel`` -> ``Krea2``), so the name prefixes both. If
    they share no leading word, the pipeline class without its ``Pipeline`` suffix. Without a
    pipeline class: the transformer class without trailing ``Transformer``/``Model``/``2D``/
    ``3D``/``DiT`` words (``AcmeVidTransformer3DModel`` -> ``AcmeVid``).
    """
    if pipeline_class:
        common: list[str] = []
        for a, b in zip(_words(transformer_class), _words(pipeline_class), strict=False):
            if a != b:
                # Where acronyms meet ("DiT2D" vs "DiTPAG" -> "T" vs "TPAG") the word boundary is
                # ambiguous: keep the shared upper-case part.
                short, long = sorted((a, b), key=len)
                if short.isupper() and long.isupper() and long.startswith(short):
                    common.append(short)
                break
            common.append(a)
        name = "".join(common).rstrip("_")
        if name:
            return name
        stripped = (
            pipeline_class[: -len("Pipeline")]
            if pipeline_class.endswith("Pipeline")
            else pipeline_class
        )
        return stripped or pipeline_class
    return _strip_generic_suffixes(transformer_class) or transformer_class


def _conflict_notes(
    proposed: str, adapters: tuple[Registration, ...]
) -> tuple[list[str], list[str]]:
    names: list[str] = []
    notes: list[str] = []
    for reg in adapters:
        if reg.name == proposed:
            names.append(reg.name)
            notes.append(
                f"'{proposed}' is already registered as a BlockAdapter ({reg.location}); "
                "registering it again would replace that factory, so extend the existing factory "
                "(branch on the transformer class inside it) or pick another name."
            )
        elif proposed.startswith(reg.name):
            names.append(reg.name)
            notes.append(
                f"Registered BlockAdapter '{reg.name}' ({reg.location}) is a prefix of the "
                f"proposed '{proposed}' and is matched first, so it would shadow the new adapter; "
                f"pick a name that no registered name prefixes, or branch on the transformer class "
                f"inside the existing '{reg.name}' factory."
            )
        elif reg.name.startswith(proposed):
            names.append(reg.name)
            notes.append(
                f"The proposed '{proposed}' is a prefix of registered BlockAdapter '{reg.name}' "
                f"({reg.location}), so it would capture every {reg.name}* class if it were "
                f"registered before it; pick a name that is not a prefix of any registered name."
            )
    return names, notes


Target = Literal["standalone", "cache-dit-checkout"]


def shadowing_warnings(
    transformer_class: str,
    pipeline_class: str | None = None,
    target: Target | None = None,
    registries: Registries | None = None,
    separate_cfg: bool | None = None,
) -> tuple[str, ...]:
    """What cache-dit's name-based lookups would do to a new integration of these classes.

    cache-dit finds adapters by class-name prefix, and with `cache_config.enable_separate_cfg`
    unset it decides separate CFG from the *pipeline* class name (the registered adapter's
    value, then a list of forcing prefixes) whenever the BlockAdapter says False. Two cases are
    reported, each with advice for `target` (both targets when None):

    * a registered adapter name prefixes the pipeline or transformer class and that adapter's
      factory does not use the transformer class (it is another model's adapter);
    * the pipeline class starts with a name of the forcing list (unless `separate_cfg` is True:
      the pipeline is known to make two transformer calls per step, so forcing is harmless).

    Reported only; never used to infer anything. Never raises (returns () on any problem).
    """
    try:
        regs = registries if registries is not None else read_registries()
        if not regs.installed or not transformer_class:
            return ()
        return _shadowing(regs, transformer_class, pipeline_class, target, separate_cfg)
    except Exception:  # reporting must never break an analysis or a generation
        return ()


def _shadowing(
    regs: Registries,
    transformer_class: str,
    pipeline_class: str | None,
    target: Target | None,
    separate_cfg: bool | None = None,
) -> tuple[str, ...]:
    version = regs.cache_dit_version or "?"
    out: list[str] = []
    classes = [c for c in (pipeline_class, transformer_class) if c]
    by_reg: dict[str, tuple[Registration, list[str]]] = {}
    for cls in classes:
        reg = regs.first_match("adapter", cls)
        if reg is None or transformer_class in reg.handled_names:
            continue
        by_reg.setdefault(reg.name, (reg, []))[1].append(cls)
    for reg, matched in by_reg.values():
        effects = []
        if pipeline_class in matched:
            effects.append(
                "`cache_dit.enable_cache(pipe)` would apply that adapter; and a BlockAdapter "
                "passed with has_separate_cfg=False and `cache_config.enable_separate_cfg=None` "
                f"makes cache-dit run the '{reg.name}' factory for its CFG setting"
                + (" (True there)" if reg.sets_separate_cfg else "")
                + ", which may assert on the transformer class"
            )
        if transformer_class in matched:
            effects.append(
                "`cache_dit.enable_cache(transformer)` would apply that adapter to the "
                "transformer alone"
            )
        advice = {
            "standalone": (
                "standalone target: call the generated `enable()`, which passes its own "
                "BlockAdapter and sets `enable_separate_cfg` from the plan, not "
                "`cache_dit.enable_cache(pipe)`"
            ),
            "cache-dit-checkout": (
                f"cache-dit checkout target: any new name starting with '{reg.name}' is "
                f"shadowed, so add a branch on the transformer class to the '{reg.name}' "
                f"factory ({reg.target}), or register a name that no registered name prefixes "
                "and that prefixes both classes"
            ),
        }
        out.append(
            f"cache-dit {version} registers BlockAdapter '{reg.name}' ({reg.location}), a "
            f"prefix of {' and '.join(matched)}, whose factory does not handle "
            f"{transformer_class}: " + "; ".join(effects) + ". " + _advice(advice, target) + "."
        )
    forcing = next(
        (p for p in regs.separate_cfg_prefixes if pipeline_class and pipeline_class.startswith(p)),
        None,
    )
    if forcing is not None and separate_cfg is not True:
        advice = {
            "standalone": (
                "standalone target: the generated `enable()` sets `enable_separate_cfg` from the "
                "plan's has_separate_cfg"
            ),
            "cache-dit-checkout": (
                "cache-dit checkout target: set `enable_separate_cfg` in the CLI example "
                "(`example.enableSeparateCfg`) when the pipeline calls the transformer once per "
                "step"
            ),
        }
        out.append(
            f"cache-dit {version} turns separate CFG on for every pipeline whose class starts "
            f"with '{forcing}' ({regs.separate_cfg_location}) when the adapter says "
            "has_separate_cfg=False and `cache_config.enable_separate_cfg` is None: a pipeline "
            f"like {pipeline_class} that calls the transformer once per step would have its "
            f"cached steps miscounted. {_advice(advice, target)}."
        )
    return tuple(out)


def _advice(advice: dict[str, str], target: Target | None) -> str:
    if target is not None:
        return advice[target][:1].upper() + advice[target][1:]
    text = "; ".join(advice.values())
    return text[:1].upper() + text[1:]


def registry_facts(
    transformer_class: str,
    pipeline_class: str | None = None,
    proposed_name: str | None = None,
    registries: Registries | None = None,
    separate_cfg: bool | None = None,
) -> RegistryFacts:
    """Registry facts for a transformer (and optional pipeline) class. Never raises.

    REPORTED ONLY: the analyzer must not use these facts to infer any pattern (module docstring).
    """
    try:
        regs = registries if registries is not None else read_registries()
    except Exception as exc:  # reporting must never break an analysis
        return RegistryFacts(
            cache_dit_version=None,
            notes=(f"cache-dit registries could not be read ({exc.__class__.__name__}: {exc}).",),
        )
    if not regs.installed:
        return RegistryFacts(cache_dit_version=None, notes=(_NOT_INSTALLED,))

    try:
        return _facts(regs, transformer_class, pipeline_class, proposed_name, separate_cfg)
    except Exception as exc:  # defensive: malformed input must not break an analysis
        return RegistryFacts(
            cache_dit_version=regs.cache_dit_version,
            notes=(f"registry facts failed ({exc.__class__.__name__}: {exc}).",),
        )


def _facts(
    regs: Registries,
    transformer_class: str,
    pipeline_class: str | None,
    proposed: str | None,
    separate_cfg: bool | None = None,
) -> RegistryFacts:
    version = regs.cache_dit_version
    notes: list[str] = []
    classes = [c for c in (transformer_class, pipeline_class) if c]

    # Existing adapter: the first registered name prefixing either class.
    existing: Registration | None = None
    for reg in regs.entries("adapter"):
        if any(c.startswith(reg.name) for c in classes):
            existing = reg
            break
    matched_on: tuple[str, ...] = ()
    if existing is not None:
        matched_on = tuple(c for c in classes if c.startswith(existing.name))
        notes.append(
            f"cache-dit {version} already registers BlockAdapter '{existing.name}' "
            f"({existing.location}), the first registered prefix of {' and '.join(matched_on)}."
        )
        per_class = {c: regs.first_match("adapter", c) for c in classes}
        resolved = {c: (r.name if r else None) for c, r in per_class.items()}
        if len(set(resolved.values())) > 1:
            detail = ", ".join(f"{c} -> {n or 'no adapter'}" for c, n in resolved.items())
            notes.append(f"The transformer and pipeline classes resolve differently ({detail}).")
        if existing.status == "conditional":
            notes.append(f"'{existing.name}' is only registered when its optional import succeeds.")

    # Proposed name and its conflicts with registered names.
    name = proposed or (
        propose_register_name(transformer_class, pipeline_class) if transformer_class else None
    )
    shadowing: list[str] = []
    if name:
        shadowing, conflict_notes = _conflict_notes(name, regs.entries("adapter"))
        notes.extend(conflict_notes)
        not_prefixed = [c for c in classes if not c.startswith(name)]
        if not_prefixed:
            notes.append(
                f"The name '{name}' is not a prefix of {' or '.join(not_prefixed)}, so lookups by "
                "that class will not find the adapter; a register name must prefix both the "
                "pipeline and the transformer class."
            )

    # The name a cache-dit checkout of this version accepts (the same rule as the check).
    from .register_names import suggest_register_name

    checkout = suggest_register_name(
        transformer_class,
        pipeline_class,
        [r.name for r in regs.entries("adapter", include_inactive=True)],
        name,
    )
    if checkout.name is None:
        notes.append(f"No register name works for the cache-dit checkout target: {checkout.reason}")

    # Parallelism planners for the transformer class.
    planners: dict[str, str | None] = {}
    for kind, label in (("cp", "context-parallel"), ("tp", "tensor-parallel")):
        reg = regs.first_match(kind, transformer_class) if transformer_class else None
        planners[kind] = reg.name if reg else None
        if reg is None:
            notes.append(
                f"No {label} planner of cache-dit {version} matches {transformer_class or '?'}."
            )
        elif reg.status == "conditional":
            notes.append(
                f"The {label} planner '{reg.name}' ({reg.location}) is only registered when its "
                "optional import succeeds."
            )

    return RegistryFacts(
        cache_dit_version=version,
        warnings=_shadowing(regs, transformer_class, pipeline_class, None, separate_cfg)
        if transformer_class
        else (),
        existing_adapter=existing.name if existing else None,
        shadowing_names=tuple(shadowing),
        proposed_name=name,
        notes=tuple(notes),
        adapter_matched_on=matched_on,
        cp_planner=planners["cp"],
        tp_planner=planners["tp"],
        checkout_name=checkout.name,
        checkout_name_reason=checkout.reason,
    )
