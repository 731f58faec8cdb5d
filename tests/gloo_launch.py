"""The one launcher of two-process gloo checks in the tests.

`run_two_ranks(worker, cases, out)` writes `cases` (name -> anything JSON) to `out/spec.json`,
starts `python worker spec out` twice with torchrun's environment variables (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT: the worker initialises a gloo process group), waits, and
returns name -> rank 0's tensor (`out/<name>.pt`), the error text it wrote (`out/<name>.err`), or
the tail of both rank logs when it wrote neither. The workers run from the repository root with it
on PYTHONPATH, one thread each, cache-dit's log at `error`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_two_ranks(
    worker: Path, cases: dict[str, Any], out: Path, timeout_s: float = TIMEOUT_S
) -> dict[str, Any]:
    import torch

    spec = out / "spec.json"
    spec.write_text(json.dumps(cases))
    port = free_port()
    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "CACHE_DIT_LOG_LEVEL": "error",
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        log = (out / f"rank{rank}.log").open("w")
        command = [sys.executable, str(worker), str(spec), str(out)]
        procs.append(
            (
                subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO),
                log,
            )
        )
    try:
        for proc, _ in procs:
            proc.wait(timeout=timeout_s)
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    results: dict[str, Any] = {}
    for name in cases:
        tensor, error = out / f"{name}.pt", out / f"{name}.err"
        if tensor.exists():
            results[name] = torch.load(tensor)
        elif error.exists():
            results[name] = error.read_text()
        else:
            logs = "\n".join((out / f"rank{r}.log").read_text()[-3000:] for r in range(2))
            codes = [proc.returncode for proc, _ in procs]
            results[name] = f"no result from the gloo run (exit codes {codes}):\n{logs}"
    return results
