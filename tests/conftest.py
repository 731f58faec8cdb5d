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
