"""Errors as data: classify an exception into an `ErrorInfo` with a code and a hint."""

from __future__ import annotations

import re
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
        "This step has no CPU implementation: run the phase on GPUs. On CPU the runtime patches "
        "the accelerator-only steps of cache-dit it knows (the Ring attention LSE, the TP, TE-P "
        "and VAE-P device meshes, the GPU guard of the TP RMSNorm; see docs/cpu-parallel.md); "
        "this one is not among them (e.g. a non-native attention backend such as flash or sage, "
        "or a cache-dit version whose internals the patches no longer find: the rank log lists "
        "the patches that were unavailable)."
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
        "Not a plan error: UAA split a sequence whose length does not divide by the CP size into "
        "shards one token apart, and gloo's all_gather (CPU) needs equal sizes. NCCL gathers "
        "uneven shards, so run UAA on GPUs, or on CPU choose a height/width (frames) whose token "
        "count divides by the CP size."
    ),
    "TIMEOUT": "The phase ran past its timeout; raise timeoutS or lower resolution/steps.",
    "RENDEZVOUS": (
        "Multi-node runs: start the same verify command on every node with its own --node-rank "
        '(0..nnodes-1, e.g. "$SLURM_NODEID") within the launch timeout; --rdzv-endpoint must be '
        "node 0's address as the other nodes reach it, its port (and the next one per extra "
        "launch) free on node 0 and open between the nodes. See docs/multi-node.md."
    ),
    "WORKER_DIED": (
        "A worker process ended abruptly (signal or crash): see the rank logs in "
        "<outputDir>/logs; SIGKILL often means the host ran out of memory."
    ),
    "CANCELLED": "The run was cancelled; phases finished before that are kept.",
    "BAD_REQUEST": "Fix the request (see the message); `python -m cdit_runtime schema` prints it.",
    "NOT_GENERATED": (
        "The integration says why it does not provide this part (its NOT_GENERATED); the "
        "analysis gave the same reason before generation. Run the phases it provides."
    ),
    "SOURCE_IMPORT": (
        "A model source file could not be imported. A file copied out of a package keeps its "
        "relative imports (`from ..attention import X`), which only work inside that package: "
        "use the installed module instead (its dotted name, e.g. "
        "diffusers.models.transformers.transformer_x; the gate check offers it) or rewrite the "
        "relative imports as absolute ones. A missing third-party module must be installed in "
        "the interpreter the runs use."
    ),
    "PIPELINE_CALL": (
        "The pipeline rejected its call arguments (its own check, before any denoising): give "
        "the arguments it needs - in the editor the gate check's pipeline call arguments, on "
        "the command line --call-arg NAME=JSON (e.g. use_resolution_binning=false, "
        "num_frames=9) and --height/--width/--frames - or sizes it accepts."
    ),
    "REGISTERED_ADAPTER": (
        "cache-dit applied an adapter registered for another model whose name prefixes this "
        "pipeline's (`cache_dit.enable_cache(pipe)` looks adapters up by class-name prefix, "
        "first registration first), and its factory rejected this transformer. The analysis "
        "reports this as CDIT202 and the plan review as a blocker: use the standalone target "
        "(the generated enable() passes its own BlockAdapter), or extend that adapter's "
        "factory with a branch on the transformer class."
    ),
    "BUDGET": (
        "The tune's time box (tune.budgetS) was spent before this point could start: raise "
        "--tune-budget, or narrow the grid (fewer thresholds, backends, compile off)."
    ),
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


# gloo's all_gather refuses tensors of different shapes across ranks (real text, torch 2.13):
# "ProcessGroupGloo::allgather: invalid tensor size at index 1 (expected (1, 145, 16), got
# (1, 144, 16))". cache-dit's UAA gathers `tensor_split` shards: same rank, one dim, one apart.
_GLOO_GATHER = re.compile(
    r"ProcessGroupGloo::allgather: invalid tensor size at index \d+ "
    r"\(expected \(([\d, ]*)\), got \(([\d, ]*)\)\)"
)
# Shape mismatches as torch, DTensor and cache-dit word them (one sequence or feature length
# where another was expected): a plan that does not fit the model, on any device.
_SHAPE_MISMATCH = (
    re.compile(r"The size of tensor a \(\d+\) must match the size of tensor b \(\d+\)"),
    re.compile(r"mat1 and mat2 shapes cannot be multiplied"),
    re.compile(r"a and b must have same reduction dim"),
    re.compile(r"Sharding propagation failed"),
    re.compile(r"shape '\[[-\d, ]*\]' is invalid for input of size \d+"),
    re.compile(r"Sizes of tensors must match except in dimension"),
    re.compile(r"Tensor size along dimension to be sharded must be divisible by mesh size"),
    re.compile(r"[Ee]xpected [^\n]*\b(shape|size)\b[^\n]* but got"),
)
# cache-dit's GPU-only guard in the DistributedRMSNorm of its Wan/Helios/LTX-Video TP planners.
_CPU_GUARD = 'device.type != "cpu"'
_TP_KINDS = frozenset({"tp", "tp_tep", "vae_p"})
_CP_KINDS = frozenset({"ulysses", "ring", "uaa"})


def _gloo_gather_shapes(text: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    match = _GLOO_GATHER.search(text)
    if match is None:
        return None
    expected, got = (tuple(int(v) for v in g.split(",") if v.strip()) for g in match.groups())
    return expected, got


def _one_token_apart(expected: tuple[int, ...], got: tuple[int, ...]) -> bool:
    """The shapes of two uneven UAA shards: same rank, one dimension differing by one."""
    if len(expected) != len(got):
        return False
    diffs = [abs(a - b) for a, b in zip(expected, got, strict=True) if a != b]
    return diffs == [1]


def _is_shape_mismatch(text: str) -> bool:
    return any(pattern.search(text) for pattern in _SHAPE_MISMATCH)


def _shape_hint(phase_kind: str | None) -> str:
    """Where a shape mismatch points: the phase's plan, not the hardware."""
    same = " The same plan fails on GPUs: this is not a hardware limit."
    if phase_kind in _TP_KINDS:
        return (
            "A tensor shape mismatch under tensor parallelism: the TP plan does not fit the "
            "model. Check that every sharded width divides by the TP size (heads, FFN width, "
            "e.g. an FFN of 37 over 2 ranks cannot be sharded), that each rowwise layer takes "
            "the sharded output of a colwise one (styles not swapped) and that per-rank head "
            "counts are divided (shard_div_attr)." + same
        )
    if phase_kind in _CP_KINDS:
        return (
            "A tensor shape mismatch under context parallelism: the CP plan does not fit the "
            "model. Check the split inputs (the sequence axis, split_dim/expected_dims), tensors "
            "that must be split with the sequence or must not be (RoPE frequencies, masks, "
            "positional ids) and the gather at the output projection; a sequence that does not "
            "divide by the CP size needs UAA or another height/width." + same
        )
    if phase_kind == "hybrid":
        return (
            "A tensor shape mismatch under hybrid CP + TP: run the ulysses and tp phases alone "
            "to see which plan does not fit the model (sequence splits, gathers, sharded "
            "widths, head counts)." + same
        )
    return (
        "A tensor shape mismatch: see the traceback; in an accelerated phase it usually means "
        "the integration (plan, ForwardPattern, PatchFunctor) does not fit the model."
    )


def _ranks_disagree_hint(
    shapes: tuple[tuple[int, ...], tuple[int, ...]], phase_kind: str | None
) -> str:
    expected, got = shapes
    return (
        f"The ranks gathered tensors of different shapes ({expected} vs {got}), which is not "
        "the uneven split of a sequence UAA makes: the ranks disagree about a split or a "
        "gather. " + _shape_hint(phase_kind)
    )


def _frames(exc: BaseException) -> list[tb.FrameSummary]:
    return list(tb.extract_tb(exc.__traceback__)) if exc.__traceback__ else []


def _in_frames(exc: BaseException, fragment: str) -> bool:
    return any(fragment in f.filename.replace("\\", "/") for f in _frames(exc))


def _relative_import(exc: BaseException) -> bool:
    """An import of a copied source that still uses its package's relative imports."""
    text = str(exc)
    return isinstance(exc, ImportError) and (
        "attempted relative import" in text or "no known parent package" in text
    )


def _rejected_call(exc: BaseException) -> bool:
    """A pipeline's own argument check: raised in its ``__call__`` or a ``check_*`` method of a
    pipeline module (before the denoiser runs), or a call with arguments ``__call__`` lacks."""
    frames = _frames(exc)
    if not frames:
        return False
    last = frames[-1]
    in_pipeline = "pipeline" in last.filename.replace("\\", "/").rsplit("/", 1)[-1]
    checking = last.name == "__call__" or last.name.startswith("check_")
    if in_pipeline and checking:
        return True
    text = str(exc)
    return isinstance(exc, TypeError) and "__call__() " in text and "argument" in text


def classify(exc: BaseException, *, phase_kind: str | None = None) -> ErrorInfo:
    """An `ErrorInfo` for an exception raised while loading or running a phase."""
    if isinstance(exc, RunFailure):
        info = exc.info
        info.traceback = info.traceback or _tail(exc, 8)
        return info
    text = f"{type(exc).__name__}: {exc}"
    lowered = text.lower()
    hint = None
    if "outofmemory" in lowered.replace(" ", "") or "out of memory" in lowered:
        code = "OOM"
    elif (
        "current_accelerator" in text
        or "'NoneType' object has no attribute 'type'" in text
        or ("_scaled_dot_product_flash_attention" in text and "'CPU' backend" in text)
        or (isinstance(exc, AssertionError) and _CPU_GUARD in _tail(exc, 4))
    ):
        code = "NEEDS_ACCELERATOR"
    elif "Fn_compute_blocks" in text or "Bn_compute_blocks" in text:
        code = "CACHE_OPTIONS"
    elif (shapes := _gloo_gather_shapes(text)) is not None:
        if phase_kind == "uaa" and _one_token_apart(*shapes):
            code = "UAA_UNEVEN_GLOO"
        else:
            code, hint = "PHASE_FAILED", _ranks_disagree_hint(shapes, phase_kind)
    elif _is_shape_mismatch(text):
        code, hint = "PHASE_FAILED", _shape_hint(phase_kind)
    elif any(
        k in lowered for k in ("init_process_group", "processgroupnccl", "nccl error", "gloo")
    ):
        code = "DIST_INIT"
    elif _relative_import(exc):
        code = "SOURCE_IMPORT"
    elif isinstance(exc, AssertionError) and _in_frames(exc, "cache_dit/caching/block_adapters"):
        code = "REGISTERED_ADAPTER"
    elif isinstance(exc, (ValueError, TypeError)) and _rejected_call(exc):
        code = "PIPELINE_CALL"
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
        hint=HINTS[code] if hint is None else hint,
        traceback=_tail(exc),
    )
