"""Following one launch until its processes end (`LaunchDriver`, the controller's event loop).

It reads the ranks' JSON lines (ready, loaded, phase started, steps, phase done, failures),
relays them as progress events, and stops the launch when the run is cancelled, a rank failed
inside a collective phase, the import and load or a phase took too long, or a rank died. Once the
processes ended it says why (the launch's error) and settles the phases left running: failed, or
pending again when the launch was stopped for another phase. Standard library only.
"""

from __future__ import annotations

import json
import selectors
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .contract import Environment, LaunchInfo
from .contract.worker import (
    Done,
    Fatal,
    Loaded,
    PhaseDone,
    PhaseStarted,
    RankFailed,
    Ready,
    Step,
    WorkerMessage,
    decode,
)
from .errors import error_info
from .launcher import Launch

if TYPE_CHECKING:
    from .controller import Controller

__all__ = ["TERMINAL", "LaunchDriver"]

# Phase statuses that are final.
TERMINAL = {"ok", "failed", "skipped", "timeout", "cancelled"}
_STOP_SIGNALS = {int(signal.SIGTERM), int(signal.SIGINT), int(signal.SIGHUP)}


def _how(code: int) -> str:
    """How a process ended, from its exit code (negative: the signal that killed it)."""
    if code >= 0:
        return f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"
    return f"signal {-code} ({name})"


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


class LaunchDriver:
    """One launch of a `Controller`, followed until its processes end.

    The controller's phases, results, events and timeouts are its own; this object holds what
    the loop tracks about the launch (ranks loaded, failures seen, ranks that died).
    """

    def __init__(
        self,
        controller: Controller,
        launch: Launch,
        info: LaunchInfo,
        todo: list[tuple[Any, int]],
    ) -> None:
        self.controller = controller
        self.launch = launch
        self.info = info
        self.selector = selectors.DefaultSelector()
        for rank in launch.ranks:
            self.selector.register(rank.events, selectors.EVENT_READ, rank)
        self.loaded: set[int] = set()
        self.done: set[int] = set()
        self.progressed = False
        self.ids = {s.id for s, _ in todo}
        self.deadline = time.time() + controller.request.launch_timeout_s + launch.startup_grace_s
        self.world = len(launch.ranks)
        self.exited_at: float | None = None
        self.failures: dict[str, tuple[float, RankFailed]] = {}
        # (rank, exit code) of ranks that ended on their own
        self.died: list[tuple[int, int]] = []
        self.stopped_for: set[str] = set()  # phases whose failure or timeout stopped the launch

    def run(self) -> bool:
        """Follow the launch to its end; whether any phase finished (or failed) in it."""
        while True:
            self._read_events()
            now = time.time()
            if self.controller.cancelled:
                self.launch.terminate()
                return self.progressed
            self._stop_for_failed_ranks(now)
            self._stop_for_load_timeout(now)
            self._stop_for_phase_timeouts(now)
            self._watch_exits()
            if not self.launch.alive():
                self.exited_at = self.exited_at or now
                # Drain what the ranks wrote before exiting; stop once the pipes close.
                if not self.selector.get_map() or now - self.exited_at > 2.0:
                    break
        self.selector.close()
        return self._wrap_up()

    # -------------------------------------------------------------------------------- events

    def _read_events(self) -> None:
        """Read what the ranks wrote (at most half a second's wait) and handle every line."""
        for key, _ in self.selector.select(timeout=0.5):
            rank = key.data
            try:
                chunk = rank.events.read()
            except OSError:
                chunk = b""
            if chunk:
                rank.buffer += chunk
            elif chunk == b"":
                self.selector.unregister(rank.events)
            *lines, rank.buffer = rank.buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                try:
                    message = decode(json.loads(line))
                except ValueError:
                    continue
                if message is not None:
                    self._handle(message)

    def _handle(self, message: WorkerMessage) -> None:
        controller = self.controller
        match message:
            case Ready(rank=0):
                self.info.import_s = message.import_s
                self._environment(message)
            case Loaded():
                self._loaded(message)
            case Fatal():
                err = replace(
                    message.error,
                    message=f"rank {message.rank} ({message.stage}): {message.error.message}",
                )
                controller.launch_error = controller.launch_error or err
                controller.emit("error", error=err, message=err.message)
                self.launch.terminate()
            case PhaseStarted():
                controller.phase_started[message.phase] = time.time()
                controller.phases[message.phase].status = "running"
                controller.emit("phase_started", phase=message.phase)
                controller.write()
            case Step():
                controller.emit(
                    "step",
                    phase=message.phase,
                    step=message.step,
                    total=message.total,
                    message=message.label,
                )
            case RankFailed():
                # Pipes are read in any order: a rank's failure report may arrive after rank 0
                # already reported the phase (replicated phases combine all ranks).
                if controller.phases[message.phase].status not in TERMINAL:
                    self.failures.setdefault(message.phase, (time.time(), message))
            case PhaseDone():
                self.failures.pop(message.phase, None)
                controller._phase_done(message.phase, message.record)
                self.progressed = True
            case Done():
                self.done.add(message.rank)

    def _environment(self, message: Ready) -> None:
        """Versions and devices, from rank 0's ``ready``."""
        result = self.controller.result
        versions = message.versions
        env = result.environment
        result.environment = Environment(
            python=versions.get("python") or "",
            torch=versions.get("torch"),
            diffusers=versions.get("diffusers"),
            transformers=versions.get("transformers"),
            cache_dit=versions.get("cacheDit"),
            device=env.device,
            device_names=message.device_names,
        )

    def _loaded(self, message: Loaded) -> None:
        """A rank loaded the model; rank 0's message describes it and the integration."""
        self.loaded.add(message.rank)
        if message.rank != 0:
            return
        result = self.controller.result
        self.info.load_s = message.load_s
        result.model = message.model
        if result.integration is not None:
            result.integration.transformer_class = message.integration.transformer_class or (
                result.model.get("transformerClass")
            )

    # ------------------------------------------------------------------------------- stopping

    def _stop_for_failed_ranks(self, now: float) -> None:
        """A rank failed inside a collective phase; unless every rank failed (then rank 0 reports
        the phase), the others are stuck: stop them and relaunch the rest."""
        for phase_id, (seen, message) in list(self.failures.items()):
            if now - seen > self.controller.failed_rank_grace_s:
                del self.failures[phase_id]
                err = replace(
                    message.error, message=f"rank {message.rank}: {message.error.message}"
                )
                self.controller._finish(phase_id, "failed", error=err)
                self.progressed = True
                self.stopped_for.add(phase_id)
                self.launch.terminate()

    def _stop_for_load_timeout(self, now: float) -> None:
        controller = self.controller
        if len(self.loaded) < self.world and now > self.deadline and self.launch.alive():
            controller.launch_error = error_info(
                "TIMEOUT",
                f"import and model load took more than {controller.request.launch_timeout_s:.0f} s",
            )
            self.launch.terminate()

    def _stop_for_phase_timeouts(self, now: float) -> None:
        controller = self.controller
        for phase_id, start in list(controller.phase_started.items()):
            phase = controller.phases[phase_id]
            if phase_id not in self.ids or phase.status != "running":
                continue
            limit = controller.specs[phase_id].timeout_s or controller.request.timeout_s
            if now - start > limit:
                controller._finish(
                    phase_id,
                    "timeout",
                    error=error_info("TIMEOUT", f"{phase_id} ran more than {limit:.0f} s"),
                )
                self.progressed = True
                self.stopped_for.add(phase_id)
                self.launch.terminate()

    def _watch_exits(self) -> None:
        """Note the ranks that died; the others would wait forever in a collective: stop them."""
        launch = self.launch
        if not launch.stopped:
            # Ranks that ended on their own, before the controller stopped anything: the
            # cause. Ranks ended by the controller's own stop are never blamed.
            fresh = [
                r
                for r in launch.ranks
                if r.exit_code not in (None, 0) and r.rank not in {d for d, _ in self.died}
            ]
            # Killed by a signal before exited with an error (that may follow the peer).
            fresh.sort(key=lambda r: (int(r.exit_code or 0) >= 0, r.rank))
            self.died.extend((r.rank, int(r.exit_code or 0)) for r in fresh)
        if self.died and launch.alive():
            launch.terminate()  # the others would wait forever in a collective

    # -------------------------------------------------------------------------------- the end

    def _wrap_up(self) -> bool:
        """Why the launch ended, and the phases it left running."""
        controller = self.controller
        if controller.launch_error is None:
            controller.launch_error = self.launch.diagnose()  # e.g. a failed rendezvous
        # Phases left running belong to a rank that died or was stopped.
        if controller.launch_error is None and self.died and not self._blame_dead_rank():
            return self.progressed  # `_close` marks what did not finish as cancelled
        self._settle_running_phases()
        return self.progressed

    def _blame_dead_rank(self) -> bool:
        """The launch's error: the first rank that died (False: the run was cancelled)."""
        controller = self.controller
        number, code = self.died[0]
        if -code in _STOP_SIGNALS:
            # Stopped from outside (a cancel that signals every process of the tree, e.g.
            # scancel or a service manager): our own cancel is probably on its way.
            until = time.time() + controller.external_stop_grace_s
            while not controller.cancelled and time.time() < until:
                time.sleep(0.05)
        if controller.cancelled:
            return False
        ranks = self.launch.ranks
        rank = ranks[[r.rank for r in ranks].index(number)]
        controller.launch_error = error_info(
            "WORKER_DIED", f"rank {number} ended with {_how(code)}; log: {rank.log}"
        )
        controller.launch_error.traceback = _log_tail(rank.log)
        return True

    def _settle_running_phases(self) -> None:
        controller = self.controller
        for phase_id in self.ids:
            phase = controller.phases[phase_id]
            if phase.status == "running" and self.stopped_for and phase_id not in self.stopped_for:
                # Stopped because another phase failed or timed out: run it again.
                phase.status = "pending"
                phase.notes.append(
                    "relaunched: the launch was stopped for "
                    f"{sorted(self.stopped_for)} while it ran"
                )
                continue
            if phase.status == "running":
                err = controller.launch_error or error_info(
                    "WORKER_DIED", "the launch ended mid-phase"
                )
                controller._finish(phase_id, "failed", error=err)
                self.progressed = True
