"""The plan's source entries (`model.sources.*`, `components[].source`) as files and modules.

A source is a file path or a dotted module name (`diffusers.models.transformers.transformer_flux`,
the form of the gate-check answers). Codegen resolves it exactly as the analysis does, with the
analysis' own resolver (`analysis.analyze.resolve_target`: an existing path, else the module
located on `sys.path` without importing it), so a plan that could be analyzed can be generated.
"""

from __future__ import annotations

from pathlib import Path


class SourceNotFound(OSError):
    """A source entry names neither a file nor an importable module."""


def _resolve(value: str) -> Path:
    from ..analysis.analyze import resolve_target
    from ..analysis.model import AnalysisError

    if not value:
        raise SourceNotFound("no source given")
    try:
        return resolve_target(value)
    except AnalysisError as exc:
        raise SourceNotFound(exc.message) from None


def source_path(value: str) -> Path:
    """The existing file a plan source entry names (the analysis' resolution). Raises
    `SourceNotFound`."""
    path = _resolve(value)
    if not path.is_file():
        raise SourceNotFound(f"{value}: no such file")
    return path


def read_source_text(value: str) -> str:
    """The text of the source `value` names. Raises `OSError` (`SourceNotFound` included)."""
    return source_path(value).read_text(encoding="utf-8")


def source_module(value: str) -> str:
    """The dotted module name the source `value` is imported as (a file path need not exist
    yet: the name follows from where it is). Raises `SourceNotFound` for a dotted name that
    names no importable module."""
    from .plan_builder import module_name_for

    return module_name_for(str(_resolve(value)))
