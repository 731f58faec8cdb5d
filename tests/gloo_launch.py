"""The one launcher of two-process gloo checks in the tests, both sides of it.

`run_two_ranks(worker, cases, out)` writes `cases` (name -> anything JSON) to `out/spec.json`,
starts `python worker spec out` twice with torchrun's environment variables (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT: the worker initialises a gloo process group), waits, and
returns name -> rank 0's tensor (`out/<name>.pt`), the error text it wrote (`out/<name>.err`), or
the tail of both rank logs when it wrote neither. The workers run from the repository root with it
on PYTHONPATH, one thread each, cache-dit's log at `error`.

`run_cases(spec, out, run_case)` is the worker's side: it joins the gloo process group (one
thread), calls `run_case(name, case)` for every case of the spec on every rank, and rank 0 writes
the returned tensor or the traceback; a failing case does not stop the others. The free port is
the runtime's own (`cdit_runtime.launcher.free_port`).
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdit_runtime.launcher import free_port

__all__ = ["free_port", "run_cases", "run_two_ranks"]

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 240
RENDEZVOUS_TIMEOUT_S = 60


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


def run_cases(spec_path: str, out_dir: str, run_case: Callable[[str, Any], Any]) -> int:
    """One rank of `run_two_ranks`: every case of the spec through `run_case(name, case)` (which
    returns the output tensor); rank 0 writes `<name>.pt` or `<name>.err` under `out_dir`, the
    other rank prints its tracebacks to its log. The ranks meet at a barrier after each case."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=RENDEZVOUS_TIMEOUT_S))
    rank = dist.get_rank()
    out = Path(out_dir)
    cases: dict[str, Any] = json.loads(Path(spec_path).read_text())
    for name, case in cases.items():
        try:
            result = run_case(name, case)
            if rank == 0:
                torch.save(result.detach().clone(), out / f"{name}.pt")
        except Exception:
            if rank == 0:
                (out / f"{name}.err").write_text(traceback.format_exc())
            else:
                traceback.print_exc()
        dist.barrier()
    dist.destroy_process_group()
    return 0
