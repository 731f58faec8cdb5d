"""Running the real verification CLI from tests: ``python -m cdit_runtime verify`` in a subprocess.

Shared by the runtime's end-to-end tests: the environment (this checkout first on PYTHONPATH), the
run's exit code, results, progress events and stderr, schema checks of both documents, and PSNR
values as the contract writes them (``"inf"`` for identical).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def env() -> dict[str, str]:
    """This process's environment with the checkout first on PYTHONPATH."""
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), out.get("PYTHONPATH", "")) if p)
    return out


@dataclass
class Run:
    code: int
    result: dict[str, Any]
    events: list[dict[str, Any]]
    stderr: str
    out: Path

    def phase(self, name: str) -> dict[str, Any]:
        return next(p for p in self.result["phases"] if p["name"] == name)


def verify(out: Path, *args: str, timeout: float = 300) -> Run:
    """``verify ARGS --out OUT``; the results are read back from ``OUT/results.json``."""
    proc = subprocess.run(
        [sys.executable, "-m", "cdit_runtime", "verify", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env(),
        check=False,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    path = out / "results.json"
    result = json.loads(path.read_text()) if path.exists() else {}
    return Run(proc.returncode, result, events, proc.stderr, out)


def assert_documents_valid(run: Run) -> None:
    """results.json and every progress event match the contract's schema."""
    from cdit_runtime.contract import json_schema
    from cdit_runtime.contract.schema_check import validate

    schema = json_schema()
    assert validate(run.result, schema, "VerificationResult") == []
    for event in run.events:
        assert validate(event, schema, "ProgressEvent") == [], event
    assert run.events[0]["event"] == "run_started"
    assert run.events[-1]["event"] == "run_finished"


def db(value: float | str | None) -> float:
    """A PSNR as the contract writes it (a number or ``"inf"``) as a float."""
    assert value is not None
    return math.inf if value == "inf" else float(value)
