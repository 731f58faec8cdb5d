"""The errors of the layers below as `Problem`s (converted here, at the services' edge)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from cdit_runtime.contract import Problem

if TYPE_CHECKING:
    from ..analysis import AnalysisError
    from ..codegen import Conflict

# A problem of one answer or plan field (its `path`), e.g. codegen's `FieldError`.
FIELD = "invalid-field"
CONFLICT = "conflict"
# A file codegen cannot edit as asked (a region it cannot find, generated text that does not parse).
CANNOT_EDIT = "cannot-edit"
# Where the transformer's analysis failures land in the answers.
TRANSFORMER_FIELD = "model.sources.transformer"


class FieldProblem(Protocol):
    """codegen's `FieldError` (and anything shaped like it)."""

    @property
    def path(self) -> str: ...

    @property
    def message(self) -> str: ...


def from_analysis_error(exc: AnalysisError) -> Problem:
    """`AnalysisError` carries the same facts; its `message` is `Problem.located()`."""
    return Problem(exc.code, exc.detail, exc.hint, exc.path, exc.line)


def from_field_error(error: FieldProblem, default_path: str = "") -> Problem:
    return Problem(FIELD, error.message, path=error.path or default_path)


def field_problem(path: str, message: str) -> Problem:
    return Problem(FIELD, message, path=path)


def from_conflict(conflict: Conflict) -> Problem:
    """Generated code the user edited: the file and its region go in the message (a part's
    `path` names an answer or plan field)."""
    return Problem(CONFLICT, str(conflict))


def cannot_edit(message: str, path: str = "") -> Problem:
    """A file codegen cannot edit; `message` names it."""
    return Problem(CANNOT_EDIT, message, path=path)
