"""The plan's source entries (`model.sources.*`, `components[].source`) as files and modules.

A source is a file path or a dotted module name (`diffusers.models.transformers.transformer_flux`,
the form of the gate-check answers). Codegen resolves it exactly as the analysis does, with the
analysis' own resolver (`analysis.analyze.resolve_target`: an existing path, else the module
located on `sys.path` without importing it), so a plan that could be analyzed can be generated.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..files import InputError, check_regular, os_problem, read_text, shown


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
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        reason = os_problem(exc) if isinstance(exc, OSError) else "not a usable file name"
        raise SourceNotFound(f"{shown(value)}: {reason}") from None


def source_path(value: str) -> Path:
    """The existing file a plan source entry names (the analysis' resolution). Raises
    `SourceNotFound`."""
    path = _resolve(value)
    try:
        check_regular(path)
    except InputError as exc:
        raise SourceNotFound(f"{value}: no such file" if exc.missing else str(exc)) from None
    return path


def read_source_text(value: str) -> str:
    """The text of the source `value` names. Raises `OSError` (`SourceNotFound` included: a
    file that is not a regular file or not UTF-8 too)."""
    try:
        text = read_text(source_path(value))
    except InputError as exc:
        raise SourceNotFound(str(exc)) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # as `Path.read_text` reads it


def source_module(value: str) -> str:
    """The dotted module name the source `value` is imported as (a file path need not exist
    yet: the name follows from where it is). Raises `SourceNotFound` for a dotted name that
    names no importable module."""
    return module_name_for(str(_resolve(value)))


def module_name_for(path: str | None) -> str:
    """The dotted module name `path` is importable as (longest `sys.path` prefix wins)."""
    if not path:
        return ""
    file = Path(path).resolve()
    best: tuple[str, ...] | None = None
    for entry in sys.path:
        try:
            root = Path(entry or ".").resolve()
            rel = file.relative_to(root)
        except (OSError, ValueError):
            continue
        parts = rel.with_suffix("").parts
        if all(p.isidentifier() for p in parts) and (best is None or len(parts) < len(best)):
            best = parts
    if best is None:
        parts_list = [file.stem]
        folder = file.parent
        while (folder / "__init__.py").is_file():
            parts_list.insert(0, folder.name)
            folder = folder.parent
        best = tuple(parts_list)
    if best and best[-1] == "__init__":
        best = best[:-1]
    return ".".join(best)
