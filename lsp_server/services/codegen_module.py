"""Code generation (`lsp_server.codegen`, libcst) when this build has it, imported on first use."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from cdit_runtime.contract import Problem, ProblemError

UNAVAILABLE = Problem(
    "codegen-unavailable",
    "code generation (lsp_server.codegen) is not installed",
    "install a build with lsp_server.codegen",
)


def codegen_installed() -> bool:
    """Whether code generation is part of this build (without importing it: libcst is slow)."""
    try:
        return importlib.util.find_spec("lsp_server.codegen") is not None
    except ImportError:
        return False


def codegen_module() -> ModuleType | None:
    """`lsp_server.codegen` when it is part of this build, else None."""
    try:
        if importlib.util.find_spec("lsp_server.codegen") is None:
            return None
        return importlib.import_module("lsp_server.codegen")
    except ImportError:
        return None


def require_codegen() -> ModuleType:
    """`lsp_server.codegen`; raises `ProblemError` (`codegen-unavailable`) without it."""
    module = codegen_module()
    if module is None:
        raise ProblemError(UNAVAILABLE)
    return module
