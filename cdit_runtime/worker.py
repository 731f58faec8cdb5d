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
"""

from __future__ import annotations

import datetime
import gc
import inspect
import itertools
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .contract import PhaseSpec, VerificationRequest, from_json, to_json
from .errors import RunFailure, classify, error_info

GIB = 1024**3


class Channel:
    """JSON lines to the controller (stdout stays free for libraries).

    Transport: the pipe inherited from the runtime's launcher (``CDIT_EVENT_FD``); under torchrun,
    which passes no descriptors (multi-node launches), the FIFO the node's controller made for
    this local rank (``CDIT_EVENT_DIR``/rank<LOCAL_RANK>.fifo). No controller: events are dropped.
    """

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    @classmethod
    def from_env(cls) -> Channel:
        fd = os.environ.get("CDIT_EVENT_FD")
        if fd:
            return cls(int(fd))
        from .multinode import open_event_fifo

        return cls(open_event_fifo(os.environ))

    def send(self, kind: str, **payload: Any) -> None:
        if self.fd is None:
            return
        data = (json.dumps({"type": kind, "time": time.time(), **payload}) + "\n").encode()
        view = memoryview(data)
        try:
            while view:
                written = os.write(self.fd, view)
                view = view[written:]
        except BrokenPipeError:
            self.fd = None  # the controller is gone; the run goes on to its end


@dataclass
class Context:
    request: VerificationRequest
    rank: int
    world: int
    local_rank: int
    device: Any
    dtype: Any
    ctrl: Any  # gloo process group for the runtime's own barriers (None: single process)
    channel: Channel
    out: Path
    steps: int
    call_kwargs: dict[str, Any]
    pipe: Any = None
    integration: Any = None
    integration_error: RunFailure | None = None
    accepts: set[str] = field(default_factory=set)
    any_kwargs: bool = False  # the pipeline's __call__ takes **kwargs

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier(group=self.ctrl)


def _versions() -> dict[str, Any]:
    import platform

    out: dict[str, Any] = {"python": platform.python_version()}
    for name, module in (
        ("torch", "torch"),
        ("diffusers", "diffusers"),
        ("transformers", "transformers"),
        ("cacheDit", "cache_dit"),
    ):
        try:
            out[name] = getattr(sys.modules.get(module) or __import__(module), "__version__", None)
        except ImportError:
            out[name] = None
    return out


def _init(spec: dict[str, Any], channel: Channel) -> Context:
    request: VerificationRequest = from_json(VerificationRequest, spec["request"])
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))

    from .integration import use_checkout

    use_checkout(request.integration)
    import torch

    if spec["device"] == "cuda":
        if torch.cuda.device_count() <= local_rank:
            raise RunFailure(
                "MISSING_GPUS",
                f"rank {rank} needs GPU {local_rank}, but {torch.cuda.device_count()} are visible",
            )
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        if (spec.get("dtype") or request.dtype) == "float32":
            # float32 verdicts are near-exact: TF32 (on by default for cuDNN convolutions) would
            # round inputs to 10 mantissa bits and turn a 1e-7 difference into 1e-3.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, int(spec.get("threads", 1))))
    ctrl = None
    if world > 1:
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=float(spec.get("collectiveTimeoutS", 1800)))
        backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
        try:
            dist.init_process_group(backend, timeout=timeout)
            ctrl = (
                dist.new_group(backend="gloo", timeout=timeout) if device.type == "cuda" else None
            )
            dist.barrier(group=ctrl)
        except Exception as exc:
            raise RunFailure("DIST_INIT", f"init_process_group({backend!r}) failed: {exc}") from exc
    import cache_dit  # noqa: F401  (imported once, before any phase)
    import diffusers  # noqa: F401

    if device.type == "cpu":  # ring LSE and TP/TE-P/VAE-P meshes on CPU (see cpu_patches)
        from .cpu_patches import apply_cpu_patches

        apply_cpu_patches()

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    from .inputs import load_inputs

    call_kwargs = {**spec.get("callKwargs", {}), **load_inputs(request.inputs)}
    return Context(
        request=request,
        rank=rank,
        world=world,
        local_rank=local_rank,
        device=device,
        dtype=dtype[spec.get("dtype") or request.dtype or "float32"],
        ctrl=ctrl,
        channel=channel,
        out=Path(request.output_dir).resolve(),
        steps=int(spec["steps"]),
        call_kwargs=call_kwargs,
    )


def _load(ctx: Context, spec: dict[str, Any]) -> dict[str, Any]:
    from .loading import load_pipeline, model_dir
    from .tiny_pipelines import ensure_tiny

    source = ctx.request.model
    if source.source == "tiny":
        if ctx.rank == 0:
            ensure_tiny(source.family or "", model_dir(source, ctx.request.output_dir))
        ctx.barrier()
    pipe, info = load_pipeline(source, ctx.request.output_dir, ctx.dtype, seed=ctx.request.seed)
    pipe.to(ctx.device)
    pipe.set_progress_bar_config(disable=True)
    ctx.pipe = pipe
    params = inspect.signature(type(pipe).__call__).parameters
    ctx.accepts = set(params)
    ctx.any_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    try:
        from .integration import load_integration

        ctx.integration = load_integration(ctx.request.integration)
    except RunFailure as exc:
        ctx.integration_error = exc
    return info


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
                ctx.channel.send("step", phase=phase, step=i + 1, total=steps, label=label)
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


def _module_bytes(module: Any, device: Any) -> int:
    tensors = itertools.chain(module.parameters(), module.buffers())
    return sum(t.numel() * t.element_size() for t in tensors if t.device == device)


def _release(pipe: Any, enabled: bool) -> None:
    if pipe is not None and enabled:
        try:
            import cache_dit

            cache_dit.disable_cache(pipe)
        except Exception:
            pass


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


def _ignored_arguments(ctx: Context) -> list[str]:
    """Call arguments the user gave (extraCallKwargs, inputs) that the pipeline does not take."""
    if ctx.any_kwargs:
        return []
    given = set(ctx.request.extra_call_kwargs) | set(ctx.request.inputs)
    return sorted(name for name in given if name not in ctx.accepts)


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


def _integration(ctx: Context, spec: PhaseSpec) -> Any:
    """The phase's own standalone module, or the request's integration."""
    if spec.integration is None:
        if ctx.integration_error is not None:
            raise ctx.integration_error
        return ctx.integration
    from .contract import Integration
    from .integration import load_integration

    return load_integration(Integration(kind="standalone", path=spec.integration))


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
        integration = _integration(ctx, spec)
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
        _release(pipe, enabled)
        del pipe
        gc.collect()


def _run_phase(ctx: Context, spec: PhaseSpec, collective: bool) -> dict[str, Any]:
    import torch

    from .cache_stats import calibrate, collect, executed_steps
    from .outputs import extract, save
    from .phases import (
        apply_kernels,
        build_configs,
        cache_config,
        cache_options_for,
        check_cache_blocks,
        compile_for,
        config_summary,
        fresh_pipeline,
        modified_components,
    )

    multi = spec.world_size > 1
    report = not collective or ctx.rank == 0
    if report:
        ctx.channel.send("phase_started", phase=spec.id)
    record: dict[str, Any] = {"status": "ok", "config": {}, "notes": []}
    phase_pipe = None
    enabled = False
    options = cache_options_for(spec, ctx.request)
    plain = spec.kind in ("baseline", "kernels")  # no integration applied
    try:
        names = modified_components(ctx.pipe, spec)
        cache, parallel = build_configs(spec, ctx.request, ctx.steps)
        record["config"] = config_summary(spec, cache, parallel, ctx.request)
        integration = _integration(ctx, spec) if not plain else None
        if cache is not None and (options.control or options.calibrate_share is not None):
            record["control"] = _control_run(ctx, spec, names, collective, report)
            if options.calibrate_share is not None:
                calibration = calibrate(
                    record["control"]["cacheStats"], options, ctx.steps, options.calibrate_share
                )
                record["calibration"] = calibration
                if calibration["threshold"] is not None:
                    cache = cache_config(options, ctx.steps, threshold=calibration["threshold"])
                    record["config"] = config_summary(spec, cache, parallel, ctx.request)
            if not options.control:
                record["control"] = None
        record["config"]["devices"] = [str(ctx.device)] if not multi else None
        started = time.perf_counter()
        phase_pipe = fresh_pipeline(ctx.pipe, names)
        if not plain:
            enabled = True
            integration.enable(phase_pipe, cache, parallel)
            if cache is not None:
                check_cache_blocks(phase_pipe.transformer, options)
        apply_kernels(phase_pipe, names, spec, ctx.request)
        ctx.sync()
        record["setupS"] = time.perf_counter() - started
        idle = sum(_module_bytes(ctx.pipe.components[n], ctx.device) for n in names)
        if ctx.cuda:
            torch.cuda.reset_peak_memory_stats(ctx.device)
        warm_steps = ctx.request.warmup_steps or ctx.steps
        if cache is not None:
            warm_steps = ctx.steps  # a persistent cache context counts steps across calls
        warmups = ctx.request.warmup
        if compile_for(spec, ctx.request):
            # compilation happens in the first call: never inside the timed runs
            warmups, warm_steps = max(1, warmups), ctx.steps
        for i in range(warmups):
            first = time.perf_counter()
            _call(ctx, phase_pipe, warm_steps, spec.id, f"warmup {i + 1}", report)
            if i == 0 and warm_steps == ctx.steps:
                ctx.sync()
                record["firstCallS"] = time.perf_counter() - first
        latencies = []
        result = None
        for i in range(ctx.request.repeat):
            result, latency = _timed_call(
                ctx, phase_pipe, spec.id, f"timed {i + 1}", collective, report
            )
            latencies.append(latency)
        record["latenciesS"] = latencies
        record["steps"] = ctx.steps
        ignored = _ignored_arguments(ctx)
        if ignored:
            record["notes"].append(
                f"the pipeline's __call__ takes no {ignored}: not passed (check the spelling)"
            )
        record["transformerCalls"] = result.transformer_calls if result else None
        if ctx.cuda:
            peak = torch.cuda.max_memory_allocated(ctx.device) - idle
            record["peakMemoryGiB"] = [round(peak / GIB, 3)]
        if cache is not None:
            record["cacheStats"] = collect(phase_pipe)
            record["executedSteps"] = executed_steps(phase_pipe)
        if report and result is not None:
            output = extract(result.output, phase_pipe)
            record["outputKind"] = output.kind
            if output.note:
                record["notes"].append(f"compared on the final latents only: {output.note}")
            record["files"] = save(ctx.out, spec.id, output, result.latents)
            record["latentSource"] = result.latent_source
            if spec.kind == "vae_p" and output.array is not None:
                record["tiledReference"] = _tiled_reference(ctx, spec)
    except Exception as exc:
        record = {
            "status": "failed",
            "config": record.get("config", {}),
            "error": to_json(classify(exc, phase_kind=spec.kind)),
        }
        if collective:
            # The other ranks may now wait forever in a collective: tell the controller at once.
            ctx.channel.send("rank_failed", phase=spec.id, rank=ctx.rank, error=record["error"])
        if not report:
            print(f"[rank {ctx.rank}] phase {spec.id} failed:", file=sys.stderr)
            import traceback

            traceback.print_exc()
    finally:
        _release(phase_pipe, enabled)
        del phase_pipe
        gc.collect()
        if ctx.cuda:
            torch.cuda.empty_cache()
    if collective:
        record = _combine(ctx, record, per_device=multi)
        if not multi and report:
            record["notes"] = [
                *record.get("notes", []),
                f"run on all {ctx.world} ranks at once (cache-dit all-reduces residual diffs "
                "when torch.distributed is initialised); figures of rank 0",
            ]
    return record


def _combine(ctx: Context, record: dict[str, Any], per_device: bool) -> dict[str, Any]:
    """Gather every rank's record on the gloo group: slowest latency, memory per device.

    ``per_device`` False (a replicated single-process phase): rank 0's latency and memory.
    """
    import torch.distributed as dist

    lite = {
        "status": record["status"],
        "latenciesS": record.get("latenciesS"),
        "peakMemoryGiB": record.get("peakMemoryGiB"),
        "error": record.get("error"),
        "device": str(ctx.device),
    }
    gathered: list[Any] = [None] * ctx.world
    dist.all_gather_object(gathered, lite, group=ctx.ctrl)
    if ctx.rank != 0:
        return record
    failed = [g for g in gathered if g["status"] != "ok"]
    if failed and record["status"] == "ok":
        record = {
            "status": "failed",
            "config": record.get("config", {}),
            "error": failed[0]["error"],
        }
    if record["status"] == "ok" and per_device:
        runs = [g["latenciesS"] for g in gathered]
        record["latenciesS"] = [max(values) for values in zip(*runs, strict=True)]
        if all(g["peakMemoryGiB"] for g in gathered):
            record["peakMemoryGiB"] = [g["peakMemoryGiB"][0] for g in gathered]
    if per_device:
        record.setdefault("config", {})["devices"] = [g["device"] for g in gathered]
    return record


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
    from .multinode import join_nodes

    try:
        join_nodes(spec)  # multi-node launches: rank 0 on node 0, same request, model everywhere
    except Exception as exc:
        rank = int(os.environ.get("RANK", "0"))
        channel.send("fatal", rank=rank, stage="nodes", error=to_json(classify(exc)))
        return 3
    rank = int(os.environ.get("RANK", "0"))
    try:
        ctx = _init(spec, channel)
    except Exception as exc:
        channel.send("fatal", rank=rank, stage="init", error=to_json(classify(exc)))
        return 3
    channel.send(
        "ready",
        rank=rank,
        importS=time.time() - spawned,
        versions=_versions(),
        deviceNames=_device_names(ctx),
    )
    loaded = time.perf_counter()
    try:
        info = _load(ctx, spec)
    except Exception as exc:
        channel.send("fatal", rank=rank, stage="load", error=to_json(classify(exc)))
        return 4
    integration = {
        "transformerClass": ctx.integration.transformer_class if ctx.integration else None,
        "error": to_json(ctx.integration_error.info) if ctx.integration_error else None,
    }
    channel.send(
        "loaded",
        rank=rank,
        loadS=time.perf_counter() - loaded,
        model=info,
        integration=integration,
    )

    for item in spec["phases"]:
        phase: PhaseSpec = from_json(PhaseSpec, item["spec"])
        collective = phase.world_size > 1 or item.get("rank", 0) < 0
        if collective:
            ctx.barrier()  # every rank starts together (rank 0 may still be on the baseline)
        elif item.get("rank", 0) != ctx.rank:
            continue
        if phase.kind != "baseline" and _past_deadline(ctx, spec.get("deadline"), collective):
            record = {"status": "skipped", "config": {}, "error": to_json(_budget_spent())}
        else:
            record = _run_phase(ctx, phase, collective)
        if not collective or ctx.rank == 0:
            channel.send("phase_done", phase=phase.id, record=record)
    if ctx.world > 1:
        import torch.distributed as dist

        ctx.barrier()
        dist.destroy_process_group()
    channel.send("done", rank=rank)
    return 0


def _budget_spent() -> Any:
    return error_info("BUDGET", "not run: the time box was spent before this point could start")


def _past_deadline(ctx: Context, deadline: float | None, collective: bool) -> bool:
    """Whether a phase starts after the run's time box (rank 0 decides for a collective one)."""
    if deadline is None:
        return False
    past = [time.time() > float(deadline)]
    if collective and ctx.world > 1:
        import torch.distributed as dist

        dist.broadcast_object_list(past, src=0, group=ctx.ctrl)
    return bool(past[0])


def _device_names(ctx: Context) -> list[str]:
    if ctx.cuda:
        import torch

        return [torch.cuda.get_device_name(ctx.device)]
    import platform

    return [platform.processor() or platform.machine() or "cpu"]


if __name__ == "__main__":
    sys.exit(main())
