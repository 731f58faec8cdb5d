"""Locating the installed cache-dit package and reading its version, without importing it: the
package folder from `importlib.util.find_spec("cache_dit")` (a top-level name: nothing runs), the
version from the `cache_dit-*.dist-info/METADATA` next to it (or its `_version.py`)."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path


def find_package_root() -> Path | None:
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


def dist_info_candidates(root: Path) -> list[Path]:
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
    for info in dist_info_candidates(root):
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


def read_version(root: Path) -> str | None:
    return _version_from_dist_info(root) or _version_from_version_py(root)
