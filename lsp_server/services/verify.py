"""Verify an integration: the checks before a VerificationRequest is handed to the runtime.

`check_request` completes a request with the configured thresholds and checks it against the
contract; `missing_runtime` says what an interpreter lacks to run it. The runs themselves are
processes (`python -m cdit_runtime verify`): the server's `features.runs` starts and follows
them, the CLI hands over to `cdit_runtime.cli`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cdit_runtime.contract import ContractError, Problem, ProblemError, load_request

from ..runtime_deps import RUNTIME_REQUIREMENT, missing_message, missing_runtime_modules

BAD_REQUEST = "BAD_REQUEST"
RUNTIME_MISSING = "runtime-missing"


def check_request(request: Any, thresholds: Mapping[str, float]) -> dict[str, Any]:
    """The request with the configured threshold overrides (those written in the request win),
    checked against the contract. Raises `ProblemError` (`BAD_REQUEST`)."""
    if not isinstance(request, dict):
        raise ProblemError(Problem(BAD_REQUEST, "the VerificationRequest must be a JSON object"))
    merged = dict(request)
    if thresholds:
        given = merged.get("thresholds")
        merged["thresholds"] = {**thresholds, **(given if isinstance(given, dict) else {})}
    try:
        load_request(merged)
    except ContractError as exc:
        problem = Problem(BAD_REQUEST, str(exc), "fix the request fields named above")
        raise ProblemError(problem) from None
    return merged


def missing_runtime(
    missing: Sequence[str], interpreter: str | None = None, what: str = "a verification run"
) -> ProblemError:
    """`runtime-missing`: the packages `interpreter` (None: this one) lacks, the requirement
    that installs them, and where."""
    hint = (
        f"install it into {interpreter}, or set cdit.interpreter to a Python that has it"
        if interpreter
        else ""
    )
    details: dict[str, Any] = {"missing": list(missing), "requirement": RUNTIME_REQUIREMENT}
    if interpreter:
        details["interpreter"] = interpreter
    return ProblemError(
        Problem(RUNTIME_MISSING, missing_message(missing, what), hint), details=details
    )


def missing_runtime_here() -> ProblemError | None:
    """`runtime-missing` when this interpreter lacks the `[runtime]` extra, else None."""
    missing = missing_runtime_modules()
    return missing_runtime(missing) if missing else None
