"""A rank's guard: ``python -m cdit_runtime.guard PARENT [--fd N]... -- COMMAND...``.

The launcher starts every rank as ``guard -- python -m cdit_runtime.worker LAUNCH.json``, so that
nothing a rank starts (an integration's helper process, a compile server) outlives the rank, on
any path:

* the guard leads the rank's session (the controller signals it through ``killpg``); the worker
  leads a process group of its own inside that session, which everything it starts inherits;
* when the worker ends (normal end, crash, signal), the guard kills the worker's group while the
  worker is still a zombie (its id cannot be reused yet), then exits with the worker's status: the
  same code, or killed by the same signal;
* SIGTERM, SIGINT or SIGHUP (the controller's stop, an external cancel) kill the worker's group
  and then the guard with that signal;
* on Linux the guard gets SIGTERM when the controller dies (``PR_SET_PDEATHSIG``), so a
  controller killed with SIGKILL still takes every rank's tree with it; the worker gets SIGKILL
  when its guard dies. Each sets the death signal between fork and exec and then re-checks its
  parent: a child forked just before its parent died exits at once (`parent_watch`).

Standard library only, no work at import time: the launcher imports `parent_watch` from here.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["EXIT_ORPHANED", "main", "parent_watch"]

PR_SET_PDEATHSIG = 1
EXIT_ORPHANED = 125  # the parent died between fork and exec: nothing ran
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@functools.lru_cache(maxsize=1)
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` (Linux), resolved in the parent: the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        for name in (None, "libc.so.6"):
            with contextlib.suppress(OSError, AttributeError):
                return ctypes.CDLL(name, use_errno=True).prctl  # type: ignore[no-any-return]
    except ImportError:
        return None
    return None


def parent_watch(
    parent: int, sig: int = signal.SIGKILL, *, new_group: bool = False
) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``sig`` when ``parent`` dies (Linux), and exits at once
    (`EXIT_ORPHANED`) if ``parent`` already died between the fork and this call.

    ``parent`` is the pid of the process that calls ``Popen``, taken before the fork: the death
    signal alone leaves a child forked just before its parent was killed orphaned, because the
    parent was gone before the signal was armed. ``new_group``: also lead a new process group.
    """
    prctl = _prctl()

    def preexec() -> None:
        if new_group:
            os.setpgid(0, 0)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(EXIT_ORPHANED)

    return preexec


def _exit_like(status: int) -> None:
    """Exit with a child's status: ``returncode`` >= 0 as the exit code, < 0 as that signal."""
    if status >= 0:
        os._exit(status)
    sig = -status
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    with contextlib.suppress(OSError):
        os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def _kill_group(pgid: int | None) -> None:
    if pgid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def _wait_exit(pid: int) -> bool:
    """Block until ``pid`` has exited, leaving it a zombie (so its group id stays ours).

    False where ``waitid`` is missing (not Linux): the caller reaps first, then kills the group.
    """
    waitid = getattr(os, "waitid", None)
    if waitid is None:
        return False
    with contextlib.suppress(ChildProcessError):
        waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    return True


def _parse(argv: Sequence[str]) -> tuple[int, list[int], list[str]]:
    if "--" not in argv:
        raise ValueError("usage: guard PARENT [--fd N]... -- COMMAND...")
    cut = list(argv).index("--")
    head, command = list(argv[:cut]), list(argv[cut + 1 :])
    if not head or not command:
        raise ValueError("usage: guard PARENT [--fd N]... -- COMMAND...")
    parent, fds = int(head[0]), []
    rest = head[1:]
    while rest:
        flag, value, *rest = rest
        if flag != "--fd":
            raise ValueError(f"unknown option {flag}")
        fds.append(int(value))
    return parent, fds, command


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parent, fds, command = _parse(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"cdit_runtime.guard: {exc}", file=sys.stderr)
        return 2
    group: dict[str, int | None] = {"pgid": None}

    def stop(signum: int, _frame: Any) -> None:
        _kill_group(group["pgid"])
        _exit_like(-signum)

    # Stop signals wait while the worker is forked: the handler must know its group.
    signal.pthread_sigmask(signal.SIG_BLOCK, set(_STOP_SIGNALS))
    for sig in _STOP_SIGNALS:
        signal.signal(sig, stop)
    if os.getppid() != parent:  # the controller died before the death signal could reach us
        return EXIT_ORPHANED
    watch = parent_watch(os.getpid(), signal.SIGKILL, new_group=True)

    def preexec() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(_STOP_SIGNALS))
        watch()

    try:
        worker = subprocess.Popen(command, pass_fds=tuple(fds), preexec_fn=preexec)
    except OSError as exc:
        print(f"cdit_runtime.guard: cannot start {command[0]}: {exc}", file=sys.stderr)
        return 127
    group["pgid"] = worker.pid
    for fd in fds:  # the worker holds the controller's pipe now; its EOF is the worker's end
        with contextlib.suppress(OSError):
            os.close(fd)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(_STOP_SIGNALS))
    zombie = _wait_exit(worker.pid)
    signal.pthread_sigmask(signal.SIG_BLOCK, set(_STOP_SIGNALS))  # we are ending anyway
    if zombie:
        _kill_group(worker.pid)  # what the worker started, while the zombie holds the group id
    status = worker.wait()
    if not zombie:
        _kill_group(worker.pid)
    _exit_like(status)
    return status  # not reached


if __name__ == "__main__":
    sys.exit(main())
