"""Errors as data, the way every command answers: `{"error": {"code", "message", "hint"}}`."""

from __future__ import annotations

from typing import Any


def error(code: str, message: str, hint: str = "") -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "hint": hint}}
