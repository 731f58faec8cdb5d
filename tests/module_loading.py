"""Importing generated modules and test fixtures from their files (tests only)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

FIXTURES = Path(__file__).resolve().parent / "codegen_fixtures"


def load_module(name: str, path: Path) -> ModuleType:
    """Import ``path`` as module ``name`` (registered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def e2e_models() -> ModuleType:
    """The tiny diffusers model builders of ``codegen_fixtures/e2e_models.py`` (imported once)."""
    if "e2e_models" not in sys.modules:
        load_module("e2e_models", FIXTURES / "e2e_models.py")
    return sys.modules["e2e_models"]
