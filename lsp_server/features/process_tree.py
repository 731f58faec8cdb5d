"""Ending a verification run: the process, its process group and every descendant.

Runs start in a new session (their own process group), so one `killpg` reaches torchrun and the
workers it forks. Descendants that moved to another group are found through `/proc` (Linux) before
anything is signalled: once a parent dies its children are re-parented and can no longer be
traced. SIGTERM first (torchrun forwards it to its workers), SIGKILL after a grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (empty where `/proc` is not available)."""
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) >= 2:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in out:
                out.add(child)
                stack.append(child)
    return out


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting to be reaped counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


async def terminate_tree(process: asyncio.subprocess.Process, grace: float = 3.0) -> None:
    """End `process` (started with `start_new_session=True`) and all it started."""
    pid = process.pid
    if sys.platform == "win32":  # pragma: no cover - no process groups
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        return
    family = descendants(pid) | {pid}
    _signal(pid, family, signal.SIGTERM)
    deadline = asyncio.get_running_loop().time() + grace
    while asyncio.get_running_loop().time() < deadline:
        if process.returncode is not None and not any(alive(p) for p in family - {pid}):
            return
        await asyncio.sleep(0.05)
    family |= descendants(pid)
    _signal(pid, family, signal.SIGKILL)


def kill_tree_now(pid: int) -> None:
    """SIGKILL `pid`, its group and its descendants without waiting (the server is exiting)."""
    if sys.platform == "win32":  # pragma: no cover
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        return
    _signal(pid, descendants(pid) | {pid}, signal.SIGKILL)


def _signal(pid: int, family: set[int], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)  # the session leader's pid is its group id
    for member in family:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, sig)
