"""`Problem`, one error as data (`cdit_runtime.contract.problem`): where it is rendered from the
fields, its JSON through the contract codec, the wire form `ProblemError.error_json` the
extension reads, and the runtime's `ErrorInfo` both ways."""

from __future__ import annotations

import json

import pytest

from cdit_runtime.contract import ContractError, ErrorInfo, Problem, ProblemError
from cdit_runtime.contract.problem import error_json


@pytest.mark.parametrize(
    ("problem", "shown"),
    [
        (Problem("syntax-error", "invalid syntax", path="m.py", line=3), "m.py:3: invalid syntax"),
        (Problem("not-found", "no such file", path="m.py"), "m.py: no such file"),
        (Problem("x", "no place", line=7), "no place"),  # a line without a file says nothing
        (Problem("x", "plain"), "plain"),
    ],
)
def test_the_message_is_located_from_the_fields(problem: Problem, shown: str) -> None:
    assert problem.located() == shown == str(problem) == str(ProblemError(problem))


def test_json_round_trip_through_the_codec() -> None:
    problem = Problem("invalid-field", "expected a string", "fix it", "model.sources", 0)
    data = json.loads(json.dumps(problem.to_json()))
    assert data == {
        "code": "invalid-field",
        "message": "expected a string",
        "hint": "fix it",
        "path": "model.sources",
        "line": 0,
    }
    assert Problem.from_json(data) == problem
    assert Problem.from_json({"code": "c", "message": "m"}) == Problem("c", "m")


@pytest.mark.parametrize(
    "bad",
    [
        {"code": "c"},
        {"code": "c", "message": "m", "line": "3"},
        {"code": "c", "message": "m", "x": 1},
    ],
)
def test_from_json_refuses_what_is_not_a_problem(bad: dict) -> None:
    with pytest.raises(ContractError):
        Problem.from_json(bad)


def test_wire_form_names_path_and_line_only_when_known() -> None:
    assert error_json("up-to-date", "nothing to change") == {
        "error": {"code": "up-to-date", "message": "nothing to change", "hint": ""}
    }
    located = ProblemError(Problem("syntax-error", "bad", "fix", "/m.py", 4)).error_json()
    assert located == {
        "error": {
            "code": "syntax-error",
            "message": "/m.py:4: bad",
            "hint": "fix",
            "path": "/m.py",
            "line": 4,
        }
    }


def test_a_joined_error_keeps_its_parts_as_path_message_pairs() -> None:
    parts = [
        Problem("invalid-field", "expected a string", path="model.transformerClass"),
        Problem("conflict", "/w/m_cdit.py: edited by hand"),
    ]
    wire = ProblemError.joined("invalid-plan", parts, "correct these answers").error_json()
    assert wire == {
        "error": {
            "code": "invalid-plan",
            "message": "model.transformerClass: expected a string; /w/m_cdit.py: edited by hand",
            "hint": "correct these answers",
            "problems": [
                {"path": "model.transformerClass", "message": "expected a string"},
                {"path": "", "message": "/w/m_cdit.py: edited by hand"},
            ],
        }
    }


def test_details_follow_the_problem_on_the_wire() -> None:
    error = ProblemError(Problem("runtime-missing", "m", "h"), details={"missing": ["torch"]})
    assert list(error.error_json()["error"]) == ["code", "message", "hint", "missing"]
    assert error.error_json()["error"]["missing"] == ["torch"]


def test_error_info_both_ways() -> None:
    problem = Problem("MODEL_LOAD", "cannot load", "check the path", "/m/config.json", 2)
    info = problem.to_error_info()
    assert info == ErrorInfo("MODEL_LOAD", "/m/config.json:2: cannot load", "check the path")
    assert Problem.from_error_info(info) == Problem(
        "MODEL_LOAD", "/m/config.json:2: cannot load", "check the path"
    )
