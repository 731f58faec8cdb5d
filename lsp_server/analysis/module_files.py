"""Where a module's file is, found on the file system without importing anything: the package
folders above a file (`guess_module_name`), an installed top-level package on `sys.path`
(`find_top_level`, `installed_package`) and its version, and the file a relative import names
(`relative_path`)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path


def is_file(path: Path) -> bool:
    """`path.is_file()`, False for a name the file system refuses (too long, a NUL byte): an
    import naming such a module is an import that cannot be followed, not a failed analysis."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def guess_module_name(path: Path) -> str | None:
    """Dotted module name from the package folders above `path` (folders with __init__.py)."""
    parts = [path.stem] if path.stem != "__init__" else []
    parent = path.parent
    while is_file(parent / "__init__.py"):
        parts.insert(0, parent.name)
        if parent.parent == parent:
            break
        parent = parent.parent
    return ".".join(parts) if parts else None


# Top-level name -> its package folder or module file (None: not installed); cleared by
# `sources.clear_caches`.
package_dirs: dict[str, Path | None] = {}


def find_top_level(name: str) -> Path | None:
    """Locate an installed top-level package or module on sys.path, without importing it."""
    if name in package_dirs:
        return package_dirs[name]
    found: Path | None = None
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        candidate = Path(entry) / name
        if is_file(candidate / "__init__.py"):
            found = candidate
            break
        if is_file(candidate.with_suffix(".py")):
            found = candidate.with_suffix(".py")
            break
    package_dirs[name] = found
    return found


def relative_path(module: str, level: int, origin: Path, root: Path | None = None) -> Path | None:
    """`module` imported with `level` dots from a file at `origin`; with `root`, the import may
    not climb above that package folder (as Python refuses to leave the top-level package)."""
    base = origin.parent
    for _ in range(level - 1):
        if root is not None and base == root:
            return None
        base = base.parent
    parts = module.split(".") if module else []
    return module_file(base.joinpath(*parts) if parts else base)


def module_file(target: Path) -> Path | None:
    if is_file(target / "__init__.py"):
        return target / "__init__.py"
    if is_file(target.with_suffix(".py")):
        return target.with_suffix(".py")
    return None


def installed_package(name: str) -> Path | None:
    """The folder of an installed top-level package, located without importing it."""
    top = find_top_level(name)
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


def package_version(root: Path) -> str | None:
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
