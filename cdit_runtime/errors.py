"""Errors as data: classify an exception into an `ErrorInfo` with a code and a hint."""

from __future__ import annotations

import traceback as tb

from .contract import ErrorInfo

__all__ = ["HINTS", "RunFailure", "classify", "error_info"]

HINTS: dict[str, str] = {
    "OOM": (
        "Out of memory: lower height/width/frames, enable CPU offload "
        "(pipe.enable_model_cpu_offload(), cache-dit CLI --cpu-offload), or spread the model over "
        "more GPUs (a tp phase shards the weights; CP shards activations only)."
    ),
    "DIST_INIT": (
        "The process group did not start. On GPUs check that NCCL sees every device "
        "(NCCL_DEBUG=INFO, CUDA_VISIBLE_DEVICES) and that MASTER_PORT is free; on CPU the gloo "
        "backend is used and needs a working loopback interface (GLOO_SOCKET_IFNAME=lo)."
    ),
    "MISSING_GPUS": (
        "Request fewer processes (phase size) or run on a machine with more GPUs; every process "
        "needs its own GPU (NCCL refuses two ranks on one device)."
    ),
    "NEEDS_ACCELERATOR": (
        "Run this phase on GPUs: cache-dit builds TP, TE-P and VAE-P device meshes from "
        "torch.accelerator, and Ring attention needs the flash SDPA kernel's LSE; a CPU-only "
        "host has neither."
    ),
    "WORLD_TOO_SMALL": (
        "Hybrid CP + TP needs at least 4 processes (e.g. Ulysses 2 x TP 2). With 2 processes "
        "cache-dit's `ulysses_tp` silently runs TP only, so the runtime refuses instead."
    ),
    "NO_MODEL_INDEX": (
        "Point the model path at a diffusers pipeline directory (the one holding "
        "model_index.json, e.g. a snapshot folder), not at a single component or weights file."
    ),
    "MODEL_LOAD": (
        "Check the model path, the pipeline class and that every component's library is "
        "installed; third-party classes must be listed in the model's source files."
    ),
    "INTEGRATION": (
        "The integration did not apply: check the block adapter (ForwardPattern, block lists) "
        "and the planners; 'not officially supported' means no adapter is registered for this "
        "pipeline, so use the generated standalone module or register one in the checkout."
    ),
    "CACHE_OPTIONS": "Lower Fn (cache-dit's CLI default is 1): it must not exceed any block list.",
    "UAA_UNEVEN_GLOO": (
        "UAA with uneven shards needs an uneven all-gather, which gloo (CPU) lacks; run UAA on "
        "GPUs (NCCL) or choose a size whose sequence splits evenly."
    ),
    "TIMEOUT": "The phase ran past its timeout; raise timeoutS or lower resolution/steps.",
    "WORKER_DIED": (
        "A worker process ended abruptly (signal or crash): see the rank logs in "
        "<outputDir>/logs; SIGKILL often means the host ran out of memory."
    ),
    "CANCELLED": "The run was cancelled; phases finished before that are kept.",
    "BAD_REQUEST": "Fix the request (see the message); `python -m cdit_runtime schema` prints it.",
    "PHASE_FAILED": "See the traceback and the rank logs in <outputDir>/logs.",
}


class RunFailure(Exception):
    """An expected failure that already knows its code and hint."""

    def __init__(self, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.info = ErrorInfo(
            code=code, message=message, hint=HINTS.get(code, "") if hint is None else hint
        )


def error_info(code: str, message: str, hint: str | None = None) -> ErrorInfo:
    return ErrorInfo(code=code, message=message, hint=HINTS.get(code, "") if hint is None else hint)


def _tail(exc: BaseException, lines: int = 25) -> str:
    text = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))
    return "\n".join(text.rstrip().splitlines()[-lines:])


def classify(exc: BaseException, *, phase_kind: str | None = None) -> ErrorInfo:
    """An `ErrorInfo` for an exception raised while loading or running a phase."""
    if isinstance(exc, RunFailure):
        info = exc.info
        info.traceback = info.traceback or _tail(exc, 8)
        return info
    text = f"{type(exc).__name__}: {exc}"
    lowered = text.lower()
    if "outofmemory" in lowered.replace(" ", "") or "out of memory" in lowered:
        code = "OOM"
    elif (
        "current_accelerator" in text
        or "'NoneType' object has no attribute 'type'" in text
        or ("_scaled_dot_product_flash_attention" in text and "'CPU' backend" in text)
    ):
        code = "NEEDS_ACCELERATOR"
    elif "Fn_compute_blocks" in text or "Bn_compute_blocks" in text:
        code = "CACHE_OPTIONS"
    elif phase_kind == "uaa" and (
        "gloo" in lowered or "all_gather" in lowered or "size" in lowered
    ):
        code = "UAA_UNEVEN_GLOO"
    elif any(
        k in lowered for k in ("init_process_group", "processgroupnccl", "nccl error", "gloo")
    ):
        code = "DIST_INIT"
    elif any(
        k in lowered
        for k in ("not officially supported", "planner", "forward_pattern", "blockadapter")
    ):
        code = "INTEGRATION"
    else:
        code = "PHASE_FAILED"
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ErrorInfo(
        code=code,
        message=f"{type(exc).__name__}: {message}"[:500],
        hint=HINTS[code],
        traceback=_tail(exc),
    )
