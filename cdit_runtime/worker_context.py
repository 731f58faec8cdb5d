"""What one rank of a launch holds across its phases (see `worker`).

`Channel`: JSON lines to the controller. `Context`: the request, this rank's place in the launch,
its device and dtype, the runtime's own process group and the pipeline loaded once. The steps that
set them up (`select_device`, `init_process_groups`, `load_model`), and what the ranks agree on
together (`combine_records`, `past_deadline`).
"""

from __future__ import annotations

import datetime
import inspect
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .contract import PhaseSpec, VerificationRequest
from .contract.worker import WorkerMessage, encode
from .errors import RunFailure, error_info

__all__ = [
    "Channel",
    "Context",
    "budget_spent",
    "combine_records",
    "device_names",
    "ignored_arguments",
    "init_process_groups",
    "load_model",
    "past_deadline",
    "phase_integration",
    "runtime_versions",
    "select_device",
]


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
        from .multinode_join import open_event_fifo

        return cls(open_event_fifo(os.environ))

    def send(self, message: WorkerMessage) -> None:
        if self.fd is None:
            return
        view = memoryview(encode(message, time.time()))
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


def runtime_versions() -> dict[str, Any]:
    """Python's version and those of the libraries a run depends on (None: not installed)."""
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


def device_names(ctx: Context) -> list[str]:
    """The name of this rank's device (the CPU: its processor or machine)."""
    if ctx.cuda:
        import torch

        return [torch.cuda.get_device_name(ctx.device)]
    import platform

    return [platform.processor() or platform.machine() or "cpu"]


# ----------------------------------------------------------------------------------------- setup


def select_device(
    spec: dict[str, Any], request: VerificationRequest, rank: int, local_rank: int
) -> Any:
    """This rank's torch device: its GPU (float32 without TF32), or the CPU with its threads;
    deterministic algorithms when the request asks for them."""
    import torch

    if request.deterministic:
        # read when cuBLAS starts (the first GEMM), so before any CUDA work of this process
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)

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
    return device


def init_process_groups(spec: dict[str, Any], device: Any, world: int) -> Any:
    """The launch's process group; returns the gloo group of the runtime's own barriers and
    gathers (None: one process, or on CPU, where the default group is gloo already)."""
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
    return ctrl


def load_model(ctx: Context, spec: dict[str, Any]) -> dict[str, Any]:
    """The pipeline, loaded once (rank 0 builds a tiny one first), and the integration; returns
    the model description for the controller. An integration that does not load fails the phases
    that use it, not the launch."""
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


# ------------------------------------------------------------------------------------ phases


def phase_integration(ctx: Context, spec: PhaseSpec) -> Any:
    """The phase's own standalone module, or the request's integration."""
    if spec.integration is None:
        if ctx.integration_error is not None:
            raise ctx.integration_error
        return ctx.integration
    from .contract import Integration
    from .integration import load_integration

    return load_integration(Integration(kind="standalone", path=spec.integration))


def ignored_arguments(ctx: Context) -> list[str]:
    """Call arguments the user gave (extraCallKwargs, inputs) that the pipeline does not take."""
    if ctx.any_kwargs:
        return []
    given = set(ctx.request.extra_call_kwargs) | set(ctx.request.inputs)
    return sorted(name for name in given if name not in ctx.accepts)


# ------------------------------------------------------------------------------------ collectives


def combine_records(ctx: Context, record: dict[str, Any], per_device: bool) -> dict[str, Any]:
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


def budget_spent() -> Any:
    """The error of a point the run's time box left no time for."""
    return error_info("BUDGET", "not run: the time box was spent before this point could start")


def past_deadline(ctx: Context, deadline: float | None, collective: bool) -> bool:
    """Whether a phase starts after the run's time box (rank 0 decides for a collective one)."""
    if deadline is None:
        return False
    past = [time.time() > float(deadline)]
    if collective and ctx.world > 1:
        import torch.distributed as dist

        dist.broadcast_object_list(past, src=0, group=ctx.ctrl)
    return bool(past[0])
