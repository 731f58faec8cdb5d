"""Verification runs: `python -m cdit_runtime verify REQUEST.json` in the configured interpreter.

The server never imports torch: each run is a separate process (in its own session, so that
cancelling ends the whole tree, torchrun workers included). Every JSON line the runtime prints on
stdout is forwarded to the client as a `cdit/runProgress` notification
(`{"runId", "event": ProgressEvent}`), mirrored as `$/progress` work-done reports, and the run ends
with one `cdit/runProgress` carrying `{"runId", "done": true, "exitCode", "cancelled", "result"}`
(the VerificationResult, or null when the runtime produced none).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import itertools
import json
import os
import shutil
import sys
import tempfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from cdit_runtime.contract import Problem, ProblemError

from ..runtime_deps import (
    CHECK_SCRIPT,
    RUNTIME_REQUIREMENT,
    missing_runtime_modules,
    parse_check_output,
)
from ..services.verify import check_request, missing_runtime
from .errors import error
from .process_tree import kill_tree_now, terminate_tree

if TYPE_CHECKING:
    from ..language_server import CditLanguageServer

RUN_PROGRESS = "cdit/runProgress"
# Where the runtime writes the VerificationResult (`run_finished` events also name it).
RESULT_FILE = "results.json"
STDERR_TAIL = 40


@dataclass
class Run:
    id: str
    token: str | None
    workdir: Path
    cwd: Path | None = None
    process: asyncio.subprocess.Process | None = None
    task: asyncio.Task[dict[str, Any]] | None = None
    cancelled: bool = False
    result: dict[str, Any] | None = None
    result_path: str | None = None
    events: int = 0
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL))


def runtime_runnable() -> bool:
    """Whether `python -m cdit_runtime` exists in this build (the server's interpreter)."""
    try:
        return importlib.util.find_spec("cdit_runtime.__main__") is not None
    except ImportError:
        return False


def runtime_installed_here(interpreter: str) -> bool:
    """For the code lens, without starting a process: False only when `interpreter` is this
    server's own Python and it lacks a `[runtime]` package (another interpreter: not known)."""
    if os.path.realpath(interpreter) != os.path.realpath(sys.executable):
        return True
    return not missing_runtime_modules()


RUNTIME_CHECK_TIMEOUT_S = 30.0


async def runtime_missing(interpreter: str) -> list[str] | None:
    """The `[runtime]` packages `interpreter` cannot find (empty: all there), or None when it
    could not tell (the run then reports its own errors). Asked in an empty folder with
    `PYTHONSAFEPATH=1`: nothing of the workspace is on its path, and finding runs no code."""
    if os.path.realpath(interpreter) == os.path.realpath(sys.executable):
        return missing_runtime_modules()
    cwd = tempfile.mkdtemp(prefix="cdit-runtime-check-")
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        process = await asyncio.create_subprocess_exec(
            interpreter,
            "-c",
            CHECK_SCRIPT,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        try:
            out, _ = await asyncio.wait_for(process.communicate(), RUNTIME_CHECK_TIMEOUT_S)
        except (TimeoutError, asyncio.TimeoutError):
            await terminate_tree(process)
            return None
    except OSError:
        return None
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    return parse_check_output(out.decode("utf-8", "replace"))


def is_result(obj: Any) -> bool:
    """Whether a stdout JSON line is the VerificationResult (`status`, `phases`) rather than a
    ProgressEvent (every event has `event`: cdit_runtime/contract/results.py)."""
    return isinstance(obj, dict) and "event" not in obj and "phases" in obj and "status" in obj


def progress_message(event: dict[str, Any]) -> tuple[str, int | None]:
    """A one-line message (and a percentage when the event has step counts) for `$/progress`,
    from a ProgressEvent's `phase`, `event`, `step`/`total` and `message`."""
    phase = event.get("phase") or ""
    kind = event.get("event") or ""
    step, total = event.get("step"), event.get("total")
    message = " ".join(str(x) for x in (phase, kind) if x)
    percentage = None
    if isinstance(step, int) and isinstance(total, int) and total > 0:
        message += f" {step}/{total}"
        percentage = max(0, min(100, round(100 * step / total)))
    elif event.get("message"):
        message += f": {event['message']}"
    return message.strip() or "running", percentage


class RunManager:
    """The verification runs of one server; `start`, `cancel`, `cancel_all`."""

    def __init__(self, ls: CditLanguageServer) -> None:
        self._ls = ls
        self._runs: dict[str, Run] = {}
        self._ids = itertools.count(1)

    def get(self, run_id: str) -> Run | None:
        return self._runs.get(run_id)

    async def start(
        self, request: dict[str, Any], *, cwd: Path | None, wait: bool = False
    ) -> dict[str, Any]:
        ls = self._ls
        try:
            checked = check_request(request, ls.settings.thresholds.to_json())
            interpreter = await self._interpreter(cwd)
        except ProblemError as exc:
            return exc.error_json()
        run_id = f"run-{os.getpid()}-{next(self._ids)}"
        workdir = Path(tempfile.mkdtemp(prefix=f"cdit-{run_id}-"))
        request_path = workdir / "request.json"
        request_path.write_text(json.dumps(checked, indent=1), encoding="utf-8")
        run = Run(run_id, await self._create_progress(run_id), workdir, cwd)
        self._runs[run_id] = run
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            run.process = await asyncio.create_subprocess_exec(
                interpreter,
                "-m",
                "cdit_runtime",
                "verify",
                str(request_path),
                cwd=str(cwd) if cwd else None,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                env=env,
                limit=16 * 1024 * 1024,
            )
        except OSError as exc:
            self._end_progress(run, f"could not start: {exc}")
            self._runs.pop(run_id, None)
            shutil.rmtree(workdir, ignore_errors=True)
            return error("spawn-failed", f"could not start {interpreter}: {exc}")
        self._begin_progress(run)
        run.task = asyncio.create_task(self._follow(run, checked))
        started = {"runId": run_id, "progressToken": run.token, "pid": run.process.pid}
        if not wait:
            return started
        return {**started, **await asyncio.shield(run.task)}

    async def _interpreter(self, cwd: Path | None) -> str:
        """The interpreter the run uses, when it has the `[runtime]` extra (else a
        `ProblemError`: `no-interpreter`, `runtime-missing`)."""
        configured = self._ls.settings.run_interpreter()
        interpreter = resolve_interpreter(configured, cwd)
        if interpreter is None:
            raise ProblemError(
                Problem(
                    "no-interpreter",
                    f"the interpreter {configured!r} was not found",
                    f"set cdit.interpreter to a Python with {RUNTIME_REQUIREMENT} installed",
                )
            )
        missing = await runtime_missing(interpreter)
        if missing:
            raise missing_runtime(missing, interpreter)
        return interpreter

    async def cancel(self, run_id: str) -> dict[str, Any]:
        run = self._runs.get(run_id)
        if run is None or run.process is None:
            return error("unknown-run", f"no running verification {run_id!r}")
        run.cancelled = True
        await terminate_tree(run.process)
        if run.task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(run.task), 10)
        return {"runId": run_id, "cancelled": True}

    def cancel_all(self) -> None:
        """On shutdown or exit: kill every run's process tree now (no report follows)."""
        for run in list(self._runs.values()):
            if run.process is not None and run.process.returncode is None:
                run.cancelled = True
                kill_tree_now(run.process.pid)

    # -- following a run --

    async def _follow(self, run: Run, request: dict[str, Any]) -> dict[str, Any]:
        assert run.process is not None and run.process.stdout is not None
        stderr = asyncio.create_task(self._pump_stderr(run))
        try:
            while line := await run.process.stdout.readline():
                self._on_line(run, line.decode("utf-8", "replace").strip())
            exit_code = await run.process.wait()
            await stderr
            if run.result is None:
                run.result = _read_result(run.result_path, request, cwd=run.cwd)
            final: dict[str, Any] = {
                "runId": run.id,
                "done": True,
                "exitCode": exit_code,
                "cancelled": run.cancelled,
                "result": run.result,
            }
            if exit_code != 0 and not run.cancelled:
                final["stderrTail"] = list(run.stderr_tail)
            self._ls.protocol.notify(RUN_PROGRESS, final)
            summary = "cancelled" if run.cancelled else f"finished (exit code {exit_code})"
            self._end_progress(run, summary)
            return final
        finally:
            self._runs.pop(run.id, None)
            shutil.rmtree(run.workdir, ignore_errors=True)

    def _on_line(self, run: Run, text: str) -> None:
        if not text:
            return
        try:
            obj = json.loads(text)
        except ValueError:
            self._ls.log_message(f"[{run.id}] {text}")
            return
        if is_result(obj):
            run.result = obj
            return
        if not isinstance(obj, dict):
            self._ls.log_message(f"[{run.id}] {text}")
            return
        run.events += 1
        if isinstance(obj.get("resultPath"), str):
            run.result_path = obj["resultPath"]
        self._ls.protocol.notify(RUN_PROGRESS, {"runId": run.id, "event": obj})
        if run.token is not None:
            message, percentage = progress_message(obj)
            self._ls.work_done_progress.report(
                run.token, types.WorkDoneProgressReport(message=message, percentage=percentage)
            )

    async def _pump_stderr(self, run: Run) -> None:
        assert run.process is not None and run.process.stderr is not None
        while line := await run.process.stderr.readline():
            text = line.decode("utf-8", "replace").rstrip()
            run.stderr_tail.append(text)
            self._ls.log_message(f"[{run.id}] {text}")

    # -- $/progress --

    async def _create_progress(self, run_id: str) -> str | None:
        window = self._ls.client_capabilities.window
        if not (window and window.work_done_progress):
            return None
        token = f"cdit-{run_id}"
        try:
            await self._ls.work_done_progress.create_async(token)
        except Exception:
            return None
        return token

    def _begin_progress(self, run: Run) -> None:
        if run.token is None:
            return
        self._ls.work_done_progress.begin(
            run.token,
            types.WorkDoneProgressBegin(
                title="cdit verification", message="starting", cancellable=True, percentage=0
            ),
        )
        cancelled = self._ls.work_done_progress.tokens.get(run.token)
        if cancelled is not None:
            # The client's Cancel button cancels this future.
            cancelled.add_done_callback(
                lambda f: f.cancelled() and asyncio.ensure_future(self.cancel(run.id))
            )

    def _end_progress(self, run: Run, message: str) -> None:
        if run.token is None:
            return
        self._ls.work_done_progress.end(run.token, types.WorkDoneProgressEnd(message=message))
        self._ls.work_done_progress.tokens.pop(run.token, None)


def resolve_interpreter(interpreter: str, cwd: Path | None) -> str | None:
    """An absolute interpreter path: as given, relative to the workspace, or found on PATH."""
    path = Path(interpreter)
    if path.is_absolute():
        return str(path) if path.exists() else None
    if os.sep in interpreter or "/" in interpreter:
        candidate = (cwd or Path.cwd()) / path
        return str(candidate) if candidate.exists() else None
    return shutil.which(interpreter)


def _read_result(
    result_path: str | None, request: dict[str, Any], cwd: Path | None
) -> dict[str, Any] | None:
    """The VerificationResult the runtime wrote (named by `run_finished`, else in outputDir)."""
    candidates = []
    if result_path:
        candidates.append(Path(result_path))
    output_dir = request.get("outputDir")
    if isinstance(output_dir, str):
        candidates.append(Path(output_dir) / RESULT_FILE)
    for candidate in candidates:
        if not candidate.is_absolute() and cwd is not None:
            candidate = cwd / candidate
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(candidate.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                return data
    return None
