"""Node K > 0 of a multi-node run (``verify --nnodes N --node-rank K``).

It plans the same launches as node 0 and starts its share of every multi-node launch through
torchrun (`multinode.start_node_launch`), supervising its local ranks: launch timeout, cancel
(SIGINT/SIGTERM end the agent and its workers) and failures. It writes no ``results.json``: rank 0
lives on node 0, gathers every rank's records there and node 0's controller scores and writes
them. A local rank that fails inside a collective phase is reported by rank 0 (node 0); if the
other ranks are left waiting, node 0's phase timeout ends its launch and this node's ranks then
fail in their next collective. Exit codes: 0 every launch of this node ended cleanly, 1 one did not
(the error is emitted and printed), 2 bad request (in the CLI), 130 cancelled.
"""

from __future__ import annotations

import math
import time
from typing import Any

from .contract import ErrorInfo
from .controller import EXIT_CANCELLED, EXIT_COULD_NOT_RUN, EXIT_OK, Controller
from .errors import error_info
from .planning import LaunchPlan

__all__ = ["FollowerController"]


class FollowerController(Controller):
    """A `Controller` for node K > 0: runs its ranks, writes nothing, exits with their status."""

    # A rank that failed here is reported by rank 0 on node 0; only node 0 can tell whether the
    # others are stuck (it sees the phase end or time out), so this node never cuts a phase short.
    failed_rank_grace_s = math.inf

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failures: list[ErrorInfo] = []
        self.ran: list[str] = []
        self.note = ""

    def emit(self, event: str, **fields: Any) -> None:
        fields.pop("result_path", None)  # node 0 writes the results
        super().emit(event, **fields)

    def write(self) -> None:
        """Nothing: node 0 writes results.json and the table (launch specs and logs are here)."""

    def _load_reference(self) -> None:
        """Nothing: node 0 scores against the reference."""

    def _run_plan(self, plan: LaunchPlan, device: str) -> None:
        nodes = self.request.nodes
        if plan.world == 1:
            self.note = (
                f"node {nodes.node_rank}: nothing to run here, the request has no multi-process "
                "phase (node 0 runs every phase alone)"
            )
            return
        name = f"launch{len(self.result.launches) + 1}"
        self._run_launch(name, plan.world, list(plan.phases), device)
        info = self.result.launches[-1]
        codes = info.exit_codes
        self.ran.append(f"{name} ({', '.join(info.phases)}): exit codes {codes}")
        if self.cancelled or (self.launch_error is None and all(c == 0 for c in codes)):
            return
        log = self.out / "logs" / f"{name}.node{nodes.node_rank}.log"
        error = self.launch_error or error_info(
            "WORKER_DIED", f"{name}: torchrun ended with exit codes {codes}; log: {log}"
        )
        self.failures.append(error)
        self.emit("error", error=error, message=error.message)

    def _close(self, code: int | None = None) -> int:
        now = time.time()
        self.result.finished_at = now
        self.result.wall_s = now - self.started
        if self.cancelled:
            self.result.status, code = "cancelled", EXIT_CANCELLED
        elif code is None:
            code = EXIT_COULD_NOT_RUN if self.failures else EXIT_OK
        if self.result.status == "running":
            self.result.status = "completed" if code == EXIT_OK else "failed"
        self.emit("run_finished", status=self.result.status, message=self.summary().strip())
        return code

    def summary(self) -> str:
        """What this node ran, for stderr (node 0 prints the results table)."""
        nodes = self.request.nodes
        lines = [f"node {nodes.node_rank} of {nodes.nnodes}: {self.result.status}"]
        lines += [f"  {line}" for line in self.ran]
        lines += [f"  {e.code}: {e.message}" for e in self.failures]
        if self.result.error is not None:
            lines.append(f"  {self.result.error.code}: {self.result.error.message}")
        if self.note:
            lines.append(f"  {self.note}")
        lines.append("  results, verdicts and images: results.json in node 0's output directory")
        return "\n".join(lines) + "\n"
