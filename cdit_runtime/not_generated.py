"""Phases a standalone integration declares it cannot run, found before anything is launched.

A generated standalone module lists the parts it does not provide in a literal
``NOT_GENERATED: dict[str, str]`` (part -> why: ``"cache"``, ``"contextParallel"``,
``"tensorParallel"``, and ``"ring"`` when its CP plan cannot run under ring attention). The
module is read as text (``ast``), never imported, so the controller stays free of torch and of the
user's code; a phase that needs a listed part is skipped with the module's reason as
``NOT_GENERATED`` instead of launching ranks that would raise ``NotImplementedError``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from .contract import ErrorInfo, PhaseSpec, VerificationRequest
from .errors import error_info

__all__ = ["declared_missing", "needed_parts", "not_generated_refusal"]

_CP, _TP, _CACHE, _RING = "contextParallel", "tensorParallel", "cache", "ring"
_LABELS = {_CP: "context parallelism", _TP: "tensor parallelism", _RING: "ring attention"}


def declared_missing(module: Path) -> dict[str, str]:
    """The module's ``NOT_GENERATED`` literal; empty when it has none or cannot be read (a
    module that does not parse fails later, in the worker, with its own error). Read once per
    version of the file, whatever the number of phases asking."""
    try:
        stamp = module.stat().st_mtime_ns
    except OSError:
        return {}
    return dict(_declared(str(module), stamp))


@functools.lru_cache(maxsize=16)
def _declared(path: str, stamp: int) -> dict[str, str]:
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return {}
    for stmt in tree.body:
        target = None
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            target, value = stmt.target.id, stmt.value
        elif (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
        ):
            target, value = stmt.targets[0].id, stmt.value
        if target != "NOT_GENERATED" or value is None:
            continue
        try:
            found = ast.literal_eval(value)
        except ValueError:
            return {}
        if isinstance(found, dict):
            return {str(k): str(v) for k, v in found.items()}
    return {}


def needed_parts(spec: PhaseSpec) -> list[str]:
    """The integration parts a phase exercises, in the order they are checked."""
    parts: list[str] = []
    if spec.kind == "cache" or spec.cache:
        parts.append(_CACHE)
    kind = spec.vae_base if spec.kind == "vae_p" else spec.kind
    if kind in ("ulysses", "uaa", "ring", "hybrid"):
        parts.append(_CP)
    if kind == "ring":
        parts.append(_RING)
    if kind in ("tp", "tp_tep", "hybrid"):
        parts.append(_TP)
    return parts


def not_generated_refusal(spec: PhaseSpec, request: VerificationRequest) -> ErrorInfo | None:
    """Why this phase cannot run with its standalone integration, or None."""
    path = spec.integration
    if path is None and request.integration.kind == "standalone":
        path = request.integration.path
    if not path:
        return None
    missing = declared_missing(Path(path).expanduser())
    for part in needed_parts(spec):
        if part in missing:
            label = _LABELS.get(part, part)
            return error_info(
                "NOT_GENERATED",
                f"{spec.id}: {label} is not part of this integration: {missing[part]}",
            )
    return None
