"""The `VerificationRequest` document and its parts, with the acceptance `Thresholds`.

Standard library only (see `contract`). The acceptance thresholds are defined once, here, and end
up as the JSON schema's defaults.
"""

# `doc_field(...)` returns `dataclasses.field(...)`; ruff cannot see that through the helper.
# ruff: noqa: RUF009
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .common import (
    SCHEMA_VERSION,
    SINGLE_KINDS,
    DeviceKind,
    DType,
    PhaseKind,
    doc_field,
)

# ------------------------------------------------------------------------------------ thresholds


@dataclass(frozen=True)
class Thresholds:
    """Acceptance thresholds against the baseline (PSNR on float outputs and on the final latents).

    CP/TP/TE-P/VAE-P/hybrid and the no-cache control compute the same math as the baseline, so
    in float32 they must be near-exact; in bfloat16/float16 kernels may tile differently. The
    float32 values are calibrated on correct plans against deliberately wrong ones
    (``docs/verification-thresholds.md``).
    """

    cache_psnr_db: float = doc_field("cache phases pass above this PSNR", default=30.0)
    cache_warn_psnr_db: float = doc_field(
        "cache phases warn between this and cachePsnrDb", default=25.0
    )
    parallel_psnr_db: float = doc_field(
        "CP, TP, TE-P, VAE-P and hybrid pass above this (bfloat16/float16)", default=35.0
    )
    parallel_psnr_db_float32: float = doc_field(
        "CP, TP, TE-P, VAE-P and hybrid pass above this in float32", default=80.0
    )
    control_psnr_db: float = doc_field(
        "a no-cache control reproduces the baseline above this (bfloat16/float16)", default=45.0
    )
    control_psnr_db_float32: float = doc_field(
        "a no-cache control reproduces the baseline above this in float32", default=80.0
    )
    ssim_min: float = doc_field("every phase needs SSIM above this", default=0.90)
    garbled_ssim_below: float = doc_field(
        "SSIM below this with a plausible PSNR: garbled", default=0.5
    )
    garbled_min_psnr_db: float = doc_field("a PSNR at or above this is 'plausible'", default=20.0)

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

    source: Literal["local", "tiny", "shrink"] = doc_field("local | tiny | shrink")
    path: str | None = doc_field("model directory (holds model_index.json)", default=None)
    family: Literal["flux", "wan", "qwenimage", "flux1-dev", "skimage-dit"] | None = doc_field(
        "tiny family (flux1-dev: full-size FLUX.1-dev configs, random weights, for GPUs; "
        "skimage-dit: the bundled trained model, where cache quality means something)",
        default=None,
    )
    pipeline_class: str | None = doc_field(
        "pipeline class; default: model_index.json", default=None
    )
    source_files: list[str] = doc_field(
        "user source files defining third-party classes (imported: trusted workspace only)",
        default_factory=list,
    )
    shrink_layers: int = doc_field("shrink: layers kept per block list", default=2)
    shrink_heads: int = doc_field("shrink: attention heads kept", default=4)


# The integration kinds are the code generator's target kinds, by the same names.
IntegrationKind = Literal["standalone", "cache-dit-checkout"]
# Earlier spellings still read in a request (`load_request`), never written: "checkout".
INTEGRATION_KIND_ALIASES: dict[str, IntegrationKind] = {"checkout": "cache-dit-checkout"}


@dataclass(frozen=True)
class Integration:
    """The integration to verify.

    ``standalone``: a generated module (``path``) exposing ``TRANSFORMER_CLASS``,
    ``block_adapter(pipe, **kw)``, ``cp_plan(transformer)`` and ``enable(pipe, *, cache_config,
    parallelism_config, transformer)``. ``cache-dit-checkout``: cache-dit's own registries
    (``cache_dit.enable_cache(pipe, ...)``); ``path`` is an optional cache-dit checkout whose
    ``src`` is imported instead of the installed package. The earlier kind ``checkout`` is read
    as ``cache-dit-checkout``.
    """

    kind: IntegrationKind = doc_field(
        "standalone | cache-dit-checkout", default="cache-dit-checkout"
    )
    path: str | None = doc_field("module file (standalone) or cache-dit checkout", default=None)


@dataclass(frozen=True)
class CacheOptions:
    """DBCache settings. Defaults are cache-dit's CLI defaults (not its library defaults)."""

    fn: int = doc_field("Fn_compute_blocks (must not exceed the blocks of a list)", default=1)
    bn: int = doc_field("Bn_compute_blocks", default=0)
    residual_diff_threshold: float = doc_field("rdt", default=0.12)
    max_warmup_steps: int = doc_field("no caching while step <= this", default=8)
    warmup_interval: int = doc_field("compute every k-th warmup step", default=1)
    max_cached_steps: int = doc_field("-1: unlimited", default=-1)
    max_continuous_cached_steps: int = doc_field("-1: unlimited", default=3)
    calibrate_share: float | None = doc_field(
        "choose the residual-diff threshold from the no-cache control's per-step diffs so that "
        "about this share of the steps is cached (a plumbing check on random weights); null: "
        "use residualDiffThreshold",
        default=None,
    )
    control: bool = doc_field(
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

    attention_backends: list[str] | None = doc_field(
        "diffusers attention backends to try (null: those this machine has)", default=None
    )
    compile: list[bool] | None = doc_field(
        "torch.compile off/on, tried on the fastest passing backend (null: both on GPUs, off "
        "on CPU)",
        default=None,
    )
    fn: list[int] = doc_field("Fn_compute_blocks values", default_factory=lambda: [1])
    bn: list[int] = doc_field("Bn_compute_blocks values", default_factory=lambda: [0])
    residual_diff_thresholds: list[float] = doc_field(
        "residual-diff thresholds", default_factory=lambda: [0.08, 0.12, 0.2, 0.3]
    )
    max_warmup_steps: list[int] | None = doc_field(
        "warmup steps (null: the request's cache.maxWarmupSteps)", default=None
    )
    combine: int = doc_field(
        "stage 2: how many of the best passing cache settings are combined with the fastest "
        "passing kernel choice (0: no stage 2)",
        default=2,
    )
    parallel: bool = doc_field(
        "on more than one GPU, also the parallel phases (Ulysses, Ring, TP over every GPU)",
        default=True,
    )
    budget_s: float = doc_field(
        "time box from the run's start: points that would start later are skipped with a note",
        default=900.0,
    )


@dataclass(frozen=True)
class PhaseSpec:
    """One phase of the matrix. ``size``: the parallel degree (CP/TP/TE-P/VAE-P).

    ``kernels``: the plain pipeline (no integration) with another attention backend and/or
    ``torch.compile``: the same math on other kernels, judged like a parallel phase.
    """

    kind: PhaseKind = doc_field(
        "baseline | kernels | cache | ulysses | ring | uaa | tp | tp_tep | vae_p | hybrid"
    )
    name: str | None = doc_field("unique id; default derived from kind and size", default=None)
    size: int = doc_field("parallel degree", default=2)
    cache: bool = doc_field("also enable DBCache in a parallel phase", default=False)
    vae_base: Literal["tp", "ulysses", "ring"] = doc_field(
        "vae_p: parallelism of the rest", default="tp"
    )
    cp_size: int = doc_field("hybrid: Ulysses degree", default=2)
    tp_size: int = doc_field("hybrid: TP degree", default=2)
    timeout_s: float | None = doc_field("phase timeout; default: request timeoutS", default=None)
    integration: str | None = doc_field(
        "a standalone module verified in this phase instead of the request's integration "
        "(compare integrations in one launch: generated vs edited, or deliberate faults)",
        default=None,
    )
    attention_backend: str | None = doc_field(
        "this phase's attention backend (null: the request's attentionBackend)", default=None
    )
    compile: bool | None = doc_field(
        "torch.compile the transformer(s) after the integration is enabled (null: the "
        "request's compile)",
        default=None,
    )
    cache_options: CacheOptions | None = doc_field(
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

    nnodes: int = doc_field("nodes taking part", default=1)
    node_rank: int = doc_field("this node's rank (0: the node that writes the results)", default=0)
    rdzv_endpoint: str | None = doc_field(
        "HOST:PORT of the rendezvous: node 0's address as the other nodes reach it; node 0 hosts "
        "the store (launch i of the run uses PORT + i - 1)",
        default=None,
    )
    rdzv_id: str = doc_field("rendezvous id shared by all nodes of one run", default="cdit-verify")
    nproc_per_node: int | None = doc_field(
        "processes per node (null: the phase's world size / nnodes)", default=None
    )


@dataclass(frozen=True)
class VerificationRequest:
    """One verification run: a model, an integration, phases and the generation settings."""

    model: ModelSource = doc_field("the pipeline")
    output_dir: str = doc_field("results.json, images, arrays and logs go here")
    integration: Integration = doc_field("what is verified", default_factory=Integration)
    phases: list[PhaseSpec] = doc_field(
        "in order; baseline first",
        default_factory=lambda: [PhaseSpec("baseline"), PhaseSpec("cache"), PhaseSpec("ulysses")],
    )
    cache: CacheOptions = doc_field("DBCache settings", default_factory=CacheOptions)
    prompt: str = doc_field(
        "prompt", default="a photo of a cat sitting on a red sofa, studio light"
    )
    negative_prompt: str | None = doc_field("negative prompt", default=None)
    height: int | None = doc_field(
        "image height (null: pipeline or tiny-family default)", default=None
    )
    width: int | None = doc_field(
        "image width (null: pipeline or tiny-family default)", default=None
    )
    num_frames: int | None = doc_field("video pipelines: frames", default=None)
    steps: int | None = doc_field(
        "num_inference_steps (null: 28, tiny families fewer)", default=None
    )
    guidance_scale: float | None = doc_field("pipeline default when null", default=None)
    seed: int = doc_field("CPU generator seed (the same latents on every rank)", default=0)
    dtype: DType | None = doc_field(
        "weights and activations (null: float32 on CPU, bfloat16 on GPUs)", default=None
    )
    device: DeviceKind = doc_field("auto: CUDA when GPUs are visible", default="auto")
    attention_backend: str | None = doc_field(
        "attention backend of every phase but the baseline (diffusers' set_attention_backend "
        "on one process, cache-dit's ParallelismConfig under CP/TP; null: the model's default)",
        default=None,
    )
    compile: bool = doc_field(
        "torch.compile the transformer(s) in every phase but the baseline (after the "
        "integration; the first call's extra time is reported as compileS)",
        default=False,
    )
    deterministic: bool = doc_field(
        "torch.use_deterministic_algorithms in every process (CUBLAS_WORKSPACE_CONFIG set): "
        "slower, but a pipeline whose reruns differ on this device (its baseline's rerunPsnrDb "
        "is finite) reproduces itself, so a no-cache control can be judged",
        default=False,
    )
    warmup: int = doc_field("untimed runs before timing", default=1)
    warmup_steps: int | None = doc_field("steps of warmup runs (null: steps)", default=None)
    repeat: int = doc_field("timed runs (latency = mean)", default=1)
    timeout_s: float = doc_field("default per-phase timeout", default=900.0)
    launch_timeout_s: float = doc_field("import + model load limit per launch", default=900.0)
    reference: str | None = doc_field("output dir of a run whose baseline is reused", default=None)
    extra_call_kwargs: dict[str, Any] = doc_field(
        "passed to the pipeline call (pipeline-specific arguments: num_frames, audio_duration ...)",
        default_factory=dict,
    )
    inputs: dict[str, str] = doc_field(
        "pipeline call arguments loaded from files (image, video, audio): name -> path",
        default_factory=dict,
    )
    tune: TuneOptions | None = doc_field(
        "measure a grid of kernels and cache settings and recommend the fastest that passes "
        "(``verify --tune``); null: run the phases as given",
        default=None,
    )
    nodes: NodeSpec = doc_field("multi-node runs (torchrun rendezvous)", default_factory=NodeSpec)
    thresholds: Thresholds = doc_field("acceptance thresholds", default_factory=Thresholds)
    schema_version: int = doc_field("contract version", default=SCHEMA_VERSION)
