"""Start the ranks of a launch and end them as a tree.

What torchrun does for one node, without its agent process (a small standard-library `guard`
per rank instead): every rank is
``python -m cdit_runtime.worker LAUNCH.json`` with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set, started under a `guard` in its own
session: whatever a rank starts ends with it on every path (normal end, failure, timeout, cancel,
and on Linux the controller's death, even one that strikes while ranks are being forked). Each
rank writes JSON lines to its own pipe (``CDIT_EVENT_FD``); stdout and stderr go to
``<outputDir>/logs/<launch>.rank<r>.log``. A launch ends with `Launch.close`, which stops the
ranks still running: the controller calls it on every path.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from .guard import parent_watch

if TYPE_CHECKING:
    from .contract import ErrorInfo

__all__ = ["Launch", "Rank", "free_port", "start_launch"]

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """Die with SIGKILL when the parent dies (Linux; a child that re-checks its parent itself)."""
    parent_watch(os.getppid())()


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

    stopped: bool = False  # `terminate` was called: later rank deaths are the controller's doing

    def alive(self) -> bool:
        return any(r.exit_code is None for r in self.ranks)

    def terminate(self, grace_s: float = 5.0) -> None:
        """End every rank and its children: SIGTERM to each rank's session (its guard kills the
        worker's group), then SIGKILL to what is left. Only unreaped ranks are signalled: their
        process ids are still theirs."""
        self.stopped = True
        for r in self.ranks:
            if r.exit_code is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(r.process.pid, signal.SIGTERM)
        deadline = time.time() + grace_s
        while time.time() < deadline and self.alive():
            time.sleep(0.05)
        for r in self.ranks:
            if r.exit_code is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(r.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                r.process.wait(timeout=5)

    def close(self) -> None:
        """The end of the launch, on every path: stop what still runs, close the pipes."""
        if self.alive():
            self.terminate(grace_s=2.0)
        for r in self.ranks:
            with contextlib.suppress(OSError):
                r.events.close()

    def diagnose(self) -> ErrorInfo | None:
        """Why the launch failed, when the launch itself can tell (see `multinode.NodeLaunch`)."""
        return None


def start_launch(
    name: str,
    spec_path: Path,
    world: int,
    log_dir: Path,
    env: dict[str, str],
    command: Sequence[str] | None = None,
) -> Launch:
    """Spawn ``world`` ranks of ``python -m cdit_runtime.worker spec_path``, each under a guard.

    ``command``: what a rank runs instead (tests); it gets the same environment.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    launch = Launch(name)
    rank_command = list(command or [sys.executable, "-m", "cdit_runtime.worker", str(spec_path)])
    try:
        for rank in range(world):
            launch.ranks.append(_spawn_rank(name, rank, world, port, log_dir, env, rank_command))
    except BaseException:
        launch.close()  # a launch that could not start fully leaves nothing running
        raise
    return launch


def _spawn_rank(
    name: str,
    rank: int,
    world: int,
    port: int,
    log_dir: Path,
    env: dict[str, str],
    command: list[str],
) -> Rank:
    pythonpath = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p)
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
    guard = [sys.executable, "-m", "cdit_runtime.guard", str(os.getpid()), "--fd", str(write_fd)]
    try:
        with open(log, "ab") as sink:
            process = subprocess.Popen(
                [*guard, "--", *command],
                env=rank_env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                start_new_session=True,
                # The guard gets SIGTERM when the controller dies (it then kills its worker's
                # group); one forked just before the controller was killed exits at once.
                preexec_fn=parent_watch(os.getpid(), signal.SIGTERM),
            )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    os.set_blocking(read_fd, False)
    return Rank(rank, process, os.fdopen(read_fd, "rb", buffering=0), log)
