"""Where things live in a cache-dit checkout (the package folder and the files codegen edits)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = "cache_dit"
ADAPTERS = "caching/block_adapters/adapters.py"
ADAPTERS_INIT = "caching/block_adapters/__init__.py"
FUNCTORS = "caching/patch_functors"
TRANSFORMERS = "distributed/transformers"


def locate_package(root: str | Path) -> Path | None:
    """The `cache_dit` package directory of a checkout (`src/cache_dit`, `cache_dit`, or root)."""
    base = Path(root)
    for candidate in (base / "src" / PACKAGE, base / PACKAGE, base):
        if (candidate / ADAPTERS).is_file():
            return candidate
    return None
