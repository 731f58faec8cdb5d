"""Run a `VerificationRequest`: plan launches, drive the workers, score, write results.

The controller imports no torch. It starts each launch (`launcher`), relays the workers' events as
`ProgressEvent` JSON lines, enforces per-phase and per-launch timeouts, and after every phase
rewrites ``results.json`` atomically (temp file + rename), so a failing or hanging phase loses
nothing already measured. When a rank dies or a phase times out, the launch's remaining phases
are relaunched in fresh processes (as long as the previous launch made progress). Metrics
(PSNR/SSIM on the float arrays, verdicts, difference images) are computed here as soon as both the
baseline and the phase output exist.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import selectors
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import tune
from .contract import (
    CacheStats,
    Calibration,
    ControlResult,
    Environment,
    ErrorInfo,
    IntegrationInfo,
    LaunchInfo,
    PhaseResult,
    PhaseSpec,
    ProgressEvent,
    VerificationRequest,
    VerificationResult,
    from_json,
    to_json,
)
from .errors import RunFailure, error_info
from .inputs import check_inputs
from .launcher import Launch, start_launch
from .multinode import check_nodes, local_world, plan_for_nodes, start_node_launch
from .planning import LaunchPlan, resolve_device
from .tiny_pipelines import FAMILIES

__all__ = ["EXIT_COULD_NOT_RUN", "EXIT_OK", "Controller"]

EXIT_OK = 0
EXIT_COULD_NOT_RUN = 1
EXIT_CANCELLED = 130
_TERMINAL = {"ok", "failed", "skipped", "timeout", "cancelled"}
_FAILED_RANK_GRACE_S = 10.0
_EXTERNAL_STOP_GRACE_S = 3.0
_STOP_SIGNALS = {int(signal.SIGTERM), int(signal.SIGINT), int(signal.SIGHUP)}
_RANDOM_WEIGHTS = (
    "random weights: they do not converge like trained ones, so cache hit rates and cache "
    "quality say nothing here; the run checks plumbing and numerical equivalence"
)


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


class Controller:
    """One verification run. `run()` returns the process exit code."""

    failed_rank_grace_s = _FAILED_RANK_GRACE_S  # a rank failed in a collective phase: wait, stop
    external_stop_grace_s = _EXTERNAL_STOP_GRACE_S  # ranks SIGTERMed from outside: wait for ours

    def __init__(
        self, request: VerificationRequest, emit: Callable[[ProgressEvent], None] | None = None
    ) -> None:
        self.request = request
        self.emit_event = emit or (lambda event: None)
        self.out = Path(request.output_dir).expanduser().resolve()
        self.results_path = self.out / "results.json"
        self.cancelled = False
        self.current: Launch | None = None
        self.started = time.time()
        self.result = VerificationResult(
            status="running",
            output_dir=str(self.out),
            thresholds=request.thresholds,
            started_at=self.started,
        )
        self.phases: dict[str, PhaseResult] = {}
        self.specs = {spec.id: spec for spec in request.phases}
        self.phase_started: dict[str, float] = {}
        self.baseline_latency: float | None = None
        self._baseline: Any = None
        self._baseline_path: Path | None = None
        self._baseline_latents: Any = None
        self._baseline_latents_path: Path | None = None
        self._records: dict[str, dict[str, Any]] = {}
        self.launch_error: ErrorInfo | None = None
        self.deadline: float | None = None  # tune: no phase starts after this (unix time)
        self.stage_two: set[str] = set()  # tune: the combined points

    # ------------------------------------------------------------------------------ plumbing

    def emit(self, event: str, **fields: Any) -> None:
        self.emit_event(ProgressEvent(event=event, time=time.time(), **fields))  # type: ignore[arg-type]

    def cancel(self) -> None:
        """Ask the run to stop: the launch's process tree ends; measured phases are kept."""
        self.cancelled = True

    def write(self) -> None:
        self.result.phases = [self.phases[spec.id] for spec in self.request.phases]
        self._fill_hints()
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = self.results_path.with_name(".results.json.tmp")
        tmp.write_text(json.dumps(to_json(self.result), indent=1) + "\n")
        os.replace(tmp, self.results_path)
        from .report import render_checks, render_table

        table = self.out / ".results.md.tmp"
        checks = render_checks(self.result)
        text = render_table(self.result) + (f"\n{checks}" if checks else "")
        if self.result.tune is not None:
            from .report import render_tune

            text += render_tune(self.result.tune)
        table.write_text(text)
        os.replace(table, self.out / "results.md")

    def _fill_hints(self) -> None:
        """Hints name ``<outputDir>``: the folder of this run, written out."""
        errors = [self.result.error]
        for phase in self.result.phases:
            errors += [phase.error, phase.control.error if phase.control else None]
        for info in errors:
            if info is not None and "<outputDir>" in info.hint:
                info.hint = info.hint.replace("<outputDir>", str(self.out))

    # ----------------------------------------------------------------------------------- run

    def run(self) -> int:
        if self.request.tune is not None:
            try:
                device, gpus = resolve_device(self.request)
            except RunFailure:
                device, gpus = "cpu", 0  # reported below, where the same check fails again
            self._use_phases(tune.expand(self.request, device, gpus).phases)
            self.deadline = self.started + self.request.tune.budget_s
        request = self.request
        for spec in request.phases:
            self.phases[spec.id] = PhaseResult(
                name=spec.id, kind=spec.kind, status="pending", world_size=spec.world_size
            )
        self.result.integration = self._integration_info()
        self.emit(
            "run_started",
            message=f"{len(request.phases)} phases",
            result_path=str(self.results_path),
        )
        try:
            try:
                check_nodes(request)
            except ValueError as exc:
                raise RunFailure("BAD_REQUEST", str(exc)) from exc
            device, gpus = resolve_device(request)
            self._check_model()
            check_inputs(request.inputs)
            self._load_reference()
        except RunFailure as exc:
            return self._give_up(exc.info)
        self.result.environment.device = device
        self.result.dtype = request.dtype or ("float32" if device == "cpu" else "bfloat16")
        launches, refused = plan_for_nodes(request, device, gpus)
        for phase_id, info in refused.items():
            self._finish(phase_id, "skipped", error=info)
        self.write()
        for plan in launches:
            if self.cancelled:
                break
            self._run_plan(plan, device)
        if self.request.tune is not None and not self.cancelled:
            self._tune_stage_two(device, gpus)
        return self._close()

    def _use_phases(self, phases: list[PhaseSpec]) -> None:
        self.request = dataclasses.replace(self.request, phases=phases)
        self.specs = {spec.id: spec for spec in phases}

    def _tune_stage_two(self, device: str, gpus: int) -> None:
        """The tune's combined points, chosen from stage 1's verdicts (`tune.second_stage`)."""
        chosen = tune.second_stage(self.request, self.phases, device)
        extra = [s for s in chosen if s.id not in self.specs]
        if not extra:
            return
        self._use_phases([*self.request.phases, *extra])
        self.stage_two = {spec.id for spec in extra}
        for spec in extra:
            self.phases[spec.id] = PhaseResult(
                name=spec.id, kind=spec.kind, status="pending", world_size=spec.world_size
            )
        if self.deadline is not None and time.time() > self.deadline:
            info = error_info("BUDGET", "not run: the time box was spent before stage 2")
            for spec in extra:
                self._finish(spec.id, "skipped", error=info)
            return
        launches, refused = plan_for_nodes(
            dataclasses.replace(self.request, phases=extra), device, gpus
        )
        for phase_id, info in refused.items():
            self._finish(phase_id, "skipped", error=info)
        for plan in launches:
            if self.cancelled:
                break
            self._run_plan(plan, device)

    def _check_model(self) -> None:
        source = self.request.model
        if source.source in ("local", "shrink"):
            path = Path(source.path or "").expanduser()
            if not path.is_dir():
                raise RunFailure("MODEL_LOAD", f"model path {path} is not a directory")
            if not (path / "model_index.json").is_file():
                raise RunFailure("NO_MODEL_INDEX", f"{path} has no model_index.json")

    def _integration_info(self) -> IntegrationInfo:
        from .integration import git_revision

        spec = self.request.integration
        path = spec.path
        if spec.kind == "checkout" and path is None:
            import importlib.util

            found = importlib.util.find_spec("cache_dit")
            path = str(Path(found.origin).parent) if found and found.origin else None
        sha, dirty = git_revision(path)
        return IntegrationInfo(kind=spec.kind, path=path, git_sha=sha, git_dirty=dirty)

    def _load_reference(self) -> None:
        ref = self.request.reference
        if not ref or any(spec.kind == "baseline" for spec in self.request.phases):
            return
        folder = Path(ref).expanduser().resolve()
        array = folder / "arrays" / "baseline.npy"
        if not array.is_file():
            raise RunFailure("BAD_REQUEST", f"reference {folder} has no arrays/baseline.npy")
        self._baseline_path = array
        latents = folder / "arrays" / "baseline.latents.npy"
        self._baseline_latents_path = latents if latents.is_file() else None
        try:
            data = json.loads((folder / "results.json").read_text())
            base = next(p for p in data["phases"] if p["kind"] == "baseline")
            self.baseline_latency = base.get("latencyS")
        except (OSError, ValueError, StopIteration, KeyError):
            self.baseline_latency = None

    def _give_up(self, info: ErrorInfo) -> int:
        self.result.error = info
        self.emit("error", error=info, message=info.message)
        for phase in self.phases.values():
            if phase.status not in _TERMINAL:
                phase.status = "failed"
                phase.error = info
        self.result.status = "failed"
        return self._close(code=EXIT_COULD_NOT_RUN)

    def _close(self, code: int | None = None) -> int:
        if self.request.tune is not None:
            self.result.tune = tune.report(
                self.request, self.phases, self.stage_two, self.result.dtype
            )
        now = time.time()
        self.result.finished_at = now
        self.result.wall_s = now - self.started
        if self.cancelled:
            self.result.status = "cancelled"
            for phase in self.phases.values():
                if phase.status not in _TERMINAL:
                    phase.status = "cancelled"
                    phase.error = error_info("CANCELLED", "cancelled before it finished")
        ran = any(p.status == "ok" for p in self.phases.values())
        if self.result.status == "running":
            self.result.status = "completed" if ran else "failed"
        if code is None:
            code = EXIT_CANCELLED if self.cancelled else (EXIT_OK if ran else EXIT_COULD_NOT_RUN)
        if not ran and self.result.error is None:
            errors = [p.error for p in self.phases.values() if p.error is not None]
            self.result.error = errors[0] if errors else None
        self.write()
        self.emit("run_finished", status=self.result.status, result_path=str(self.results_path))
        return code

    # ------------------------------------------------------------------------------ launches

    def _call_settings(self) -> tuple[int, dict[str, Any]]:
        request = self.request
        family = (
            FAMILIES.get(request.model.family or "") if request.model.source == "tiny" else None
        )
        steps = request.steps or (family.steps if family else 28)
        kwargs: dict[str, Any] = {"prompt": request.prompt, "output_type": "np"}
        height = request.height or (family.height if family else None)
        width = request.width or (family.width if family else None)
        frames = request.num_frames or (family.num_frames if family else None)
        for key, value in (
            ("negative_prompt", request.negative_prompt),
            ("height", height),
            ("width", width),
            ("num_frames", frames),
            ("guidance_scale", request.guidance_scale),
        ):
            if value is not None:
                kwargs[key] = value
        if family:
            kwargs.update(family.call_kwargs)
        kwargs.update(request.extra_call_kwargs)
        return steps, kwargs

    def _run_plan(self, plan: LaunchPlan, device: str) -> None:
        todo = list(plan.phases)
        attempt = 0
        while todo and not self.cancelled:
            attempt += 1
            name = f"launch{len(self.result.launches) + 1}"
            progressed = self._run_launch(name, plan.world, todo, device)
            todo = [(s, r) for s, r in todo if self.phases[s.id].status not in _TERMINAL]
            # Across nodes there is no relaunch: every node would have to restart together.
            # A cancel leaves the rest to `_close` (status cancelled, not failed).
            across = self.request.nodes.nnodes > 1 and plan.world > 1
            if todo and not self.cancelled and (not progressed or across):
                info = self.launch_error or error_info(
                    "WORKER_DIED", f"{name} ended before running {[s.id for s, _ in todo]}"
                )
                for spec, _ in todo:
                    self._finish(spec.id, "failed", error=info)
                todo = []

    def _run_launch(self, name: str, world: int, todo: list[tuple[Any, int]], device: str) -> bool:
        steps, call_kwargs = self._call_settings()
        cpus = os.cpu_count() or 1
        nodes = self.request.nodes
        across = nodes.nnodes > 1 and world > 1  # torchrun rendezvous over the nodes
        local = local_world(nodes, world)  # processes on this host
        timeouts = [s.timeout_s or self.request.timeout_s for s, _ in todo]
        spec = {
            "request": to_json(self.request),
            "device": device,
            "dtype": self.result.dtype,
            "steps": steps,
            "callKwargs": call_kwargs,
            "threads": max(1, cpus // local),
            "collectiveTimeoutS": max(timeouts) + 60,
            "deadline": self.deadline,
            "phases": [{"spec": to_json(s), "rank": r} for s, r in todo],
        }
        run_dir = self.out / "launches"
        run_dir.mkdir(parents=True, exist_ok=True)
        spec_path = run_dir / (f"{name}.node{nodes.node_rank}.json" if across else f"{name}.json")
        spec_path.write_text(json.dumps(spec, indent=1))
        env = dict(os.environ)
        env.update(
            {
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
                "PYTHONUNBUFFERED": "1",
                "CACHE_DIT_LOG_LEVEL": os.environ.get("CACHE_DIT_LOG_LEVEL", "warning"),
            }
        )
        if device == "cpu":
            env["OMP_NUM_THREADS"] = str(max(1, cpus // local))
        info = LaunchInfo(
            world_size=world,
            backend="none"
            if world == 1
            else ("cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"),
            phases=[s.id for s, _ in todo],
        )
        self.result.launches.append(info)
        self.launch_error = None
        where = ""
        launch: Launch
        if across:
            launch = node_launch = start_node_launch(
                name,
                spec_path,
                world,
                self.out / "logs",
                env,
                nodes,
                index=len(self.result.launches) - 1,
                join_timeout_s=self.request.launch_timeout_s,
            )
            where = f" over {nodes.nnodes} nodes ({local} here, node {nodes.node_rank})"
            info.nodes = nodes.nnodes
            info.rendezvous = f"{node_launch.endpoint}/{node_launch.rdzv_id}"
        else:
            launch = start_launch(name, spec_path, world, self.out / "logs", env)
        self.current = launch
        try:
            self.emit(
                "launch_started",
                message=f"{name}: {world} process(es){where}, phases {info.phases}",
            )
            progressed = self._drive(launch, info, todo)
        finally:
            launch.close()  # every path: nothing the launch started outlives it
            self.current = None
        info.wall_s = time.time() - launch.started
        info.exit_codes = [r.exit_code for r in launch.ranks]
        self.write()
        return progressed

    def _drive(self, launch: Launch, info: LaunchInfo, todo: list[tuple[Any, int]]) -> bool:
        selector = selectors.DefaultSelector()
        for rank in launch.ranks:
            selector.register(rank.events, selectors.EVENT_READ, rank)
        loaded: set[int] = set()
        done: set[int] = set()
        progressed = False
        ids = {s.id for s, _ in todo}
        deadline = time.time() + self.request.launch_timeout_s + launch.startup_grace_s
        world = len(launch.ranks)
        exited_at: float | None = None
        failures: dict[str, tuple[float, dict[str, Any]]] = {}
        died: list[tuple[int, int]] = []  # (rank, exit code) of ranks that ended on their own
        stopped_for: set[str] = set()  # phases whose failure or timeout stopped the launch
        while True:
            for key, _ in selector.select(timeout=0.5):
                rank = key.data
                try:
                    chunk = rank.events.read()
                except OSError:
                    chunk = b""
                if chunk:
                    rank.buffer += chunk
                elif chunk == b"":
                    selector.unregister(rank.events)
                *lines, rank.buffer = rank.buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        message = json.loads(line)
                    except ValueError:
                        continue
                    kind = message.get("type")
                    if kind == "ready" and message["rank"] == 0:
                        info.import_s = message.get("importS")
                        self._environment(message)
                    elif kind == "loaded":
                        loaded.add(message["rank"])
                        if message["rank"] == 0:
                            info.load_s = message.get("loadS")
                            self.result.model = message.get("model") or {}
                            integ = message.get("integration") or {}
                            if self.result.integration is not None:
                                self.result.integration.transformer_class = integ.get(
                                    "transformerClass"
                                ) or self.result.model.get("transformerClass")
                    elif kind == "fatal":
                        err = from_json(ErrorInfo, message["error"])
                        err.message = (
                            f"rank {message['rank']} ({message.get('stage')}): {err.message}"
                        )
                        self.launch_error = self.launch_error or err
                        self.emit("error", error=err, message=err.message)
                        launch.terminate()
                    elif kind == "phase_started":
                        self.phase_started[message["phase"]] = time.time()
                        self.phases[message["phase"]].status = "running"
                        self.emit("phase_started", phase=message["phase"])
                        self.write()
                    elif kind == "step":
                        self.emit(
                            "step",
                            phase=message["phase"],
                            step=message["step"],
                            total=message["total"],
                            message=message.get("label"),
                        )
                    elif kind == "rank_failed":
                        # Pipes are read in any order: a rank's failure report may arrive after
                        # rank 0 already reported the phase (replicated phases combine all ranks).
                        if self.phases[message["phase"]].status not in _TERMINAL:
                            failures.setdefault(message["phase"], (time.time(), message))
                    elif kind == "phase_done":
                        failures.pop(message["phase"], None)
                        self._phase_done(message["phase"], message["record"])
                        progressed = True
                    elif kind == "done":
                        done.add(message["rank"])
            now = time.time()
            if self.cancelled:
                launch.terminate()
                return progressed
            for phase_id, (seen, message) in list(failures.items()):
                # A rank failed inside a collective phase; unless every rank failed (then rank 0
                # reports the phase), the others are stuck: stop them and relaunch the rest.
                if now - seen > self.failed_rank_grace_s:
                    del failures[phase_id]
                    err = from_json(ErrorInfo, message["error"])
                    err.message = f"rank {message['rank']}: {err.message}"
                    self._finish(phase_id, "failed", error=err)
                    progressed = True
                    stopped_for.add(phase_id)
                    launch.terminate()
            if len(loaded) < world and now > deadline and launch.alive():
                self.launch_error = error_info(
                    "TIMEOUT",
                    f"import and model load took more than {self.request.launch_timeout_s:.0f} s",
                )
                launch.terminate()
            for phase_id, start in list(self.phase_started.items()):
                phase = self.phases[phase_id]
                if phase_id not in ids or phase.status != "running":
                    continue
                limit = self.specs[phase_id].timeout_s or self.request.timeout_s
                if now - start > limit:
                    self._finish(
                        phase_id,
                        "timeout",
                        error=error_info("TIMEOUT", f"{phase_id} ran more than {limit:.0f} s"),
                    )
                    progressed = True
                    stopped_for.add(phase_id)
                    launch.terminate()
            if not launch.stopped:
                # Ranks that ended on their own, before the controller stopped anything: the
                # cause. Ranks ended by the controller's own stop are never blamed.
                fresh = [
                    r
                    for r in launch.ranks
                    if r.exit_code not in (None, 0) and r.rank not in {d for d, _ in died}
                ]
                # Killed by a signal before exited with an error (that may follow the peer).
                fresh.sort(key=lambda r: (int(r.exit_code or 0) >= 0, r.rank))
                died.extend((r.rank, int(r.exit_code or 0)) for r in fresh)
            if died and launch.alive():
                launch.terminate()  # the others would wait forever in a collective
            if not launch.alive():
                exited_at = exited_at or now
                # Drain what the ranks wrote before exiting; stop once the pipes close.
                if not selector.get_map() or now - exited_at > 2.0:
                    break
        selector.close()
        if self.launch_error is None:
            self.launch_error = launch.diagnose()  # e.g. a multi-node rendezvous that failed
        # Phases left running belong to a rank that died or was stopped.
        if self.launch_error is None and died:
            number, code = died[0]
            if -code in _STOP_SIGNALS:
                # Stopped from outside (a cancel that signals every process of the tree, e.g.
                # scancel or a service manager): our own cancel is probably on its way.
                until = time.time() + self.external_stop_grace_s
                while not self.cancelled and time.time() < until:
                    time.sleep(0.05)
            if self.cancelled:
                return progressed  # `_close` marks what did not finish as cancelled
            rank = launch.ranks[[r.rank for r in launch.ranks].index(number)]
            self.launch_error = error_info(
                "WORKER_DIED", f"rank {number} ended with {_how(code)}; log: {rank.log}"
            )
            self.launch_error.traceback = _log_tail(rank.log)
        for phase_id in ids:
            phase = self.phases[phase_id]
            if phase.status == "running" and stopped_for and phase_id not in stopped_for:
                # Stopped because another phase failed or timed out: run it again.
                phase.status = "pending"
                phase.notes.append(
                    f"relaunched: the launch was stopped for {sorted(stopped_for)} while it ran"
                )
                continue
            if phase.status == "running":
                err = self.launch_error or error_info("WORKER_DIED", "the launch ended mid-phase")
                self._finish(phase_id, "failed", error=err)
                progressed = True
        return progressed

    def _environment(self, message: dict[str, Any]) -> None:
        versions = message.get("versions") or {}
        env = self.result.environment
        self.result.environment = Environment(
            python=versions.get("python", ""),
            torch=versions.get("torch"),
            diffusers=versions.get("diffusers"),
            transformers=versions.get("transformers"),
            cache_dit=versions.get("cacheDit"),
            device=env.device,
            device_names=message.get("deviceNames") or [],
        )

    # ------------------------------------------------------------------------------ scoring

    def _finish(self, phase_id: str, status: str, error: ErrorInfo | None = None) -> None:
        phase = self.phases[phase_id]
        phase.status = status  # type: ignore[assignment]
        phase.error = error
        self.emit(
            "phase_finished",
            phase=phase_id,
            status=status,
            error=error,
            message=error.message if error else None,
        )
        self.write()

    def _phase_done(self, phase_id: str, record: dict[str, Any]) -> None:
        phase = self.phases[phase_id]
        spec = self.specs[phase_id]
        self._records[phase_id] = record
        phase.status = record["status"]
        phase.config = record.get("config") or {}
        phase.setup_s = record.get("setupS")
        phase.first_call_s = record.get("firstCallS")
        phase.latencies_s = list(record.get("latenciesS") or [])
        phase.latency_s = (
            sum(phase.latencies_s) / len(phase.latencies_s) if phase.latencies_s else None
        )
        phase.peak_memory_gib = record.get("peakMemoryGiB")
        if (record.get("config") or {}).get("compile") and phase.first_call_s and phase.latency_s:
            phase.compile_s = max(0.0, phase.first_call_s - phase.latency_s)
        phase.notes = list(record.get("notes") or [])
        phase.error = from_json(ErrorInfo, record["error"]) if record.get("error") else None
        files = record.get("files") or {}
        phase.images = {k: v for k, v in files.items() if k not in ("array", "latents")}
        for key in ("array", "latents"):
            if files.get(key):
                phase.images[key] = files[key]
        phase.output_kind = record.get("outputKind")
        phase.latent_source = record.get("latentSource")
        phase.steps = record.get("steps")
        if record.get("cacheStats") is not None:
            phase.cache_stats = [from_json(CacheStats, s) for s in record["cacheStats"]]
            cached = {step for stats in phase.cache_stats for step in stats.cached_steps}
            phase.cached_steps = len(cached)
        if record.get("calibration") is not None:
            phase.calibration = from_json(Calibration, record["calibration"])
        if spec.kind == "cache" or spec.cache:
            self._cache_notes(phase)
        if spec.kind == "baseline" and phase.status == "ok":
            self.baseline_latency = phase.latency_s
            self._baseline_path = self.out / phase.images["array"] if "array" in files else None
            self._baseline_latents_path = (
                self.out / phase.images["latents"] if "latents" in files else None
            )
            self._baseline = self._baseline_latents = None
            for other in self.phases.values():
                self._score(other)
        else:
            self._score(phase)
        self.emit(
            "phase_finished",
            phase=phase_id,
            status=phase.status,
            verdict=phase.verdict,
            error=phase.error,
            message=phase.verdict_reason or (phase.error.message if phase.error else None),
        )
        self.write()

    def _cache_notes(self, phase: PhaseResult) -> None:
        if self.request.model.source in ("tiny", "shrink"):
            phase.notes.append(_RANDOM_WEIGHTS)
        if any(s.forced for s in phase.cache_stats or []):
            phase.notes.append(
                "residual-diff threshold >= 1 forces caching without measuring diffs; the "
                "no-cache control's measured diffs are in calibration.probeDiffs with "
                "--calibrate-rdt"
            )

    def _load(self, path: Path | None) -> Any:
        if path is None or not path.is_file():
            return None
        import numpy as np

        return np.load(path)

    def _baseline_array(self) -> Any:
        if self._baseline is None:
            self._baseline = self._load(self._baseline_path)
        return self._baseline

    def _baseline_latent_array(self) -> Any:
        if self._baseline_latents is None:
            self._baseline_latents = self._load(self._baseline_latents_path)
        return self._baseline_latents

    def _compare(
        self, files: dict[str, str], kind: str | None, reference: Any = None
    ) -> tuple[Any, Any]:
        """(output comparison or None, latent comparison or None) of a run's files.

        ``reference``: the output to compare with instead of the baseline's (VAE-P: the baseline
        decoded with tiling); the latents are always compared with the baseline's.
        """
        from .metrics import NonFiniteError, compare, compare_audio, compare_latents, non_finite

        comparison = latents = None
        if reference is None:
            reference = self._baseline_array()
        output = np_load(self.out / files["array"]) if files.get("array") else None
        final = np_load(self.out / files["latents"]) if files.get("latents") else None
        reference_latents = self._baseline_latent_array()
        # NaN or inf in the output or the latents (or the baseline's): a failure of its own,
        # both checked before any metric (NaN differences would read as an infinite PSNR).
        problems = [
            f"{who} {what} {bad}"
            for what, pair in (
                ("output", (reference, output if kind != "latents" else None)),
                ("final latents", (reference_latents, final)),
            )
            for who, array in zip(("the baseline's", "its"), pair, strict=True)
            if array is not None and (bad := non_finite(array)) is not None
        ]
        if problems:
            raise NonFiniteError(
                f"non-finite values: {'; '.join(problems)} (PSNR and SSIM are undefined)"
            )
        if reference is not None and output is not None and kind != "latents":
            compare_output = compare_audio if kind == "audio" else compare
            comparison = compare_output(reference, output)
        if reference_latents is not None and final is not None:
            latents = compare_latents(reference_latents, final)
        return comparison, latents

    def _score(self, phase: PhaseResult) -> None:
        from .metrics import verdict

        if phase.status != "ok":
            return
        if phase.kind == "baseline":
            phase.verdict = "reference"
            phase.speedup = 1.0
            phase.verdict_reason = "the reference every other phase is compared with"
            bad = self._baseline_non_finite()
            if bad:
                phase.verdict = "fail"
                phase.verdict_reason = (
                    f"non-finite values: {bad}: no phase can be compared with this baseline"
                )
            return
        if self.baseline_latency and phase.latency_s:
            phase.speedup = self.baseline_latency / phase.latency_s
        if self._baseline_path is None and self._baseline_latents_path is None:
            return
        spec = self.specs[phase.name]
        record = self._records.get(phase.name, {})
        dtype = self.result.dtype or "bfloat16"
        reference = self._tiled_reference(phase, record)
        try:
            comparison, latents = self._compare(phase.images, phase.output_kind, reference)
            if comparison is None and latents is None:
                raise ValueError("neither the output nor the final latents could be compared")
        except ValueError as exc:
            phase.verdict = "fail"
            phase.verdict_reason = str(exc)
            return
        if comparison is not None:
            phase.psnr_db = comparison.psnr_db
            phase.ssim = comparison.ssim
            phase.snr_db = comparison.snr_db
            phase.min_frame_psnr_db = comparison.min_frame_psnr_db
            phase.min_frame_ssim = comparison.min_frame_ssim
        if latents is not None:
            phase.latent_psnr_db = latents.psnr_db
            phase.latent_max_abs_diff = latents.max_abs_diff
        phase.verdict, phase.verdict_reason = verdict(
            phase.kind,
            comparison,
            self.request.thresholds,
            with_cache=spec.cache,
            dtype=dtype,
            latents=latents,
        )
        cached_phase = spec.kind == "cache" or spec.cache
        if cached_phase and record.get("control") is not None:
            phase.control = self._score_control(record["control"], dtype, phase.output_kind)
            if phase.control.verdict != "pass":
                phase.verdict = "fail"
                phase.verdict_reason = f"no-cache control: {phase.control.reason}"
        donor = tune.control_donor(self.request, spec) if cached_phase else None
        if donor is not None:
            control = self.phases[donor].control
            if control is None or control.verdict != "pass":
                phase.verdict = "fail"
                why = control.reason if control is not None else "it did not run"
                phase.verdict_reason = f"the no-cache control of {donor} (same split): {why}"
            else:
                phase.notes.append(f"the integration is checked by the no-cache control of {donor}")
        if cached_phase and phase.cached_steps == 0 and phase.verdict in ("pass", "warn"):
            phase.verdict = "not_exercised"
            phase.verdict_reason = (
                "no step was cached (the warmup covers the run or every residual diff stayed "
                "above the threshold), so caching itself was not verified; "
                "use --calibrate-rdt SHARE for a plumbing check on random weights"
            )
        if reference is not None and phase.verdict in ("pass", "warn"):
            untiled = self._baseline_array()
            if untiled is not None and untiled.shape == reference.shape:
                import numpy as np

                if np.array_equal(untiled, reference):
                    phase.verdict = "not_exercised"
                    phase.verdict_reason = (
                        "the VAE decoded this output without tiling (it is below the VAE's tile "
                        "size), so VAE-P had nothing to split across ranks"
                    )
        if comparison is not None and "array" in phase.images:
            from .images import save_diff

            diff = f"images/{phase.name}.diff.png"
            peak = save_diff(
                self._baseline_array() if reference is None else reference,
                np_load(self.out / phase.images["array"]),
                self.out / diff,
                phase.output_kind,
            )
            phase.images["diff"] = diff
            if math.isinf(comparison.psnr_db):
                phase.notes.append("bit-identical to the baseline")
            elif peak > 0:
                phase.notes.append(
                    f"largest pixel difference {peak:.4f} (diff image stretched to it)"
                )

    def _baseline_non_finite(self) -> str | None:
        """What is not finite in the baseline's output and latents (None: all finite)."""
        from .metrics import non_finite

        problems = []
        for what, array in (
            ("output", self._baseline_array()),
            ("final latents", self._baseline_latent_array()),
        ):
            bad = non_finite(array) if array is not None else None
            if bad:
                problems.append(f"its {what} {bad}")
        return "; ".join(problems) or None

    def _tiled_reference(self, phase: PhaseResult, record: dict[str, Any]) -> Any:
        """VAE-P: the baseline decoded with tiling on one process (None: compare as usual)."""
        files = record.get("tiledReference") or {}
        if phase.kind != "vae_p" or not files.get("array"):
            return None
        reference = np_load(self.out / files["array"])
        untiled = self._baseline_array()
        note = (
            "output compared with the baseline decoded by the same VAE with tiling on one process "
            "(VAE-P always decodes in tiles)"
        )
        if untiled is not None and untiled.shape == reference.shape:
            from .metrics import psnr

            value = psnr(untiled, reference)
            shown = "inf" if math.isinf(value) else f"{value:.2f}"
            note += f"; tiled vs untiled decode of the baseline: {shown} dB"
        phase.notes.append(note)
        if files.get("output"):
            phase.images["reference"] = files["output"]
        return reference

    def _score_control(
        self, record: dict[str, Any], dtype: str, kind: str | None = None
    ) -> ControlResult:
        from .metrics import control_verdict

        control = ControlResult(status=record.get("status", "ok"), latency_s=record.get("latencyS"))
        files = record.get("files") or {}
        try:
            comparison, latents = self._compare(files, kind)
        except ValueError as exc:
            control.verdict, control.reason = "fail", str(exc)
            return control
        if comparison is not None:
            control.psnr_db = comparison.psnr_db
            control.ssim = comparison.ssim
        if latents is not None:
            control.latent_psnr_db = latents.psnr_db
            control.latent_max_abs_diff = latents.max_abs_diff
        cached = {step for stats in record.get("cacheStats") or [] for step in stats["cachedSteps"]}
        control.cached_steps = len(cached)
        control.verdict, control.reason = control_verdict(
            comparison,
            latents,
            self.request.thresholds,
            dtype,
            cached_steps=len(cached),
            counted_steps=record.get("executedSteps"),
            denoise_steps=record.get("denoiseSteps"),
            transformer_calls=record.get("transformerCalls"),
        )
        return control


def np_load(path: Path) -> Any:
    import numpy as np

    return np.load(path)
