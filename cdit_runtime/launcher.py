"""Start the ranks of a launch and end them as a tree.

What torchrun does for one node, without its extra process layer: every rank is
``python -m cdit_runtime.worker LAUNCH.json`` with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set. Each rank runs in its own session
(process group), so ending a launch kills the rank and everything it started; on Linux a rank also
dies with the controller (``PR_SET_PDEATHSIG``). Each rank writes JSON lines to its own pipe
(``CDIT_EVENT_FD``); stdout and stderr go to ``<outputDir>/logs/<launch>.rank<r>.log``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from .contract import ErrorInfo

__all__ = ["Launch", "Rank", "free_port", "start_launch"]

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


@dataclass
class Rank:
    rank: int
    process: subprocess.Popen[bytes]
    events: IO[bytes]  # read end of the event pipe
    log: Path
    buffer: bytes = b""

    @property
    def exit_code(self) -> int | None:
        return self.process.poll()


@dataclass
class Launch:
    name: str
    ranks: list[Rank] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    startup_grace_s: float = 0.0  # added to the import + load limit (a multi-node rendezvous)

    def alive(self) -> bool:
        return any(r.exit_code is None for r in self.ranks)

    def terminate(self, grace_s: float = 5.0) -> None:
        """End every rank and its children: SIGTERM to each process group, then SIGKILL."""
        for r in self.ranks:
            if r.exit_code is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(r.process.pid, signal.SIGTERM)
        deadline = time.time() + grace_s
        while time.time() < deadline and self.alive():
            time.sleep(0.05)
        for r in self.ranks:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(r.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                r.process.wait(timeout=5)

    def close(self) -> None:
        for r in self.ranks:
            with contextlib.suppress(OSError):
                r.events.close()

    def diagnose(self) -> ErrorInfo | None:
        """Why the launch failed, when the launch itself can tell (see `multinode.NodeLaunch`)."""
        return None


def start_launch(
    name: str, spec_path: Path, world: int, log_dir: Path, env: dict[str, str]
) -> Launch:
    """Spawn ``world`` ranks of ``python -m cdit_runtime.worker spec_path``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    launch = Launch(name)
    pythonpath = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p)
    for rank in range(world):
        read_fd, write_fd = os.pipe()
        rank_env = {
            **env,
            "PYTHONPATH": pythonpath,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "GROUP_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "CDIT_EVENT_FD": str(write_fd),
            "CDIT_SPAWN_TIME": repr(time.time()),
        }
        log = log_dir / f"{name}.rank{rank}.log"
        with open(log, "ab") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "cdit_runtime.worker", str(spec_path)],
                env=rank_env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        launch.ranks.append(Rank(rank, process, os.fdopen(read_fd, "rb", buffering=0), log))
    return launch
