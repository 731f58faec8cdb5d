"""Run a `VerificationRequest`: plan launches, drive the workers, score, write results.

The controller imports no torch. It starts each launch (`launcher`), relays the workers' events as
`ProgressEvent` JSON lines, enforces per-phase and per-launch timeouts, and after every phase
rewrites ``results.json`` atomically (temp file + rename), so a failing or hanging phase loses
nothing already measured. When a rank dies or a phase times out, the launch's remaining phases
are relaunched in fresh processes (as long as the previous launch made progress). Metrics
(PSNR/SSIM on the float arrays, verdicts, difference images) are computed here as soon as both the
baseline and the phase output exist.

The loop that follows one launch is `launch_driver.LaunchDriver`; scoring a phase against the
baseline is `scoring`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import tune
from .contract import (
    ErrorInfo,
    IntegrationInfo,
    LaunchInfo,
    PhaseResult,
    PhaseSpec,
    ProgressEvent,
    VerificationRequest,
    VerificationResult,
    to_json,
)
from .errors import RunFailure, error_info
from .inputs import check_inputs
from .launch_driver import TERMINAL, LaunchDriver
from .launcher import Launch, start_launch
from .multinode_launch import start_node_launch
from .multinode_plan import check_nodes, local_world, plan_for_nodes
from .planning import LaunchPlan, resolve_device
from .scoring import Baseline, ScoringContext, cache_notes, fill_phase, score_phase
from .tiny_pipelines import FAMILIES

__all__ = ["EXIT_COULD_NOT_RUN", "EXIT_OK", "Controller"]

EXIT_OK = 0
EXIT_COULD_NOT_RUN = 1
EXIT_CANCELLED = 130
_FAILED_RANK_GRACE_S = 10.0
_EXTERNAL_STOP_GRACE_S = 3.0


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
        self.baseline = Baseline()  # the arrays every phase is compared with
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
        if spec.kind == "cache-dit-checkout" and path is None:
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
        latents = folder / "arrays" / "baseline.latents.npy"
        self.baseline.use(array, latents if latents.is_file() else None)
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
            if phase.status not in TERMINAL:
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
                if phase.status not in TERMINAL:
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
            todo = [(s, r) for s, r in todo if self.phases[s.id].status not in TERMINAL]
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
        spec_path = self._write_launch_spec(name, world, todo, device)
        env = self._launch_env(world, device)
        info = LaunchInfo(
            world_size=world,
            backend="none"
            if world == 1
            else ("cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"),
            phases=[s.id for s, _ in todo],
        )
        self.result.launches.append(info)
        self.launch_error = None
        launch, where = self._start(name, spec_path, world, env, info)
        self.current = launch
        try:
            self.emit(
                "launch_started",
                message=f"{name}: {world} process(es){where}, phases {info.phases}",
            )
            progressed = LaunchDriver(self, launch, info, todo).run()
        finally:
            launch.close()  # every path: nothing the launch started outlives it
            self.current = None
        info.wall_s = time.time() - launch.started
        info.exit_codes = [r.exit_code for r in launch.ranks]
        self.write()
        return progressed

    def _write_launch_spec(
        self, name: str, world: int, todo: list[tuple[Any, int]], device: str
    ) -> Path:
        """The launch's JSON file (what every rank reads): request, settings, its phases."""
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
        return spec_path

    def _launch_env(self, world: int, device: str) -> dict[str, str]:
        """The ranks' environment: offline, unbuffered, the CPU's threads shared out."""
        cpus = os.cpu_count() or 1
        local = local_world(self.request.nodes, world)  # processes on this host
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
        return env

    def _start(
        self, name: str, spec_path: Path, world: int, env: dict[str, str], info: LaunchInfo
    ) -> tuple[Launch, str]:
        """Start the launch's processes (torchrun over the nodes, or local ranks); the launch and
        where it runs, for the launch_started message."""
        nodes = self.request.nodes
        if not (nodes.nnodes > 1 and world > 1):
            return start_launch(name, spec_path, world, self.out / "logs", env), ""
        node_launch = start_node_launch(
            name,
            spec_path,
            world,
            self.out / "logs",
            env,
            nodes,
            index=len(self.result.launches) - 1,
            join_timeout_s=self.request.launch_timeout_s,
        )
        local = local_world(nodes, world)
        where = f" over {nodes.nnodes} nodes ({local} here, node {nodes.node_rank})"
        info.nodes = nodes.nnodes
        info.rendezvous = f"{node_launch.endpoint}/{node_launch.rdzv_id}"
        return node_launch, where

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
        fill_phase(phase, record)
        files = record.get("files") or {}
        if spec.kind == "cache" or spec.cache:
            cache_notes(phase, self.request)
        if spec.kind == "baseline" and phase.status == "ok":
            self.baseline_latency = phase.latency_s
            self.baseline.use(
                self.out / phase.images["array"] if "array" in files else None,
                self.out / phase.images["latents"] if "latents" in files else None,
            )
            # the baseline first: its rerun is the floor the controls are judged against
            for other in sorted(self.phases.values(), key=lambda p: p.kind != "baseline"):
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

    def _score(self, phase: PhaseResult) -> None:
        """Metrics, verdict and notes of a finished phase (`scoring.score_phase`)."""
        score_phase(
            phase,
            ScoringContext(
                out=self.out,
                baseline=self.baseline,
                request=self.request,
                specs=self.specs,
                records=self._records,
                phases=self.phases,
                dtype=self.result.dtype,
                baseline_latency=self.baseline_latency,
            ),
        )
