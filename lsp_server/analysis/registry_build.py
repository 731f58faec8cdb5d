"""Building `Registries` from an installed cache-dit: parse the modules that can register
(`registry_parse`), replay the activation order per registry kind, and cache the result per
package folder (invalidated when its files change). `read_registries` is the entry point."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from .registry_package import dist_info_candidates, find_package_root, read_version
from .registry_parse import Activation, ModuleInfo, Parser, RawReg
from .registry_types import (
    KINDS,
    NOT_INSTALLED,
    MatchMode,
    Registration,
    Registries,
    RegistryKind,
    Status,
)

# Plain pattern strings (compiled lazily by `re`'s own cache): a file is parsed only if it can hold
# a registration decorator, an activation call, or a register class definition.
_CANDIDATE_PATTERN = (
    r"(?:BlockAdapterRegist\w*|\w*PlannerRegister\w*)\s*\.\s*register\s*\("
    r"|_safe_import\s*\(|import_module\s*\("
    r"|class\s+(?:BlockAdapterRegist\w*|\w*PlannerRegister\w*)\b"
)


# --------------------------------------------------------------------------------------------
# Replaying the activation order.


def _order_kind(
    kind: RegistryKind, modules: dict[Path, ModuleInfo]
) -> list[tuple[RawReg, ModuleInfo, Status]]:
    holders = {p: m for p, m in modules.items() if any(r.kind == kind for r in m.regs)}
    if not holders:
        return []
    targets = {(p, r.target) for p, m in holders.items() for r in m.regs if r.kind == kind}

    # Activation scopes (a function such as `_activate_tp_planners`, or a module body) that import
    # a definition carrying this kind's decorator; fall back to scopes importing such a module.
    scopes: dict[tuple[str, str], list[Activation]] = {}
    for path in sorted(modules, key=lambda p: modules[p].rel):
        for act in modules[path].activations:
            scopes.setdefault((modules[path].rel, act.scope), []).append(act)

    def relevant(acts: list[Activation], by_target: bool) -> bool:
        if by_target:
            return any((p, a.target) in targets for a in acts for p in a.modules)
        return any(p in holders for a in acts for p in a.modules)

    chosen = [k for k, acts in scopes.items() if relevant(acts, True)]
    if not chosen:
        chosen = [k for k, acts in scopes.items() if relevant(acts, False)]

    ordered: list[tuple[RawReg, ModuleInfo, Status]] = []
    loaded: set[Path] = set()

    def load(path: Path, conditional: bool) -> None:
        if path in loaded or path not in modules:
            return
        loaded.add(path)
        info = modules[path]
        events: list[tuple[tuple[int, int], RawReg | tuple[Path, ...]]] = [
            ((line, -1), paths) for line, paths in info.imports
        ]
        events += [(r.sort_key, r) for r in info.regs if r.kind == kind]
        for _, event in sorted(events, key=lambda e: e[0]):
            if isinstance(event, RawReg):
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
    parser = Parser(root)
    modules = _parse_modules(root, parser)
    registrations, names = _registrations(modules)
    prefixes, prefixes_at = _separate_cfg_list(modules)
    return Registries(
        root=str(root),
        cache_dit_version=read_version(root),
        adapters=names["adapter"],
        cp_planners=names["cp"],
        tp_planners=names["tp"],
        text_encoder_planners=names["text_encoder_tp"],
        vae_planners=names["vae_dp"],
        controlnet_planners=names["controlnet_cp"],
        registrations=tuple(registrations),
        exact_match_kinds=_exact_kinds(modules),
        problems=tuple(parser.problems),
        separate_cfg_prefixes=prefixes,
        separate_cfg_location=prefixes_at,
    )


def _parse_modules(root: Path, parser: Parser) -> dict[Path, ModuleInfo]:
    """The package's modules that can register or activate (by a text search), parsed."""
    modules: dict[Path, ModuleInfo] = {}
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
    return modules


def _exact_kinds(modules: dict[Path, ModuleInfo]) -> tuple[RegistryKind, ...]:
    """The registry kinds looked up by exact class name (the others by prefix)."""
    match_modes: dict[RegistryKind, MatchMode] = {}
    for info in modules.values():
        for kind, mode in info.match_modes.items():
            match_modes.setdefault(kind, mode)
    # Lookup mode read from each register class; without one, cache-dit's documented defaults.
    defaults: dict[RegistryKind, MatchMode] = {"vae_dp": "exact"}
    return tuple(k for k in KINDS if match_modes.get(k, defaults.get(k, "prefix")) == "exact")


def _registrations(
    modules: dict[Path, ModuleInfo],
) -> tuple[list[Registration], dict[RegistryKind, tuple[str, ...]]]:
    """Every registration in runtime order, and each kind's registered names (not inactive)."""
    registrations: list[Registration] = []
    names: dict[RegistryKind, tuple[str, ...]] = {}
    for kind in KINDS:
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
    return registrations, names


def _separate_cfg_list(modules: dict[Path, ModuleInfo]) -> tuple[tuple[str, ...], str | None]:
    """The adapter register's list of pipeline prefixes that force separate CFG, and where."""
    for info in sorted(modules.values(), key=lambda m: m.rel):
        if info.separate_cfg_prefixes is not None:
            prefixes, line = info.separate_cfg_prefixes
            return prefixes, f"{info.rel}:{line}"
    return (), None


# --------------------------------------------------------------------------------------------
# Cache and public entry points.

_CACHE: dict[str, tuple[tuple[int, int, int], Registries]] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_MAX = 8


def _signature(root: Path) -> tuple[int, int, int]:
    """(number of .py files, newest mtime_ns, total size) of the package plus its METADATA."""
    count = newest = total = 0
    paths = list(_iter_python_files(root))
    paths += [info / "METADATA" for info in dist_info_candidates(root)]
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
    root = Path(cache_dit_root) if cache_dit_root is not None else find_package_root()
    if root is None:
        return Registries(root=None, cache_dit_version=None, problems=(NOT_INSTALLED,))
    if not root.is_dir():
        return Registries(
            root=None,
            cache_dit_version=None,
            problems=(f"{root} is not a directory; {NOT_INSTALLED}",),
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
