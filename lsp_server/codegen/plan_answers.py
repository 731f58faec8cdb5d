"""Gate-check answers and plan documents before they are read: relative paths made absolute,
the answers' JSON types checked against the contract's `AnswersDocument` (`answer_errors`), and
the JSON files they name checked where the analysis would not say what is wrong
(`answer_file_errors`). Every problem is a `FieldError`.

An answers document is a plan without `cache`: `services.plan` analyzes the transformer it names
and builds the plan from the analysis and the answers (`plan_builder.build_plan`).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Iterator
from pathlib import Path
from types import NoneType
from typing import Any

from cdit_runtime.contract import camel
from cdit_runtime.contract.answers import AnswersDocument

from ..files import InputError, load_json
from .plan_model import FieldError


def resolve_relative(data: dict[str, Any], base: Path) -> None:
    """Make the relative paths of a plan or answers document absolute against `base` (the plan
    file's folder; the workspace root in the editor): target paths always, source files when
    they exist there (other values may be dotted module names)."""
    _resolve_target(data, base)
    _resolve_sources(data, base)


def _usable(value: object) -> bool:
    return isinstance(value, str) and bool(value) and "\x00" not in value


def _resolve_target(data: dict[str, Any], base: Path) -> None:
    """Relative target paths in a plan file are relative to the plan file's folder."""
    target = data.get("target")
    if not isinstance(target, dict):
        return
    for key in ("path", "root"):
        value = target.get(key)
        if _usable(value) and not Path(value).is_absolute():
            target[key] = str((base / value).resolve())


def _resolve_sources(data: dict[str, Any], base: Path) -> None:
    """Relative source files that exist next to the plan file are taken from there (made
    absolute, so later steps do not depend on the working directory); dotted module names and
    other values are left for the analysis' resolver (`source_files.source_path`)."""
    model = data.get("model")
    sources = model.get("sources") if isinstance(model, dict) else None
    if not isinstance(sources, dict):
        return
    for key, value in sources.items():
        if _usable(value) and not Path(value).is_absolute():
            candidate = base / value
            try:
                found = candidate.exists()
            except (OSError, ValueError):  # a name the file system refuses: left as it is
                found = False
            if found:
                sources[key] = str(candidate.resolve())


@functools.cache
def answer_fields() -> dict[str, tuple[type, ...]]:
    """Dotted answer field -> the JSON types it accepts (`NoneType`: absent or null), from the
    contract's `AnswersDocument`, parents before their fields."""
    return dict(_fields(AnswersDocument, ""))


def _fields(cls: type, prefix: str) -> Iterator[tuple[str, tuple[type, ...]]]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        dotted = prefix + camel(f.name)
        (inner,) = [t for t in typing.get_args(hints[f.name]) if t is not NoneType]
        if dataclasses.is_dataclass(inner):
            yield dotted, (dict, NoneType)
            yield from _fields(typing.cast(type, inner), f"{dotted}.")
        else:
            yield dotted, (typing.get_origin(inner) or inner, NoneType)


_JSON_TYPE = {str: "a string", dict: "an object", bool: "true or false", type(None): "null"}


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    return _JSON_TYPE.get(type(value), type(value).__name__)


def answer_file_errors(answers: dict[str, Any]) -> list[FieldError]:
    """Problems with the JSON files the analysis of the answers would read (`model.sources.
    config`, `modelIndex`) that it does not report itself: a FIFO (its read would block), a
    folder, nesting too deep. A missing file or bad JSON is left to the analysis' message."""
    sources = (answers.get("model") or {}).get("sources") or {}
    errors = []
    for key in ("config", "modelIndex"):
        if sources.get(key):
            try:
                load_json(sources[key])
            except InputError as exc:
                if not (exc.missing or exc.syntax):
                    errors.append(FieldError(f"model.sources.{key}", str(exc)))
    return errors


def answer_errors(answers: dict[str, Any]) -> list[FieldError]:
    """Type errors in gate-check answers (before they are analyzed and built into a plan)."""
    errors = []
    for dotted, allowed in answer_fields().items():
        value: Any = answers
        for key in dotted.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if not isinstance(value, allowed):
            wanted = " or ".join(_JSON_TYPE[t] for t in allowed)
            errors.append(FieldError(dotted, f"expected {wanted}, got {_json_type(value)}"))
        elif isinstance(value, str) and "\x00" in value:
            errors.append(FieldError(dotted, "contains a NUL byte"))
    return errors
