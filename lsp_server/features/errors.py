"""Errors as data, the way every command answers: `{"error": {"code", "message", "hint"}}`."""

from __future__ import annotations

from typing import Any


def error(
    code: str, message: str, hint: str = "", problems: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """`problems`: the `{path, message}` pairs `message` joins (`path`: the answer or plan field
    each is about, "" when none), for a client that shows them beside their fields."""
    body: dict[str, Any] = {"code": code, "message": message, "hint": hint}
    if problems is not None:
        body["problems"] = problems
    return {"error": body}
