"""One rank of a launch: ``python -m cdit_runtime.worker LAUNCH.json`` (started by `launcher`).

The environment carries what torchrun would set (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``) plus ``CDIT_EVENT_FD``, a pipe to the controller that receives
one JSON object per line (multi-node launches run under torchrun and use a FIFO instead, see
`multinode`). Every rank imports once and loads the pipeline once; then it runs the
launch's phases in order:

* single-process phases (baseline, cache) run on the rank the controller assigned, concurrently
  on different ranks (devices), each in its own phase pipeline;
* after a barrier, every multi-process phase runs on all ranks (the process group is initialised
  with ``cpu:gloo,cuda:nccl`` on GPUs and ``gloo`` on CPU; a separate gloo group carries the
  runtime's own barriers and gathers).

A phase that raises is reported as failed (with a classified error) and the next one starts; a
rank that dies or hangs is handled by the controller (timeouts, relaunch of the rest).

Here: the rank's start (`main`, `_init`), its pipeline calls and the phase steps that call the
pipeline. What a rank holds across its phases (`Channel`, `Context`), how it is set up and what
the ranks agree on together live in `worker_context`; a phase's other steps in `worker_phase`.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .contract import PhaseSpec, VerificationRequest, from_json, to_json
from .contract.worker import (
    Done,
    Fatal,
    Loaded,
    LoadedIntegration,
    PhaseDone,
    PhaseStarted,
    Ready,
    Step,
)
from .errors import RunFailure, classify
from .work_meter import local_elements, measured_rows, text_encoders_of, transformers_of
from .worker_context import (
    Channel,
    Context,
    budget_spent,
    device_names,
    init_process_groups,
    load_model,
    past_deadline,
    phase_integration,
    runtime_versions,
    select_device,
)
from .worker_phase import (
    PhaseRun,
    collective_record,
    failed_record,
    module_bytes,
    record_measurements,
    release_phase,
    release_pipeline,
    set_up_pipe,
)

__all__ = ["CallResult", "Channel", "Context", "main"]


def _init(spec: dict[str, Any], channel: Channel) -> Context:
    """This rank's context: device, process groups, libraries imported once, call inputs."""
    request: VerificationRequest = from_json(VerificationRequest, spec["request"])
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))

    from .integration import use_checkout

    use_checkout(request.integration)
    import torch

    device = select_device(spec, request, rank, local_rank)
    ctrl = init_process_groups(spec, device, world)
    import cache_dit  # noqa: F401  (imported once, before any phase)
    import diffusers  # noqa: F401

    if device.type == "cpu":  # ring LSE and TP/TE-P/VAE-P meshes on CPU (see cpu_patches)
        from .cpu_patches import apply_cpu_patches

        apply_cpu_patches()

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    run_dtype = dtype[spec.get("dtype") or request.dtype or "float32"]
    from .inputs import load_inputs

    call_kwargs = {**spec.get("callKwargs", {}), **load_inputs(request.inputs, run_dtype)}
    return Context(
        request=request,
        rank=rank,
        world=world,
        local_rank=local_rank,
        device=device,
        dtype=run_dtype,
        ctrl=ctrl,
        channel=channel,
        out=Path(request.output_dir).resolve(),
        steps=int(spec["steps"]),
        call_kwargs=call_kwargs,
    )


# --------------------------------------------------------------------------------------- phases


@dataclass
class CallResult:
    """One pipeline call: its output and the denoiser's final latents (numpy, or None)."""

    output: Any
    latents: Any = None
    latent_source: str | None = None
    transformer_calls: int = 0
    denoise_steps: int | None = None  # step callbacks seen, else the scheduler's timesteps


def _capture_transformer(pipe: Any, box: dict[str, Any]) -> list[Any]:
    """Forward hooks that count transformer calls and keep the last output (no copy)."""
    import torch

    handles = []
    for name in ("transformer", "transformer_2"):
        module = getattr(pipe, name, None)
        if not isinstance(module, torch.nn.Module):
            continue

        def hook(_module: Any, _args: Any, output: Any) -> None:
            box["calls"] = box.get("calls", 0) + 1
            box["transformer"] = output

        handles.append(module.register_forward_hook(hook))
    return handles


def _first_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    sample = getattr(value, "sample", None)
    if isinstance(sample, torch.Tensor):
        return sample
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    return None


def _call(ctx: Context, pipe: Any, steps: int, phase: str, label: str, report: bool) -> CallResult:
    """Run the pipeline once; keep the latents after the last step (or the last transformer
    output where the pipeline has no step callback)."""
    import torch

    kwargs = {k: v for k, v in ctx.call_kwargs.items() if k in ctx.accepts or ctx.any_kwargs}
    kwargs["num_inference_steps"] = steps
    kwargs["generator"] = torch.Generator("cpu").manual_seed(ctx.request.seed)
    box: dict[str, Any] = {}
    tensor_inputs = getattr(pipe, "_callback_tensor_inputs", None) or []
    if "callback_on_step_end" in ctx.accepts:
        wants_latents = "latents" in tensor_inputs and (
            "callback_on_step_end_tensor_inputs" in ctx.accepts
        )
        if wants_latents:
            kwargs["callback_on_step_end_tensor_inputs"] = ["latents"]

        box["steps"] = 0

        def on_step(_pipe: Any, i: int, _t: Any, step_kwargs: dict[str, Any]) -> dict[str, Any]:
            box["steps"] += 1
            if wants_latents and isinstance(step_kwargs.get("latents"), torch.Tensor):
                box["latents"] = step_kwargs["latents"]
            if report:
                ctx.channel.send(Step(phase=phase, step=i + 1, total=steps, label=label))
            return {}

        kwargs["callback_on_step_end"] = on_step
    handles = _capture_transformer(pipe, box)
    try:
        output = pipe(**kwargs)
    finally:
        for handle in handles:
            handle.remove()
    steps_seen = box.get("steps")
    if steps_seen is None:
        # No step callback: the scheduler's timesteps of this call say how many steps ran.
        timesteps = getattr(getattr(pipe, "scheduler", None), "timesteps", None)
        steps_seen = len(timesteps) if timesteps is not None else None
    latents, source = box.get("latents"), "callback"
    if latents is None:
        latents, source = _first_tensor(box.get("transformer")), "transformer"
    if latents is not None:
        latents = latents.detach().float().cpu().numpy()
    return CallResult(
        output=output,
        latents=latents,
        latent_source=source if latents is not None else None,
        transformer_calls=int(box.get("calls", 0)),
        denoise_steps=steps_seen,
    )


def _timed_call(
    ctx: Context, pipe: Any, phase: str, label: str, collective: bool, report: bool
) -> tuple[CallResult, float]:
    if collective:
        ctx.barrier()
    ctx.sync()
    t0 = time.perf_counter()
    result = _call(ctx, pipe, ctx.steps, phase, label, report)
    ctx.sync()
    return result, time.perf_counter() - t0


def _tiled_reference(ctx: Context, spec: PhaseSpec) -> dict[str, str] | None:
    """The baseline decoded by the same VAE with tiling on, on this process alone.

    cache-dit's VAE-P always decodes in tiles (spread over the ranks), and a tiled decode
    differs from an untiled one at the seams: VAE-P must reproduce this, not the baseline.
    None when the VAE has no tiling.
    """
    from .outputs import extract, save
    from .phases import fresh_pipeline

    pipe = fresh_pipeline(ctx.pipe, ["vae"])
    enable = getattr(pipe.vae, "enable_tiling", None)
    if not callable(enable):
        return None
    enable()
    result = _call(ctx, pipe, ctx.steps, spec.id, "tiled reference", False)
    files = save(ctx.out, f"{spec.id}.tiled-reference", extract(result.output, pipe), None)
    del pipe
    gc.collect()
    return files


def _control_run(
    ctx: Context, spec: PhaseSpec, names: list[str], collective: bool, report: bool
) -> dict[str, Any]:
    """The integration with caching disabled, once: output, latents, diffs and step count."""
    from .cache_stats import collect, executed_steps
    from .outputs import extract, save
    from .phases import build_configs, cache_options_for, control_cache_config, fresh_pipeline

    pipe = fresh_pipeline(ctx.pipe, names)
    enabled = False
    try:
        _, parallel = build_configs(spec, ctx.request, ctx.steps)
        enabled = True
        integration = phase_integration(ctx, spec)
        options = cache_options_for(spec, ctx.request)
        integration.enable(pipe, control_cache_config(options, ctx.steps), parallel)
        result, latency = _timed_call(ctx, pipe, spec.id, "no-cache control", collective, report)
        control: dict[str, Any] = {
            "status": "ok",
            "latencyS": latency,
            "cacheStats": collect(pipe),
            "executedSteps": executed_steps(pipe),
            "transformerCalls": result.transformer_calls,
            "denoiseSteps": result.denoise_steps,
        }
        if report:
            output = extract(result.output, pipe)
            control["files"] = save(ctx.out, f"{spec.id}.control", output, result.latents)
        return control
    except Exception as exc:
        raise RunFailure(
            "INTEGRATION",
            f"the no-cache control (the integration with caching disabled) failed: "
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
        ) from exc
    finally:
        release_pipeline(pipe, enabled)
        del pipe
        gc.collect()


def _run_phase(ctx: Context, spec: PhaseSpec, collective: bool) -> dict[str, Any]:
    """Run one phase on this rank; its record (a failure is a record too)."""
    from .phases import cache_options_for

    report = not collective or ctx.rank == 0
    if report:
        ctx.channel.send(PhaseStarted(phase=spec.id))
    run = PhaseRun(spec, cache_options_for(spec, ctx.request), collective, report)
    try:
        _measure(ctx, run)
    except Exception as exc:
        run.record = failed_record(ctx, run, exc)
    finally:
        release_phase(ctx, run)
    if collective:
        return collective_record(ctx, run)
    return run.record


def _measure(ctx: Context, run: PhaseRun) -> None:
    """Set the phase pipeline up, warm it up, time it; measurements and output into the record."""
    import torch

    from .phases import compile_for, modified_components

    record = run.record
    names = modified_components(ctx.pipe, run.spec)
    cache, parallel, integration = _configure(ctx, run, names)
    record["config"]["devices"] = [str(ctx.device)] if not run.multi else None
    started = time.perf_counter()
    set_up_pipe(ctx, run, names, (cache, parallel), integration)
    ctx.sync()
    record["setupS"] = time.perf_counter() - started
    idle = sum(module_bytes(ctx.pipe.components[n], ctx.device) for n in names)
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    transformers = transformers_of(run.pipe, names)
    work: dict[str, Any] = {
        "paramElements": local_elements(transformers),
        "textEncoderElements": local_elements(text_encoders_of(run.pipe)),
    }
    record["work"] = work
    # rows per Linear call, over the first transformer call only (not under torch.compile, whose
    # graphs the hooks would change)
    counted = [] if compile_for(run.spec, ctx.request) else transformers
    with measured_rows(counted, work):
        _warm_up(ctx, run, cache)
        result = _timed_runs(ctx, run)
    record_measurements(ctx, run, result.transformer_calls if result else None, cache, idle)
    if run.report and result is not None:
        _record_output(ctx, run, result)


def _configure(ctx: Context, run: PhaseRun, names: list[str]) -> tuple[Any, Any, Any]:
    """(cache config, parallelism config, integration) of the phase; a cache phase's no-cache
    control runs here, and with calibrateShare its diffs choose the threshold."""
    from .cache_stats import calibrate
    from .phases import build_configs, calibrated_config, config_summary

    spec, record, options = run.spec, run.record, run.options
    cache, parallel = build_configs(spec, ctx.request, ctx.steps)
    record["config"] = config_summary(spec, cache, parallel, ctx.request)
    integration = phase_integration(ctx, spec) if not run.plain else None
    if cache is not None and (options.control or options.calibrate_share is not None):
        record["control"] = _control_run(ctx, spec, names, run.collective, run.report)
        if options.calibrate_share is not None:
            calibration = calibrate(
                record["control"]["cacheStats"], options, ctx.steps, options.calibrate_share
            )
            record["calibration"] = calibration
            if calibration["threshold"] is not None:
                cache = calibrated_config(options, ctx.steps, calibration)
                record["config"] = config_summary(spec, cache, parallel, ctx.request)
        if not options.control:
            record["control"] = None
    return cache, parallel, integration


def _warm_up(ctx: Context, run: PhaseRun, cache: Any) -> None:
    """The untimed runs; the first call's time when it ran the full steps (firstCallS). The
    baseline's first full-step warmup is a rerun of the timed call (same inputs and seed): its
    output is saved (rerunFiles) to measure how well the pipeline reproduces itself."""
    from .phases import compile_for

    warm_steps = ctx.request.warmup_steps or ctx.steps
    if cache is not None:
        warm_steps = ctx.steps  # a persistent cache context counts steps across calls
    warmups = ctx.request.warmup
    if compile_for(run.spec, ctx.request):
        # compilation happens in the first call: never inside the timed runs
        warmups, warm_steps = max(1, warmups), ctx.steps
    for i in range(warmups):
        first = time.perf_counter()
        result = _call(ctx, run.pipe, warm_steps, run.spec.id, f"warmup {i + 1}", run.report)
        if i == 0 and warm_steps == ctx.steps:
            ctx.sync()
            run.record["firstCallS"] = time.perf_counter() - first
            if run.spec.kind == "baseline" and run.report:
                _save_rerun(ctx, run, result)
        del result


def _save_rerun(ctx: Context, run: PhaseRun, result: CallResult) -> None:
    from .outputs import extract, save

    output = extract(result.output, run.pipe)
    run.record["rerunFiles"] = save(ctx.out, f"{run.spec.id}.rerun", output, result.latents)


def _timed_runs(ctx: Context, run: PhaseRun) -> CallResult | None:
    """The timed runs (latenciesS); the last one's result (None: no timed run)."""
    latencies = []
    result = None
    for i in range(ctx.request.repeat):
        result, latency = _timed_call(
            ctx, run.pipe, run.spec.id, f"timed {i + 1}", run.collective, run.report
        )
        latencies.append(latency)
    run.record["latenciesS"] = latencies
    run.record["steps"] = ctx.steps
    return result


def _record_output(ctx: Context, run: PhaseRun, result: CallResult) -> None:
    """Save the output and latents (and VAE-P's tiled reference); what was saved, as files."""
    from .outputs import extract, save

    record, spec = run.record, run.spec
    output = extract(result.output, run.pipe)
    record["outputKind"] = output.kind
    if output.note:
        record["notes"].append(f"compared on the final latents only: {output.note}")
    record["files"] = save(ctx.out, spec.id, output, result.latents)
    record["latentSource"] = result.latent_source
    if spec.kind == "vae_p" and output.array is not None:
        record["tiledReference"] = _tiled_reference(ctx, spec)


# ----------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    import faulthandler

    # a crash in native code (SIGSEGV, SIGBUS, SIGABRT) leaves every thread's Python stack in
    # the rank's log: the controller reports only the signal
    faulthandler.enable(all_threads=True)
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[0]).read_text())
    channel = Channel.from_env()
    spawned = float(os.environ.get("CDIT_SPAWN_TIME", time.time()))
    from .multinode_join import join_nodes

    try:
        join_nodes(spec)  # multi-node launches: rank 0 on node 0, same request, model everywhere
    except Exception as exc:
        rank = int(os.environ.get("RANK", "0"))
        channel.send(Fatal(rank=rank, stage="nodes", error=classify(exc)))
        return 3
    rank = int(os.environ.get("RANK", "0"))
    try:
        ctx = _init(spec, channel)
    except Exception as exc:
        channel.send(Fatal(rank=rank, stage="init", error=classify(exc)))
        return 3
    channel.send(
        Ready(
            rank=rank,
            import_s=time.time() - spawned,
            versions=runtime_versions(),
            device_names=device_names(ctx),
        )
    )
    loaded = time.perf_counter()
    try:
        info = load_model(ctx, spec)
    except Exception as exc:
        channel.send(Fatal(rank=rank, stage="load", error=classify(exc)))
        return 4
    integration = LoadedIntegration(
        transformer_class=ctx.integration.transformer_class if ctx.integration else None,
        error=ctx.integration_error.info if ctx.integration_error else None,
    )
    channel.send(
        Loaded(rank=rank, load_s=time.perf_counter() - loaded, model=info, integration=integration)
    )

    for item in spec["phases"]:
        phase: PhaseSpec = from_json(PhaseSpec, item["spec"])
        collective = phase.world_size > 1 or item.get("rank", 0) < 0
        if collective:
            ctx.barrier()  # every rank starts together (rank 0 may still be on the baseline)
        elif item.get("rank", 0) != ctx.rank:
            continue
        if phase.kind != "baseline" and past_deadline(ctx, spec.get("deadline"), collective):
            record = {"status": "skipped", "config": {}, "error": to_json(budget_spent())}
        else:
            record = _run_phase(ctx, phase, collective)
        if not collective or ctx.rank == 0:
            channel.send(PhaseDone(phase=phase.id, record=record))
    if ctx.world > 1:
        import torch.distributed as dist

        ctx.barrier()
        dist.destroy_process_group()
    channel.send(Done(rank=rank))
    return 0


if __name__ == "__main__":
    sys.exit(main())
