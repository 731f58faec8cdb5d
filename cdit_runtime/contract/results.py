"""The documents a run writes: `VerificationResult` (results.json) and `ProgressEvent` (stdout).

Standard library only (see `contract`).
"""

# `doc_field(...)` returns `dataclasses.field(...)`; ruff cannot see that through the helper.
# ruff: noqa: RUF009
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .common import (
    SCHEMA_VERSION,
    DType,
    EventKind,
    OutputKind,
    PhaseKind,
    PhaseStatus,
    RunStatus,
    Verdict,
    doc_field,
)
from .request import CacheOptions, Thresholds


@dataclass
class ErrorInfo:
    """An error as data: a stable code, what happened and what to do about it."""

    code: str = doc_field(
        "OOM | DIST_INIT | MISSING_GPUS | NEEDS_ACCELERATOR | WORLD_TOO_SMALL | NO_MODEL_INDEX | "
        "MODEL_LOAD | INTEGRATION | UAA_UNEVEN_GLOO | TIMEOUT | WORKER_DIED | CANCELLED | "
        "BAD_REQUEST | PHASE_FAILED | BAD_INPUT | "
        "CACHE_OPTIONS | RENDEZVOUS | NOT_GENERATED | BUDGET | SOURCE_IMPORT | PIPELINE_CALL | "
        "REGISTERED_ADAPTER"
    )
    message: str = doc_field("what happened")
    hint: str = doc_field("what to do", default="")
    traceback: str | None = doc_field("last lines of the traceback", default=None)


@dataclass
class CacheStats:
    """DBCache statistics of one block list (``cache_dit.summary``)."""

    blocks: str = doc_field("block-list name (attribute path in the transformer)")
    cached_steps: list[int] = doc_field("steps served from the cache", default_factory=list)
    residual_diffs: dict[str, float] = doc_field(
        "step -> measured relative residual diff (steps whose diff was not measured are absent)",
        default_factory=dict,
    )
    forced: bool = doc_field(
        "threshold >= 1: every eligible step was cached without measuring its diff",
        default=False,
    )
    shape_changed_steps: list[int] = doc_field(
        "steps whose residual had another shape than the previous step's (a stream that changes "
        "length between steps, such as a prefix served from a KV cache): never cacheable",
        default_factory=list,
        omit_empty=True,
    )


@dataclass
class Calibration:
    """How the residual-diff threshold was chosen from the no-cache control's diffs."""

    target_share: float = doc_field("share of the steps asked to be cached")
    threshold: float | None = doc_field("residual-diff threshold chosen (null: none possible)")
    eligible_steps: list[int] = doc_field(
        "steps past the warmup whose diff was measured", default_factory=list
    )
    probe_diffs: dict[str, float] = doc_field(
        "step -> diff in the control run", default_factory=dict
    )
    reason: str = doc_field("how it was chosen, or why it could not be", default="")
    compute_steps: list[int] = doc_field(
        "steps the cache phase must compute whatever the threshold (cache-dit's "
        "steps_computation_mask): the control's shape-changed steps when the threshold forces "
        "caching, which skips cache-dit's own shape check",
        default_factory=list,
        omit_empty=True,
    )


@dataclass
class ControlResult:
    """The no-cache control of a cache phase: the same integration with caching disabled.

    It must reproduce the baseline (output and final latents) within floating-point tolerance;
    otherwise the integration itself changes the math (a wrong PatchFunctor, pattern or plan),
    and the phase fails whatever its PSNR.
    """

    status: PhaseStatus = doc_field("ok | failed")
    verdict: Literal["pass", "fail"] | None = doc_field("reproduces the baseline?", default=None)
    reason: str = doc_field("why", default="")
    psnr_db: float | Literal["inf"] | None = doc_field("output PSNR vs the baseline", default=None)
    ssim: float | None = doc_field("output SSIM vs the baseline", default=None)
    latent_psnr_db: float | Literal["inf"] | None = doc_field(
        "final-latent PSNR vs the baseline", default=None
    )
    latent_max_abs_diff: float | None = doc_field("largest final-latent difference", default=None)
    cached_steps: int = doc_field("steps served from the cache (must be 0)", default=0)
    latency_s: float | None = doc_field("latency of the control run", default=None)
    error: ErrorInfo | None = doc_field("why it could not run", default=None)


@dataclass
class PhaseResult:
    """Measurements and verdict of one phase (metrics against the baseline)."""

    name: str = doc_field("phase id")
    kind: PhaseKind = doc_field("phase kind")
    status: PhaseStatus = doc_field(
        "pending | running | ok | failed | skipped | timeout | cancelled"
    )
    world_size: int = doc_field("processes", default=1)
    config: dict[str, Any] = doc_field("what was applied (sizes, cache tag)", default_factory=dict)
    latency_s: float | None = doc_field("mean timed latency (slowest rank)", default=None)
    latencies_s: list[float] = doc_field("each timed run", default_factory=list)
    setup_s: float | None = doc_field("copying components + enable_cache", default=None)
    first_call_s: float | None = doc_field(
        "the first (untimed) call, compilation included where the phase compiles", default=None
    )
    compile_s: float | None = doc_field(
        "torch.compile: the first call's time beyond the steady-state latency", default=None
    )
    speedup: float | None = doc_field("baseline latency / latency", default=None)
    peak_memory_gib: list[float] | None = doc_field(
        "peak allocated GiB per device during inference (null on CPU)", default=None
    )
    psnr_db: float | Literal["inf"] | None = doc_field(
        "PSNR on float images ('inf': identical)", default=None
    )
    ssim: float | None = doc_field("SSIM", default=None)
    min_frame_psnr_db: float | Literal["inf"] | None = doc_field("video: worst frame", default=None)
    min_frame_ssim: float | None = doc_field("video: worst frame", default=None)
    output_kind: OutputKind | None = doc_field(
        "what the output was compared as: image | video | audio | latents (the pipeline's output "
        "was not an image, video or audio: the final latents alone)",
        default=None,
    )
    snr_db: float | Literal["inf"] | None = doc_field("audio: signal-to-noise ratio", default=None)
    latent_psnr_db: float | Literal["inf"] | None = doc_field(
        "PSNR of the denoiser's final latents (peak = the baseline latents' range)", default=None
    )
    latent_max_abs_diff: float | None = doc_field("largest final-latent difference", default=None)
    latent_source: str | None = doc_field(
        "where the latents came from: callback (latents after the last step) | transformer "
        "(the last transformer output)",
        default=None,
    )
    cached_steps: int | None = doc_field(
        "cache phases: steps served from the cache by any block list", default=None
    )
    steps: int | None = doc_field("denoising steps of a timed run", default=None)
    rerun_psnr_db: float | Literal["inf"] | None = doc_field(
        "baseline only: its first warmup run (same inputs, same seed) against the timed one: the "
        "pipeline's own reproducibility on this device ('inf': bit-identical); a no-cache "
        "control is judged against it",
        default=None,
    )
    rerun_latent_psnr_db: float | Literal["inf"] | None = doc_field(
        "baseline only: the same for the final latents", default=None
    )
    control: ControlResult | None = doc_field("cache phases: the no-cache control", default=None)
    calibration: Calibration | None = doc_field(
        "cache phases with calibrateShare: how the threshold was chosen", default=None
    )
    verdict: Verdict | None = doc_field(
        "against the thresholds; not_exercised: a cache phase that cached no step, or a "
        "parallel phase that split no token or sharded no weight",
        default=None,
    )
    verdict_reason: str = doc_field("why", default="")
    images: dict[str, str] = doc_field(
        "output / diff PNGs, relative to outputDir", default_factory=dict
    )
    cache_stats: list[CacheStats] | None = doc_field("DBCache statistics", default=None)
    error: ErrorInfo | None = doc_field("why it failed or was skipped", default=None)
    notes: list[str] = doc_field("remarks", default_factory=list)


@dataclass
class LaunchInfo:
    """One process launch: the phases that shared its processes and loaded pipeline."""

    world_size: int = doc_field("processes")
    backend: str = doc_field("gloo | cpu:gloo,cuda:nccl | none")
    phases: list[str] = doc_field("phase ids run in this launch", default_factory=list)
    import_s: float | None = doc_field("process start to imports done (rank 0)", default=None)
    load_s: float | None = doc_field("model build/load (rank 0)", default=None)
    wall_s: float | None = doc_field("launch wall time", default=None)
    exit_codes: list[int | None] = doc_field(
        "per rank (multi-node: node 0's local ranks, each the status of its torchrun agent)",
        default_factory=list,
    )
    nodes: int = doc_field(
        "nodes the launch spanned (> 1: torchrun, one agent per node)", default=1
    )
    rendezvous: str | None = doc_field(
        "multi-node: the c10d rendezvous of the launch, HOST:PORT/ID", default=None
    )


@dataclass
class Environment:
    """Versions and devices the run used."""

    python: str = doc_field("python version", default="")
    torch: str | None = doc_field("torch version", default=None)
    diffusers: str | None = doc_field("diffusers version", default=None)
    transformers: str | None = doc_field("transformers version", default=None)
    cache_dit: str | None = doc_field("cache-dit version", default=None)
    device: str | None = doc_field("cuda | cpu", default=None)
    device_names: list[str] = doc_field("visible devices", default_factory=list)


@dataclass
class IntegrationInfo:
    """What was verified and at which revision."""

    kind: str = doc_field("standalone | cache-dit-checkout")
    path: str | None = doc_field("module or checkout", default=None)
    git_sha: str | None = doc_field("HEAD of the repository holding it", default=None)
    git_dirty: bool | None = doc_field("uncommitted changes in it", default=None)
    transformer_class: str | None = doc_field("TRANSFORMER_CLASS or the pipeline's", default=None)


@dataclass
class TunePoint:
    """One configuration the tune measured."""

    phase: str = doc_field("its phase id (the phase in phases holds every measurement)")
    stage: int = doc_field("1: kernels and cache settings apart; 2: combined", default=1)
    attention_backend: str | None = doc_field("attention backend (null: the default)", default=None)
    compile: bool = doc_field("torch.compile", default=False)
    cache: CacheOptions | None = doc_field("DBCache settings (null: no cache)", default=None)
    parallel: str | None = doc_field(
        "parallel choice (ulysses-2, tp-2 ...; null: one device)", default=None
    )
    status: PhaseStatus = doc_field("the phase's status", default="pending")
    verdict: Verdict | None = doc_field("the phase's verdict", default=None)
    latency_s: float | None = doc_field("steady-state latency", default=None)
    compile_s: float | None = doc_field("one-off compilation time", default=None)
    speedup: float | None = doc_field(
        "the faster of the baseline's two timings (baseline, kernels-native) / latency",
        default=None,
    )
    psnr_db: float | Literal["inf"] | None = doc_field("PSNR vs the baseline", default=None)
    ssim: float | None = doc_field("SSIM vs the baseline", default=None)
    cached_steps: int | None = doc_field("steps served from the cache", default=None)
    on_front: bool = doc_field(
        "on the Pareto front (latency vs PSNR) of the passing points", default=False
    )


@dataclass
class TuneReport:
    """What ``verify --tune`` found: the points, their Pareto front and a recommendation."""

    points: list[TunePoint] = doc_field(
        "every configuration, in the order measured", default_factory=list
    )
    front: list[str] = doc_field(
        "phase ids of the Pareto front of the passing points (latency vs PSNR), fastest first",
        default_factory=list,
    )
    recommended: str | None = doc_field(
        "the fastest passing point faster than the baseline and its timing control "
        "(kernels-native: the baseline's settings measured again as a grid point); null: none",
        default=None,
    )
    python: str = doc_field("the recommendation as ready-to-paste Python", default="")
    cli: str = doc_field("a command line that verifies the recommendation on its own", default="")
    skipped: list[str] = doc_field("points not run (time box)", default_factory=list)
    notes: list[str] = doc_field("remarks", default_factory=list)


@dataclass
class VerificationResult:
    """The whole run; rewritten atomically after every phase."""

    status: RunStatus = doc_field("running | completed | failed | cancelled")
    output_dir: str = doc_field("where everything is")
    phases: list[PhaseResult] = doc_field("in request order", default_factory=list)
    launches: list[LaunchInfo] = doc_field("process launches", default_factory=list)
    environment: Environment = doc_field("versions", default_factory=Environment)
    integration: IntegrationInfo | None = doc_field("what was verified", default=None)
    model: dict[str, Any] = doc_field("path, pipeline and transformer class", default_factory=dict)
    thresholds: Thresholds = doc_field("used for the verdicts", default_factory=Thresholds)
    dtype: DType | None = doc_field("the dtype the run used (resolved)", default=None)
    started_at: float | None = doc_field("unix time", default=None)
    finished_at: float | None = doc_field("unix time", default=None)
    wall_s: float | None = doc_field("total wall time", default=None)
    error: ErrorInfo | None = doc_field("why the run could not run", default=None)
    tune: TuneReport | None = doc_field(
        "verify --tune: the grid's points and recommendation", default=None
    )
    schema_version: int = doc_field("contract version", default=SCHEMA_VERSION)


@dataclass
class ProgressEvent:
    """One JSON line on stdout."""

    event: EventKind = doc_field("what happened")
    time: float = doc_field("unix time")
    phase: str | None = doc_field("phase id", default=None)
    step: int | None = doc_field("step: 1-based", default=None)
    total: int | None = doc_field("step: steps of this run", default=None)
    status: str | None = doc_field("phase or run status", default=None)
    verdict: str | None = doc_field("phase_finished: verdict", default=None)
    message: str | None = doc_field("human-readable", default=None)
    error: ErrorInfo | None = doc_field("error events", default=None)
    result_path: str | None = doc_field("results.json", default=None)
    schema_version: int = doc_field("contract version", default=SCHEMA_VERSION)
