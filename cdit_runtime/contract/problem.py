"""`Problem`: one error as data, the shape every error takes when it crosses a boundary.

``{code, message, hint, path, line}``: a stable code, what is wrong (without where), what to do,
and where: a file or the JSON path of an answer or plan field (``""`` when none) and a 1-based line
in that file (``0`` when none). The text shown to people is rendered from the fields
(`Problem.located`), never parsed back.

`ProblemError` carries a `Problem` out of a service: with the problems it joins (`parts`, for a
client that shows each beside its field) and the details a client acts on (`details`, e.g. the
missing packages of ``runtime-missing``). `error_json` is its form on the language server's wire,
``{"error": {"code", "message", "hint", ...}}``.

The runtime's `ErrorInfo` (inside a `VerificationResult`) converts both ways.

Standard library only (see `contract`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .codec import from_json, to_json
from .common import doc_field
from .results import ErrorInfo


@dataclass(frozen=True)
class Problem:
    """An error as data: a stable code, what is wrong, what to do about it, and where."""

    code: str = doc_field("stable, for programs (e.g. syntax-error, invalid-plan, BAD_REQUEST)")
    message: str = doc_field("what is wrong, without where (see path and line)")
    hint: str = doc_field("what to do about it", default="")
    path: str = doc_field(
        "the file, or the JSON path of the answer or plan field, it is about ('' when none)",
        default="",
    )
    line: int = doc_field("1-based line in path (0 when none)", default=0)

    def located(self) -> str:
        """The message with where it is: ``path:line: message``, ``path: message`` or the
        message alone."""
        if self.path and self.line:
            return f"{self.path}:{self.line}: {self.message}"
        if self.path:
            return f"{self.path}: {self.message}"
        return self.message

    def __str__(self) -> str:
        return self.located()

    def to_json(self) -> dict[str, Any]:
        """All five fields, camelCase, through the contract codec."""
        return to_json(self)

    @classmethod
    def from_json(cls, data: Any) -> Problem:
        """Raises `ContractError` for a document that is not a Problem."""
        return from_json(cls, data)

    def to_error_info(self) -> ErrorInfo:
        """The runtime's form (no path or line fields: they are in the message)."""
        return ErrorInfo(code=self.code, message=self.located(), hint=self.hint)

    @classmethod
    def from_error_info(cls, info: ErrorInfo) -> Problem:
        return cls(code=info.code, message=info.message, hint=info.hint)


class ProblemError(Exception):
    """A service could not do what it was asked: `problem` says why.

    `parts`: the problems `problem`'s message joins (each about one field, `path`), or None when
    it joins none; `details`: data a client acts on beside the message."""

    def __init__(
        self,
        problem: Problem,
        parts: Sequence[Problem] | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(problem.located())
        self.problem = problem
        self.parts = tuple(parts) if parts is not None else None
        self.details = dict(details or {})

    @classmethod
    def joined(cls, code: str, parts: Sequence[Problem], hint: str = "") -> ProblemError:
        """One error for several field problems: their messages joined for display, each
        kept as a part."""
        message = "; ".join(part.located() for part in parts)
        return cls(Problem(code, message, hint), parts=parts)

    def error_json(self) -> dict[str, Any]:
        """``{"error": {"code", "message", "hint"}}`` with ``path`` and ``line`` when known,
        ``problems`` (``[{path, message}]``) when it joins some, then the details."""
        problem = self.problem
        body: dict[str, Any] = {
            "code": problem.code,
            "message": problem.located(),
            "hint": problem.hint,
        }
        if problem.path:
            body["path"] = problem.path
        if problem.line:
            body["line"] = problem.line
        if self.parts is not None:
            body["problems"] = [{"path": p.path, "message": p.message} for p in self.parts]
        body.update(self.details)
        return {"error": body}


def error_json(
    code: str, message: str, hint: str = "", parts: Sequence[Problem] | None = None
) -> dict[str, Any]:
    """The wire form of a problem with no place: ``{"error": {"code", "message", "hint"}}``."""
    return ProblemError(Problem(code, message, hint), parts=parts).error_json()
