"""`python -m cdit_runtime verify REQUEST.json` (the test stand-in, see __init__)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
# Starts a sleeper in a new session, prints its pid, then sleeps itself.
PARENT_OF_DETACHED = [
    sys.executable,
    "-c",
    "import subprocess, sys, time\n"
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
    " start_new_session=True)\n"
    "print(p.pid, flush=True)\n"
    "time.sleep(120)\n",
]


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "time": time.time(), **fields}), flush=True)


def main(argv: list[str]) -> int:
    _, request_path = argv
    request = json.loads(Path(request_path).read_text(encoding="utf-8"))
    out = Path(request["outputDir"])
    out.mkdir(parents=True, exist_ok=True)
    emit("run_started", message=json.dumps({"thresholds": request.get("thresholds")}))
    print("loading the pipeline (a plain log line)", file=sys.stderr, flush=True)
    if request.get("extraCallKwargs", {}).get("fake") == "hang":
        child = subprocess.Popen(SLEEPER)
        parent = subprocess.Popen(PARENT_OF_DETACHED, stdout=subprocess.PIPE, text=True)
        assert parent.stdout is not None
        detached = int(parent.stdout.readline())
        pids = [os.getpid(), child.pid, parent.pid, detached]
        emit("phase_started", phase="baseline", message=json.dumps({"pids": pids}))
        time.sleep(120)
        return 1
    phases = []
    for spec in request["phases"]:
        kind = spec["kind"]
        emit("phase_started", phase=kind)
        for step in range(1, 4):
            emit("step", phase=kind, step=step, total=3)
        emit("phase_finished", phase=kind, status="ok", verdict="pass")
        phases.append({"name": kind, "kind": kind, "status": "ok", "verdict": "pass"})
    result = {"status": "completed", "outputDir": str(out), "phases": phases, "schemaVersion": 1}
    (out / "results.json").write_text(json.dumps(result), encoding="utf-8")
    emit("run_finished", status="completed", resultPath=str(out / "results.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
