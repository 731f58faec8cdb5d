"""Shared fixtures: where the installed diffusers sources are (located without importing them)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def diffusers_root() -> Path:
    spec = importlib.util.find_spec("diffusers")
    assert spec is not None and spec.submodule_search_locations, "diffusers is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


def diffusers_file(relative: str) -> Path:
    return diffusers_root() / relative


@pytest.fixture(scope="session")
def diffusers_dir() -> Path:
    return diffusers_root()


@pytest.fixture
def installed_checkout(tmp_path: Path) -> Path:
    """A checkout layout whose `src/cache_dit` is the installed package (read, never written)."""
    spec = importlib.util.find_spec("cache_dit")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("cache-dit is not installed")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "cache_dit").symlink_to(next(iter(spec.submodule_search_locations)))
    return tmp_path
