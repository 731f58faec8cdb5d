"""The worker -> controller messages: every one survives a round trip through its JSON line, and
lines that are not a known message are skipped, never guessed."""

from __future__ import annotations

import json

import pytest

from cdit_runtime.contract import ErrorInfo
from cdit_runtime.contract.worker import (
    Done,
    Fatal,
    Loaded,
    LoadedIntegration,
    PhaseDone,
    PhaseStarted,
    RankFailed,
    Ready,
    Step,
    decode,
    encode,
)

MESSAGES = [
    Ready(rank=0, import_s=1.5, versions={"python": "3.11.9", "torch": None}, device_names=["cpu"]),
    Loaded(
        rank=1,
        load_s=2.0,
        model={"transformerClass": "DemoDiT"},
        integration=LoadedIntegration("DemoDiT", ErrorInfo("INTEGRATION", "no enable()")),
    ),
    Fatal(rank=1, stage="load", error=ErrorInfo("MODEL_LOAD", "missing weights", "check the path")),
    PhaseStarted(phase="cache"),
    Step(phase="cache", step=3, total=6, label="timed"),
    Step(phase="cache", step=1, total=6),
    RankFailed(phase="ulysses", rank=1, error=ErrorInfo("PHASE_FAILED", "shape mismatch")),
    PhaseDone(phase="baseline", record={"status": "passed", "latencyS": [0.5]}),
    Done(rank=0),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_each_message_survives_its_json_line(message) -> None:
    line = encode(message, now=123.0)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    data = json.loads(line)
    assert data["type"] == message.TYPE and data["time"] == 123.0
    assert decode(data) == message


def test_the_body_uses_the_contract_keys() -> None:
    data = json.loads(encode(MESSAGES[0], now=0.0))
    assert data["importS"] == 1.5 and data["deviceNames"] == ["cpu"]
    loaded = json.loads(encode(MESSAGES[1], now=0.0))
    assert loaded["integration"]["transformerClass"] == "DemoDiT"
    assert loaded["integration"]["error"]["code"] == "INTEGRATION"


@pytest.mark.parametrize(
    "data",
    [
        [1, 2],
        {"time": 1.0, "rank": 0},  # no type
        {"type": "progress", "rank": 0},  # unknown type
        {"type": "done"},  # a field missing
        {"type": "done", "rank": "0"},  # a field of the wrong type
        {"type": "step", "phase": "cache", "step": 1, "total": 6, "extra": 1},  # an unknown field
        {"type": "fatal", "rank": 0, "stage": "phases", "error": {"code": "X", "message": "m"}},
    ],
)
def test_lines_that_are_not_a_known_message_are_skipped(data) -> None:
    assert decode(data) is None
