"""The runtime's JSON contract: `VerificationRequest`, `ProgressEvent`, `VerificationResult`.

Standard library only: the language server and the extension read these documents without torch.
Every document carries ``schemaVersion``. JSON keys are the camelCase form of the field names.
The JSON schema (``cdit_runtime/verification.schema.json``) is generated from these dataclasses by
`json_schema()`, so defaults — the acceptance thresholds above all — are defined once, here.

Acceptance thresholds (`Thresholds`, the one place they are defined): cache PSNR > 30 dB passes,
25-30 dB warns; CP/TP/TE-P/VAE-P/hybrid PSNR > 35 dB in bfloat16/float16 and a near-exact
threshold in float32 (calibrated: ``docs/verification-thresholds.md``); SSIM > 0.90 always; a
plausible PSNR (>= 20 dB) with SSIM < 0.5 is "garbled". For video the verdict uses the minimum over
frames, not the average. Every verdict also needs the denoiser's final latents to clear the same
threshold, and a cache phase needs its no-cache control (the integration with caching disabled) to
reproduce the baseline; a cache phase that cached no step is ``not_exercised``, never ``pass``.
"""

# `_doc(...)` returns `dataclasses.field(...)`; ruff cannot see that through the helper.
# ruff: noqa: RUF009
from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).with_name("verification.schema.json")

PhaseKind = Literal[
    "baseline", "kernels", "cache", "ulysses", "ring", "uaa", "tp", "tp_tep", "vae_p", "hybrid"
]
PHASE_KINDS: tuple[str, ...] = typing.get_args(PhaseKind)
PARALLEL_KINDS = frozenset({"ulysses", "ring", "uaa", "tp", "tp_tep", "vae_p", "hybrid"})

PhaseStatus = Literal["pending", "running", "ok", "failed", "skipped", "timeout", "cancelled"]
Verdict = Literal["reference", "pass", "warn", "fail", "garbled", "not_exercised"]
# Phases that run the pipeline on one process (the baseline's launch carries them).
SINGLE_KINDS = frozenset({"baseline", "kernels", "cache"})
OutputKind = Literal["image", "video", "audio", "latents"]
RunStatus = Literal["running", "completed", "failed", "cancelled"]
EventKind = Literal[
    "run_started",
    "launch_started",
    "phase_started",
    "step",
    "phase_finished",
    "error",
    "run_finished",
]
DType = Literal["float32", "bfloat16", "float16"]
DeviceKind = Literal["auto", "cuda", "cpu"]


def _doc(text: str, **kwargs: Any) -> Any:
    """A dataclass field with a description that ends up in the JSON schema."""
    return field(metadata={"doc": text}, **kwargs)


# ------------------------------------------------------------------------------------ thresholds


@dataclass(frozen=True)
class Thresholds:
    """Acceptance thresholds against the baseline (PSNR on float outputs and on the final latents).

    CP/TP/TE-P/VAE-P/hybrid and the no-cache control compute the same math as the baseline, so
    in float32 they must be near-exact; in bfloat16/float16 kernels may tile differently. The
    float32 values are calibrated on correct plans against deliberately wrong ones
    (``docs/verification-thresholds.md``).
    """

    cache_psnr_db: float = _doc("cache phases pass above this PSNR", default=30.0)
    cache_warn_psnr_db: float = _doc("cache phases warn between this and cachePsnrDb", default=25.0)
    parallel_psnr_db: float = _doc(
        "CP, TP, TE-P, VAE-P and hybrid pass above this (bfloat16/float16)", default=35.0
    )
    parallel_psnr_db_float32: float = _doc(
        "CP, TP, TE-P, VAE-P and hybrid pass above this in float32", default=80.0
    )
    control_psnr_db: float = _doc(
        "a no-cache control reproduces the baseline above this (bfloat16/float16)", default=45.0
    )
    control_psnr_db_float32: float = _doc(
        "a no-cache control reproduces the baseline above this in float32", default=80.0
    )
    ssim_min: float = _doc("every phase needs SSIM above this", default=0.90)
    garbled_ssim_below: float = _doc("SSIM below this with a plausible PSNR: garbled", default=0.5)
    garbled_min_psnr_db: float = _doc("a PSNR at or above this is 'plausible'", default=20.0)

    def parallel_for(self, dtype: str) -> float:
        """The PSNR a parallel phase needs at ``dtype``."""
        return self.parallel_psnr_db_float32 if dtype == "float32" else self.parallel_psnr_db

    def control_for(self, dtype: str) -> float:
        """The PSNR a no-cache control needs at ``dtype``."""
        return self.control_psnr_db_float32 if dtype == "float32" else self.control_psnr_db


# --------------------------------------------------------------------------------------- request


@dataclass(frozen=True)
class ModelSource:
    """Where the pipeline comes from.

    ``local``: ``from_pretrained(path)`` (no network; ``model_index.json`` required).
    ``tiny``: an embedded tiny random-weight pipeline of real diffusers classes (``family``),
    saved with ``save_pretrained`` into ``path`` (default ``<outputDir>/model-<family>``) and
    loaded back through the ``local`` code. ``shrink``: the pipeline at ``path`` with its
    transformer rebuilt from a shrunk config (fewer layers and heads) and random weights.
    """

    source: Literal["local", "tiny", "shrink"] = _doc("local | tiny | shrink")
    path: str | None = _doc("model directory (holds model_index.json)", default=None)
    family: Literal["flux", "wan", "qwenimage", "flux1-dev", "skimage-dit"] | None = _doc(
        "tiny family (flux1-dev: full-size FLUX.1-dev configs, random weights, for GPUs; "
        "skimage-dit: the bundled trained model, where cache quality means something)",
        default=None,
    )
    pipeline_class: str | None = _doc("pipeline class; default: model_index.json", default=None)
    source_files: list[str] = _doc(
        "user source files defining third-party classes (imported: trusted workspace only)",
        default_factory=list,
    )
    shrink_layers: int = _doc("shrink: layers kept per block list", default=2)
    shrink_heads: int = _doc("shrink: attention heads kept", default=4)


@dataclass(frozen=True)
class Integration:
    """The integration to verify.

    ``standalone``: a generated module (``path``) exposing ``TRANSFORMER_CLASS``,
    ``block_adapter(pipe, **kw)``, ``cp_plan(transformer)`` and ``enable(pipe, *, cache_config,
    parallelism_config, transformer)``. ``checkout``: cache-dit's own registries
    (``cache_dit.enable_cache(pipe, ...)``); ``path`` is an optional cache-dit checkout whose
    ``src`` is imported instead of the installed package.
    """

    kind: Literal["standalone", "checkout"] = _doc("standalone | checkout", default="checkout")
    path: str | None = _doc("module file (standalone) or cache-dit checkout", default=None)


@dataclass(frozen=True)
class CacheOptions:
    """DBCache settings. Defaults are cache-dit's CLI defaults (not its library defaults)."""

    fn: int = _doc("Fn_compute_blocks (must not exceed the blocks of a list)", default=1)
    bn: int = _doc("Bn_compute_blocks", default=0)
    residual_diff_threshold: float = _doc("rdt", default=0.12)
    max_warmup_steps: int = _doc("no caching while step <= this", default=8)
    warmup_interval: int = _doc("compute every k-th warmup step", default=1)
    max_cached_steps: int = _doc("-1: unlimited", default=-1)
    max_continuous_cached_steps: int = _doc("-1: unlimited", default=3)
    calibrate_share: float | None = _doc(
        "choose the residual-diff threshold from the no-cache control's per-step diffs so that "
        "about this share of the steps is cached (a plumbing check on random weights); null: "
        "use residualDiffThreshold",
        default=None,
    )
    control: bool = _doc(
        "pair every cache phase with a no-cache control (the integration with caching "
        "disabled must reproduce the baseline)",
        default=True,
    )


@dataclass(frozen=True)
class TuneOptions:
    """``verify --tune``: the grid one request measures, and its time box.

    Stage 1 measures every attention backend (eager, no cache) and every DBCache setting on the
    default kernels; stage 2 compiles the fastest passing backend, alone and with the best
    passing cache settings (and, on more than one GPU, runs the fastest passing parallel phase
    with them). Every point gets the normal verdict against the baseline.
    """

    attention_backends: list[str] | None = _doc(
        "diffusers attention backends to try (null: those this machine has)", default=None
    )
    compile: list[bool] | None = _doc(
        "torch.compile off/on, tried on the fastest passing backend (null: both on GPUs, off "
        "on CPU)",
        default=None,
    )
    fn: list[int] = _doc("Fn_compute_blocks values", default_factory=lambda: [1])
    bn: list[int] = _doc("Bn_compute_blocks values", default_factory=lambda: [0])
    residual_diff_thresholds: list[float] = _doc(
        "residual-diff thresholds", default_factory=lambda: [0.08, 0.12, 0.2, 0.3]
    )
    max_warmup_steps: list[int] | None = _doc(
        "warmup steps (null: the request's cache.maxWarmupSteps)", default=None
    )
    combine: int = _doc(
        "stage 2: how many of the best passing cache settings are combined with the fastest "
        "passing kernel choice (0: no stage 2)",
        default=2,
    )
    parallel: bool = _doc(
        "on more than one GPU, also the parallel phases (Ulysses, Ring, TP over every GPU)",
        default=True,
    )
    budget_s: float = _doc(
        "time box from the run's start: points that would start later are skipped with a note",
        default=900.0,
    )


@dataclass(frozen=True)
class PhaseSpec:
    """One phase of the matrix. ``size``: the parallel degree (CP/TP/TE-P/VAE-P).

    ``kernels``: the plain pipeline (no integration) with another attention backend and/or
    ``torch.compile``: the same math on other kernels, judged like a parallel phase.
    """

    kind: PhaseKind = _doc(
        "baseline | kernels | cache | ulysses | ring | uaa | tp | tp_tep | vae_p | hybrid"
    )
    name: str | None = _doc("unique id; default derived from kind and size", default=None)
    size: int = _doc("parallel degree", default=2)
    cache: bool = _doc("also enable DBCache in a parallel phase", default=False)
    vae_base: Literal["tp", "ulysses", "ring"] = _doc(
        "vae_p: parallelism of the rest", default="tp"
    )
    cp_size: int = _doc("hybrid: Ulysses degree", default=2)
    tp_size: int = _doc("hybrid: TP degree", default=2)
    timeout_s: float | None = _doc("phase timeout; default: request timeoutS", default=None)
    integration: str | None = _doc(
        "a standalone module verified in this phase instead of the request's integration "
        "(compare integrations in one launch: generated vs edited, or deliberate faults)",
        default=None,
    )
    attention_backend: str | None = _doc(
        "this phase's attention backend (null: the request's attentionBackend)", default=None
    )
    compile: bool | None = _doc(
        "torch.compile the transformer(s) after the integration is enabled (null: the "
        "request's compile)",
        default=None,
    )
    cache_options: CacheOptions | None = _doc(
        "this phase's DBCache settings (null: the request's cache)", default=None
    )

    @property
    def id(self) -> str:
        if self.name:
            return self.name
        if self.kind in SINGLE_KINDS:
            return self.kind
        if self.kind == "hybrid":
            return f"hybrid-u{self.cp_size}-tp{self.tp_size}"
        if self.kind == "vae_p":
            return f"vae_p-{self.vae_base}{self.size}"
        return f"{self.kind}-{self.size}" + ("-cache" if self.cache else "")

    @property
    def world_size(self) -> int:
        if self.kind in SINGLE_KINDS:
            return 1
        if self.kind == "hybrid":
            return self.cp_size * self.tp_size
        return self.size


@dataclass(frozen=True)
class NodeSpec:
    """Multi-node runs through torchrun's rendezvous (one ``verify`` per node, same request).

    Rank 0 (on node 0) gathers every rank's records and writes the results, as on one node.
    """

    nnodes: int = _doc("nodes taking part", default=1)
    node_rank: int = _doc("this node's rank (0: the node that writes the results)", default=0)
    rdzv_endpoint: str | None = _doc(
        "HOST:PORT of the rendezvous: node 0's address as the other nodes reach it; node 0 hosts "
        "the store (launch i of the run uses PORT + i - 1)",
        default=None,
    )
    rdzv_id: str = _doc("rendezvous id shared by all nodes of one run", default="cdit-verify")
    nproc_per_node: int | None = _doc(
        "processes per node (null: the phase's world size / nnodes)", default=None
    )


@dataclass(frozen=True)
class VerificationRequest:
    """One verification run: a model, an integration, phases and the generation settings."""

    model: ModelSource = _doc("the pipeline")
    output_dir: str = _doc("results.json, images, arrays and logs go here")
    integration: Integration = _doc("what is verified", default_factory=Integration)
    phases: list[PhaseSpec] = _doc(
        "in order; baseline first",
        default_factory=lambda: [PhaseSpec("baseline"), PhaseSpec("cache"), PhaseSpec("ulysses")],
    )
    cache: CacheOptions = _doc("DBCache settings", default_factory=CacheOptions)
    prompt: str = _doc("prompt", default="a photo of a cat sitting on a red sofa, studio light")
    negative_prompt: str | None = _doc("negative prompt", default=None)
    height: int | None = _doc("image height (null: pipeline or tiny-family default)", default=None)
    width: int | None = _doc("image width (null: pipeline or tiny-family default)", default=None)
    num_frames: int | None = _doc("video pipelines: frames", default=None)
    steps: int | None = _doc("num_inference_steps (null: 28, tiny families fewer)", default=None)
    guidance_scale: float | None = _doc("pipeline default when null", default=None)
    seed: int = _doc("CPU generator seed (the same latents on every rank)", default=0)
    dtype: DType | None = _doc(
        "weights and activations (null: float32 on CPU, bfloat16 on GPUs)", default=None
    )
    device: DeviceKind = _doc("auto: CUDA when GPUs are visible", default="auto")
    attention_backend: str | None = _doc(
        "attention backend of every phase but the baseline (diffusers' set_attention_backend "
        "on one process, cache-dit's ParallelismConfig under CP/TP; null: the model's default)",
        default=None,
    )
    compile: bool = _doc(
        "torch.compile the transformer(s) in every phase but the baseline (after the "
        "integration; the first call's extra time is reported as compileS)",
        default=False,
    )
    warmup: int = _doc("untimed runs before timing", default=1)
    warmup_steps: int | None = _doc("steps of warmup runs (null: steps)", default=None)
    repeat: int = _doc("timed runs (latency = mean)", default=1)
    timeout_s: float = _doc("default per-phase timeout", default=900.0)
    launch_timeout_s: float = _doc("import + model load limit per launch", default=900.0)
    reference: str | None = _doc("output dir of a run whose baseline is reused", default=None)
    extra_call_kwargs: dict[str, Any] = _doc(
        "passed to the pipeline call (pipeline-specific arguments: num_frames, audio_duration ...)",
        default_factory=dict,
    )
    inputs: dict[str, str] = _doc(
        "pipeline call arguments loaded from files (image, video, audio): name -> path",
        default_factory=dict,
    )
    tune: TuneOptions | None = _doc(
        "measure a grid of kernels and cache settings and recommend the fastest that passes "
        "(``verify --tune``); null: run the phases as given",
        default=None,
    )
    nodes: NodeSpec = _doc("multi-node runs (torchrun rendezvous)", default_factory=NodeSpec)
    thresholds: Thresholds = _doc("acceptance thresholds", default_factory=Thresholds)
    schema_version: int = _doc("contract version", default=SCHEMA_VERSION)


# --------------------------------------------------------------------------------------- results


@dataclass
class ErrorInfo:
    """An error as data: a stable code, what happened and what to do about it."""

    code: str = _doc(
        "OOM | DIST_INIT | MISSING_GPUS | NEEDS_ACCELERATOR | WORLD_TOO_SMALL | NO_MODEL_INDEX | "
        "MODEL_LOAD | INTEGRATION | UAA_UNEVEN_GLOO | TIMEOUT | WORKER_DIED | CANCELLED | "
        "BAD_REQUEST | PHASE_FAILED | BAD_INPUT | "
        "CACHE_OPTIONS | RENDEZVOUS | NOT_GENERATED | BUDGET | SOURCE_IMPORT | PIPELINE_CALL | "
        "REGISTERED_ADAPTER"
    )
    message: str = _doc("what happened")
    hint: str = _doc("what to do", default="")
    traceback: str | None = _doc("last lines of the traceback", default=None)


@dataclass
class CacheStats:
    """DBCache statistics of one block list (``cache_dit.summary``)."""

    blocks: str = _doc("block-list name (attribute path in the transformer)")
    cached_steps: list[int] = _doc("steps served from the cache", default_factory=list)
    residual_diffs: dict[str, float] = _doc(
        "step -> measured relative residual diff (steps whose diff was not measured are absent)",
        default_factory=dict,
    )
    forced: bool = _doc(
        "threshold >= 1: every eligible step was cached without measuring its diff",
        default=False,
    )


@dataclass
class Calibration:
    """How the residual-diff threshold was chosen from the no-cache control's diffs."""

    target_share: float = _doc("share of the steps asked to be cached")
    threshold: float | None = _doc("residual-diff threshold chosen (null: none possible)")
    eligible_steps: list[int] = _doc(
        "steps past the warmup whose diff was measured", default_factory=list
    )
    probe_diffs: dict[str, float] = _doc("step -> diff in the control run", default_factory=dict)
    reason: str = _doc("how it was chosen, or why it could not be", default="")


@dataclass
class ControlResult:
    """The no-cache control of a cache phase: the same integration with caching disabled.

    It must reproduce the baseline (output and final latents) within floating-point tolerance;
    otherwise the integration itself changes the math (a wrong PatchFunctor, pattern or plan),
    and the phase fails whatever its PSNR.
    """

    status: PhaseStatus = _doc("ok | failed")
    verdict: Literal["pass", "fail"] | None = _doc("reproduces the baseline?", default=None)
    reason: str = _doc("why", default="")
    psnr_db: float | Literal["inf"] | None = _doc("output PSNR vs the baseline", default=None)
    ssim: float | None = _doc("output SSIM vs the baseline", default=None)
    latent_psnr_db: float | Literal["inf"] | None = _doc(
        "final-latent PSNR vs the baseline", default=None
    )
    latent_max_abs_diff: float | None = _doc("largest final-latent difference", default=None)
    cached_steps: int = _doc("steps served from the cache (must be 0)", default=0)
    latency_s: float | None = _doc("latency of the control run", default=None)
    error: ErrorInfo | None = _doc("why it could not run", default=None)


@dataclass
class PhaseResult:
    """Measurements and verdict of one phase (metrics against the baseline)."""

    name: str = _doc("phase id")
    kind: PhaseKind = _doc("phase kind")
    status: PhaseStatus = _doc("pending | running | ok | failed | skipped | timeout | cancelled")
    world_size: int = _doc("processes", default=1)
    config: dict[str, Any] = _doc("what was applied (sizes, cache tag)", default_factory=dict)
    latency_s: float | None = _doc("mean timed latency (slowest rank)", default=None)
    latencies_s: list[float] = _doc("each timed run", default_factory=list)
    setup_s: float | None = _doc("copying components + enable_cache", default=None)
    first_call_s: float | None = _doc(
        "the first (untimed) call, compilation included where the phase compiles", default=None
    )
    compile_s: float | None = _doc(
        "torch.compile: the first call's time beyond the steady-state latency", default=None
    )
    speedup: float | None = _doc("baseline latency / latency", default=None)
    peak_memory_gib: list[float] | None = _doc(
        "peak allocated GiB per device during inference (null on CPU)", default=None
    )
    psnr_db: float | Literal["inf"] | None = _doc(
        "PSNR on float images ('inf': identical)", default=None
    )
    ssim: float | None = _doc("SSIM", default=None)
    min_frame_psnr_db: float | Literal["inf"] | None = _doc("video: worst frame", default=None)
    min_frame_ssim: float | None = _doc("video: worst frame", default=None)
    output_kind: OutputKind | None = _doc(
        "what the output was compared as: image | video | audio | latents (the pipeline's output "
        "was not an image, video or audio: the final latents alone)",
        default=None,
    )
    snr_db: float | Literal["inf"] | None = _doc("audio: signal-to-noise ratio", default=None)
    latent_psnr_db: float | Literal["inf"] | None = _doc(
        "PSNR of the denoiser's final latents (peak = the baseline latents' range)", default=None
    )
    latent_max_abs_diff: float | None = _doc("largest final-latent difference", default=None)
    latent_source: str | None = _doc(
        "where the latents came from: callback (latents after the last step) | transformer "
        "(the last transformer output)",
        default=None,
    )
    cached_steps: int | None = _doc(
        "cache phases: steps served from the cache by any block list", default=None
    )
    steps: int | None = _doc("denoising steps of a timed run", default=None)
    control: ControlResult | None = _doc("cache phases: the no-cache control", default=None)
    calibration: Calibration | None = _doc(
        "cache phases with calibrateShare: how the threshold was chosen", default=None
    )
    verdict: Verdict | None = _doc(
        "against the thresholds; not_exercised: a cache phase that cached no step",
        default=None,
    )
    verdict_reason: str = _doc("why", default="")
    images: dict[str, str] = _doc("output / diff PNGs, relative to outputDir", default_factory=dict)
    cache_stats: list[CacheStats] | None = _doc("DBCache statistics", default=None)
    error: ErrorInfo | None = _doc("why it failed or was skipped", default=None)
    notes: list[str] = _doc("remarks", default_factory=list)


@dataclass
class LaunchInfo:
    """One process launch: the phases that shared its processes and loaded pipeline."""

    world_size: int = _doc("processes")
    backend: str = _doc("gloo | cpu:gloo,cuda:nccl | none")
    phases: list[str] = _doc("phase ids run in this launch", default_factory=list)
    import_s: float | None = _doc("process start to imports done (rank 0)", default=None)
    load_s: float | None = _doc("model build/load (rank 0)", default=None)
    wall_s: float | None = _doc("launch wall time", default=None)
    exit_codes: list[int | None] = _doc(
        "per rank (multi-node: node 0's local ranks, each the status of its torchrun agent)",
        default_factory=list,
    )
    nodes: int = _doc("nodes the launch spanned (> 1: torchrun, one agent per node)", default=1)
    rendezvous: str | None = _doc(
        "multi-node: the c10d rendezvous of the launch, HOST:PORT/ID", default=None
    )


@dataclass
class Environment:
    """Versions and devices the run used."""

    python: str = _doc("python version", default="")
    torch: str | None = _doc("torch version", default=None)
    diffusers: str | None = _doc("diffusers version", default=None)
    transformers: str | None = _doc("transformers version", default=None)
    cache_dit: str | None = _doc("cache-dit version", default=None)
    device: str | None = _doc("cuda | cpu", default=None)
    device_names: list[str] = _doc("visible devices", default_factory=list)


@dataclass
class IntegrationInfo:
    """What was verified and at which revision."""

    kind: str = _doc("standalone | checkout")
    path: str | None = _doc("module or checkout", default=None)
    git_sha: str | None = _doc("HEAD of the repository holding it", default=None)
    git_dirty: bool | None = _doc("uncommitted changes in it", default=None)
    transformer_class: str | None = _doc("TRANSFORMER_CLASS or the pipeline's", default=None)


@dataclass
class TunePoint:
    """One configuration the tune measured."""

    phase: str = _doc("its phase id (the phase in phases holds every measurement)")
    stage: int = _doc("1: kernels and cache settings apart; 2: combined", default=1)
    attention_backend: str | None = _doc("attention backend (null: the default)", default=None)
    compile: bool = _doc("torch.compile", default=False)
    cache: CacheOptions | None = _doc("DBCache settings (null: no cache)", default=None)
    parallel: str | None = _doc(
        "parallel choice (ulysses-2, tp-2 ...; null: one device)", default=None
    )
    status: PhaseStatus = _doc("the phase's status", default="pending")
    verdict: Verdict | None = _doc("the phase's verdict", default=None)
    latency_s: float | None = _doc("steady-state latency", default=None)
    compile_s: float | None = _doc("one-off compilation time", default=None)
    speedup: float | None = _doc(
        "the faster of the baseline's two timings (baseline, kernels-native) / latency",
        default=None,
    )
    psnr_db: float | Literal["inf"] | None = _doc("PSNR vs the baseline", default=None)
    ssim: float | None = _doc("SSIM vs the baseline", default=None)
    cached_steps: int | None = _doc("steps served from the cache", default=None)
    on_front: bool = _doc(
        "on the Pareto front (latency vs PSNR) of the passing points", default=False
    )


@dataclass
class TuneReport:
    """What ``verify --tune`` found: the points, their Pareto front and a recommendation."""

    points: list[TunePoint] = _doc(
        "every configuration, in the order measured", default_factory=list
    )
    front: list[str] = _doc(
        "phase ids of the Pareto front of the passing points (latency vs PSNR), fastest first",
        default_factory=list,
    )
    recommended: str | None = _doc(
        "the fastest passing point faster than the baseline and its timing control "
        "(kernels-native: the baseline's settings measured again as a grid point); null: none",
        default=None,
    )
    python: str = _doc("the recommendation as ready-to-paste Python", default="")
    cli: str = _doc("a command line that verifies the recommendation on its own", default="")
    skipped: list[str] = _doc("points not run (time box)", default_factory=list)
    notes: list[str] = _doc("remarks", default_factory=list)


@dataclass
class VerificationResult:
    """The whole run; rewritten atomically after every phase."""

    status: RunStatus = _doc("running | completed | failed | cancelled")
    output_dir: str = _doc("where everything is")
    phases: list[PhaseResult] = _doc("in request order", default_factory=list)
    launches: list[LaunchInfo] = _doc("process launches", default_factory=list)
    environment: Environment = _doc("versions", default_factory=Environment)
    integration: IntegrationInfo | None = _doc("what was verified", default=None)
    model: dict[str, Any] = _doc("path, pipeline and transformer class", default_factory=dict)
    thresholds: Thresholds = _doc("used for the verdicts", default_factory=Thresholds)
    dtype: DType | None = _doc("the dtype the run used (resolved)", default=None)
    started_at: float | None = _doc("unix time", default=None)
    finished_at: float | None = _doc("unix time", default=None)
    wall_s: float | None = _doc("total wall time", default=None)
    error: ErrorInfo | None = _doc("why the run could not run", default=None)
    tune: TuneReport | None = _doc(
        "verify --tune: the grid's points and recommendation", default=None
    )
    schema_version: int = _doc("contract version", default=SCHEMA_VERSION)


@dataclass
class ProgressEvent:
    """One JSON line on stdout."""

    event: EventKind = _doc("what happened")
    time: float = _doc("unix time")
    phase: str | None = _doc("phase id", default=None)
    step: int | None = _doc("step: 1-based", default=None)
    total: int | None = _doc("step: steps of this run", default=None)
    status: str | None = _doc("phase or run status", default=None)
    verdict: str | None = _doc("phase_finished: verdict", default=None)
    message: str | None = _doc("human-readable", default=None)
    error: ErrorInfo | None = _doc("error events", default=None)
    result_path: str | None = _doc("results.json", default=None)
    schema_version: int = _doc("contract version", default=SCHEMA_VERSION)


# ---------------------------------------------------------------------------- JSON (de)serializer


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def to_json(obj: Any) -> Any:
    """A dataclass tree as JSON-ready data: camelCase keys, infinite floats as ``"inf"``."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {camel(f.name): to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, float) and math.isinf(obj):
        return "inf" if obj > 0 else "-inf"
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return obj


class ContractError(ValueError):
    """A document does not match the contract (schema violation or bad value)."""


def from_json(cls: type, data: Any) -> Any:
    """Build a contract dataclass from JSON data (keys camelCase). Raises `ContractError`."""
    return _convert(cls, data, cls.__name__)


def _convert(tp: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return data
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, Mapping):
            raise ContractError(f"{where}: expected an object, got {type(data).__name__}")
        hints = typing.get_type_hints(tp)
        known = {camel(f.name): f for f in dataclasses.fields(tp)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ContractError(f"{where}: unknown keys {unknown}")
        kwargs = {
            f.name: _convert(hints[f.name], data[key], f"{where}.{key}")
            for key, f in known.items()
            if key in data
        }
        try:
            return tp(**kwargs)
        except TypeError as exc:
            raise ContractError(f"{where}: {exc}") from None
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if data is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, data, where)
            except ContractError as exc:
                errors.append(str(exc))
        raise ContractError(errors[0] if len(errors) == 1 else f"{where}: no match ({errors})")
    if origin is Literal:
        if data not in typing.get_args(tp):
            raise ContractError(f"{where}: {data!r} is not one of {list(typing.get_args(tp))}")
        return data
    if origin is list:
        if not isinstance(data, list):
            raise ContractError(f"{where}: expected a list")
        (item,) = typing.get_args(tp)
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(data)]
    if origin is dict:
        if not isinstance(data, Mapping):
            raise ContractError(f"{where}: expected an object")
        _, value = typing.get_args(tp)
        return {str(k): _convert(value, v, f"{where}.{k}") for k, v in data.items()}
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise ContractError(f"{where}: expected a number, got {data!r}")
        return float(data)
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise ContractError(f"{where}: expected an integer, got {data!r}")
        return data
    if tp in (str, bool):
        if not isinstance(data, tp):
            raise ContractError(f"{where}: expected {tp.__name__}, got {data!r}")
        return data
    raise ContractError(f"{where}: unsupported type {tp!r}")


def load_request(data: Mapping[str, Any]) -> VerificationRequest:
    """Validate and build a request; raises `ContractError` with a readable message."""
    from .schema_check import validate

    problems = validate(data, json_schema(), "VerificationRequest")
    if problems:
        raise ContractError("; ".join(problems[:5]))
    request: VerificationRequest = from_json(VerificationRequest, data)
    ids = [p.id for p in request.phases]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ContractError(f"phases: duplicate phase ids {duplicates}; give them names")
    if request.model.source in ("local", "shrink") and not request.model.path:
        raise ContractError(f"model: source {request.model.source!r} needs a path")
    if request.model.source == "tiny" and not request.model.family:
        raise ContractError(
            "model: source 'tiny' needs a family (flux | wan | qwenimage | flux1-dev | skimage-dit)"
        )
    if request.integration.kind == "standalone" and not request.integration.path:
        raise ContractError("integration: 'standalone' needs the module path")
    problems = _bad_values(request)
    if problems:
        raise ContractError("; ".join(problems[:3]))
    return request


def _bad_values(request: VerificationRequest) -> list[str]:
    """Values the schema's types allow but no run can use (checked before anything launches)."""
    problems: list[str] = []

    def at_least(where: str, value: float | None, low: float) -> None:
        if value is not None and not value >= low:
            problems.append(f"{where} must be >= {low:g} (got {value!r})")

    def seconds(where: str, value: float | None) -> None:
        if value is not None and not (math.isfinite(value) and value > 0):
            problems.append(f"{where} must be a finite number of seconds > 0 (got {value!r})")

    def finite(where: str, value: float | None) -> None:
        if value is not None and not math.isfinite(value):
            problems.append(f"{where} must be a finite number (got {value!r})")

    if not request.output_dir.strip():
        problems.append("outputDir is empty")
    for i, phase in enumerate(request.phases):
        at_least(f"phases[{i}].size", phase.size, 1)
        at_least(f"phases[{i}].cpSize", phase.cp_size, 1)
        at_least(f"phases[{i}].tpSize", phase.tp_size, 1)
        seconds(f"phases[{i}].timeoutS", phase.timeout_s)
    for key in ("height", "width", "num_frames", "steps", "warmup_steps", "repeat"):
        at_least(camel(key), getattr(request, key), 1)
    at_least("warmup", request.warmup, 0)
    seconds("timeoutS", request.timeout_s)
    seconds("launchTimeoutS", request.launch_timeout_s)
    finite("guidanceScale", request.guidance_scale)
    cache = request.cache
    at_least("cache.fn", cache.fn, 0)
    at_least("cache.bn", cache.bn, 0)
    at_least("cache.maxWarmupSteps", cache.max_warmup_steps, 0)
    at_least("cache.warmupInterval", cache.warmup_interval, 1)
    at_least("cache.maxCachedSteps", cache.max_cached_steps, -1)
    at_least("cache.maxContinuousCachedSteps", cache.max_continuous_cached_steps, -1)
    finite("cache.residualDiffThreshold", cache.residual_diff_threshold)
    at_least("cache.residualDiffThreshold", cache.residual_diff_threshold, 0)
    share = cache.calibrate_share
    if share is not None and not 0 <= share <= 1:
        problems.append(f"cache.calibrateShare must be between 0 and 1 (got {share!r})")
    tune = request.tune
    if tune is not None:
        for key in ("fn", "bn", "residual_diff_thresholds"):
            if not getattr(tune, key):
                problems.append(f"tune.{camel(key)} is empty")
        for i, value in enumerate(tune.fn):
            at_least(f"tune.fn[{i}]", value, 0)
        for i, value in enumerate(tune.bn):
            at_least(f"tune.bn[{i}]", value, 0)
        for i, value in enumerate(tune.residual_diff_thresholds):
            finite(f"tune.residualDiffThresholds[{i}]", value)
            at_least(f"tune.residualDiffThresholds[{i}]", value, 0)
        for i, value in enumerate(tune.max_warmup_steps or []):
            at_least(f"tune.maxWarmupSteps[{i}]", value, 0)
        if tune.attention_backends is not None and not tune.attention_backends:
            problems.append("tune.attentionBackends is empty (null: those available)")
        if tune.compile is not None and not tune.compile:
            problems.append("tune.compile is empty (null: the default)")
        at_least("tune.combine", tune.combine, 0)
        seconds("tune.budgetS", tune.budget_s)
    for field_ in dataclasses.fields(request.thresholds):
        finite(f"thresholds.{camel(field_.name)}", getattr(request.thresholds, field_.name))
    return problems


# --------------------------------------------------------------------------------------- schema


def json_schema() -> dict[str, Any]:
    """The JSON schema (draft 2020-12) of the three documents, generated from the dataclasses."""
    defs: dict[str, Any] = {}
    for cls in (VerificationRequest, ProgressEvent, VerificationResult):
        _schema_of(cls, defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://cdit-integrator/verification.schema.json",
        "title": "cdit-integrator verification runtime documents",
        "description": (
            "VerificationRequest (input), ProgressEvent (JSON lines on stdout) and "
            "VerificationResult (results.json). Generated by cdit_runtime.contract.json_schema()."
        ),
        "schemaVersion": SCHEMA_VERSION,
        "$defs": dict(sorted(defs.items())),
    }


def _schema_of(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if tp is Any:
        return {}
    if dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placeholder against recursion
            hints = typing.get_type_hints(tp)
            props: dict[str, Any] = {}
            required: list[str] = []
            for f in dataclasses.fields(tp):
                prop = dict(_schema_of(hints[f.name], defs))
                if f.metadata.get("doc"):
                    prop["description"] = f.metadata["doc"]
                if f.default is not dataclasses.MISSING:
                    prop["default"] = to_json(f.default)
                elif f.default_factory is dataclasses.MISSING:
                    required.append(camel(f.name))
                props[camel(f.name)] = prop
            defs[name] = {
                "type": "object",
                "description": " ".join((tp.__doc__ or "").split()),
                "properties": props,
                "required": required,
                "additionalProperties": False,
            }
        return {"$ref": f"#/$defs/{name}"}
    if origin in (Union, types.UnionType):
        options = [_schema_of(arg, defs) for arg in typing.get_args(tp)]
        return {"anyOf": options}
    if origin is Literal:
        return {"enum": list(typing.get_args(tp))}
    if origin is list:
        (item,) = typing.get_args(tp)
        return {"type": "array", "items": _schema_of(item, defs)}
    if origin is dict:
        _, value = typing.get_args(tp)
        return {"type": "object", "additionalProperties": _schema_of(value, defs)}
    simple = {float: "number", int: "integer", str: "string", bool: "boolean", type(None): "null"}
    if tp in simple:
        return {"type": simple[tp]}
    raise TypeError(f"no schema for {tp!r}")


def schema_text() -> str:
    """The schema file's exact text."""
    return json.dumps(json_schema(), indent=1) + "\n"
