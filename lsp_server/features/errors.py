"""Errors as data, the way every command answers: `{"error": {"code", "message", "hint"}}`.

The wire form of a `cdit_runtime.contract.Problem` (`ProblemError.error_json`); `error` is the
short way to write one that is about no file or field.
"""

from __future__ import annotations

from typing import Any

from cdit_runtime.contract.problem import error_json


def error(code: str, message: str, hint: str = "") -> dict[str, Any]:
    return error_json(code, message, hint)
