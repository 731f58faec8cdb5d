"""What each phase applies: cache-dit configs and the pipeline components it must not share.

A phase never modifies the loaded base pipeline: it gets a new pipeline object (a per-phase
subclass, because cache-dit patches ``pipe.__class__.__call__``) that shares the untouched
components and owns deep copies of the ones the phase changes (the transformers always; the text
encoders for TE-P; the VAE for VAE-P). Runs in the workers; torch and cache-dit are imported
inside the functions.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from typing import Any

from .contract import CacheOptions, PhaseSpec, VerificationRequest
from .errors import RunFailure

__all__ = [
    "CONTROL_THRESHOLD",
    "apply_kernels",
    "attention_backend_for",
    "build_configs",
    "cache_config",
    "cache_options_for",
    "check_cache_blocks",
    "compile_for",
    "config_summary",
    "control_cache_config",
    "fresh_pipeline",
    "modified_components",
]


def modified_components(pipe: Any, spec: PhaseSpec) -> list[str]:
    """Names of the components a phase changes (copied, never shared with the base pipeline)."""
    names = [n for n, c in pipe.components.items() if c is not None and n.startswith("transformer")]
    if spec.kind == "tp_tep":
        names += [
            n for n, c in pipe.components.items() if c is not None and n.startswith("text_encoder")
        ]
    if spec.kind == "vae_p":
        names += [n for n in ("vae",) if pipe.components.get(n) is not None]
    return names


def fresh_pipeline(base: Any, names: list[str]) -> Any:
    """A new pipeline of a per-phase subclass with copies of ``names`` and of the scheduler."""
    cls = type(base)
    phase_cls = type(cls.__name__, (cls,), {"__module__": cls.__module__, "__doc__": cls.__doc__})
    components = dict(base.components)
    for name in names:
        components[name] = copy.deepcopy(components[name])
    if components.get("scheduler") is not None:
        components["scheduler"] = copy.deepcopy(components["scheduler"])
    _, optional = base._get_signature_keys(base)
    for key in optional:
        if key in base.config and key not in components:
            components[key] = base.config[key]
    params = inspect.signature(cls.__init__).parameters
    components = {k: v for k, v in components.items() if k in params}
    pipe = phase_cls(**components)
    pipe.set_progress_bar_config(disable=True)
    return pipe


# The no-cache control's threshold: positive, so that cache-dit still measures every step's
# residual diff (a threshold <= 0 skips the measurement), and far below any real diff.
CONTROL_THRESHOLD = 1e-12


def cache_config(
    options: CacheOptions,
    steps: int,
    threshold: float | None = None,
    compute_steps: Sequence[int] = (),
) -> Any:
    """The phase's DBCacheConfig; ``compute_steps``: steps computed whatever the threshold
    (cache-dit's ``steps_computation_mask``, 1 = compute). cache-dit cuts its warmup to the
    mask's leading run of 1s, so every step before ``max_warmup_steps`` is marked too."""
    from cache_dit import DBCacheConfig

    mask = None
    if compute_steps:
        always = {*compute_steps, *range(max(0, options.max_warmup_steps))}
        mask = [1 if step in always else 0 for step in range(steps)]
    return DBCacheConfig(
        Fn_compute_blocks=options.fn,
        Bn_compute_blocks=options.bn,
        residual_diff_threshold=options.residual_diff_threshold if threshold is None else threshold,
        max_warmup_steps=options.max_warmup_steps,
        warmup_interval=options.warmup_interval,
        max_cached_steps=options.max_cached_steps,
        max_continuous_cached_steps=options.max_continuous_cached_steps,
        # Needed when an integration caches the transformer alone (persistent context);
        # harmless for pipeline contexts, which are reset on every call.
        num_inference_steps=steps,
        steps_computation_mask=mask,
    )


def calibrated_config(options: CacheOptions, steps: int, calibration: dict[str, Any]) -> Any:
    """The cache phase's config under a `Calibration` document with a threshold: its threshold,
    and its `computeSteps` computed whatever the threshold."""
    return cache_config(
        options, steps, calibration["threshold"], calibration.get("computeSteps", ())
    )


def control_cache_config(options: CacheOptions, steps: int) -> Any:
    """The same DBCache setup with caching disabled: every block runs at every step.

    The integration (adapter, PatchFunctor, Fn/Bn split) is applied exactly as in the cache
    phase; only the decision to reuse a residual never succeeds. Warmup is 0 so that the
    residual diff of every step after the first is measured (for `cache_stats.calibrate`).
    """
    config = cache_config(options, steps, threshold=CONTROL_THRESHOLD)
    config.max_warmup_steps = 0
    config.warmup_interval = 1
    return config


def parallel_kwargs(spec: PhaseSpec) -> dict[str, Any]:
    """``ParallelismConfig`` keyword arguments of a parallel phase."""
    n = spec.size
    kind = spec.kind
    if kind == "ulysses":
        return {"ulysses_size": n}
    if kind == "ring":
        return {"ring_size": n}
    if kind == "uaa":
        return {"ulysses_size": n, "ulysses_anything": True}
    if kind == "tp":
        return {"tp_size": n}
    if kind == "tp_tep":
        return {"tp_size": n, "extra_parallel_modules": ["text_encoder"]}
    if kind == "vae_p":
        base = {"tp": "tp_size", "ulysses": "ulysses_size", "ring": "ring_size"}[spec.vae_base]
        return {base: n, "extra_parallel_modules": ["vae"]}
    if kind == "hybrid":
        return {"ulysses_size": spec.cp_size, "tp_size": spec.tp_size}
    return {}


def cache_options_for(spec: PhaseSpec, request: VerificationRequest) -> CacheOptions:
    """The phase's DBCache settings: its own (a tune point) or the request's."""
    return spec.cache_options or request.cache


def attention_backend_for(spec: PhaseSpec, request: VerificationRequest) -> str | None:
    """The phase's attention backend (None: the model's default; the baseline never changes)."""
    if spec.kind == "baseline":
        return None
    return spec.attention_backend or request.attention_backend


def compile_for(spec: PhaseSpec, request: VerificationRequest) -> bool:
    """Whether the phase compiles its transformers (never the baseline)."""
    if spec.kind == "baseline":
        return False
    return request.compile if spec.compile is None else spec.compile


def apply_kernels(
    pipe: Any, names: list[str], spec: PhaseSpec, request: VerificationRequest
) -> None:
    """A single-process phase's attention backend and ``torch.compile``, after the integration.

    The backend goes through diffusers' ``set_attention_backend`` (models whose attention calls
    ``dispatch_attention_fn``); under CP/TP cache-dit's ``ParallelismConfig`` takes it instead.
    """
    backend = attention_backend_for(spec, request)
    transformers = [getattr(pipe, n) for n in names if n.startswith("transformer")]
    if backend and spec.world_size == 1:
        for module in transformers:
            setter = getattr(module, "set_attention_backend", None)
            if not callable(setter):
                raise RunFailure(
                    "BAD_REQUEST",
                    f"{type(module).__name__} has no set_attention_backend: the attention "
                    f"backend {backend!r} cannot be chosen for it",
                )
            setter(backend)
    if compile_for(spec, request):
        import cache_dit

        configure = getattr(cache_dit, "set_compile_configs", None)
        if callable(configure):
            configure()  # cache-dit's recompile limits for cached blocks
        for module in transformers:
            module.compile()


def build_configs(spec: PhaseSpec, request: VerificationRequest, steps: int) -> tuple[Any, Any]:
    """(cache_config, parallelism_config) for a phase; both None for the baseline."""
    cache = None
    if spec.kind == "cache" or (spec.cache and spec.kind not in ("baseline", "kernels")):
        cache = cache_config(cache_options_for(spec, request), steps)
    parallel = None
    kwargs = parallel_kwargs(spec)
    if kwargs:
        from cache_dit import ParallelismConfig

        backend = attention_backend_for(spec, request)
        if backend:
            kwargs["attention_backend"] = backend
        parallel = ParallelismConfig(**kwargs)
    return cache, parallel


def config_summary(
    spec: PhaseSpec, cache: Any, parallel: Any, request: VerificationRequest | None = None
) -> dict[str, Any]:
    """What was applied, for the result (JSON-ready)."""
    out: dict[str, Any] = {}
    if request is not None:
        backend = attention_backend_for(spec, request)
        if backend:
            out["attentionBackend"] = backend
        if compile_for(spec, request):
            out["compile"] = True
    if _deterministic():  # as the process runs, not as asked
        out["deterministic"] = True
    if cache is not None:
        out["cache"] = cache.strify()
    if parallel is not None:
        kwargs = parallel_kwargs(spec)
        out["parallel"] = {k: v for k, v in kwargs.items() if k != "extra_parallel_modules"}
        if kwargs.get("extra_parallel_modules"):
            out["extraParallelModules"] = kwargs["extra_parallel_modules"]
        out["backend"] = str(getattr(parallel, "backend", ""))
    return out


def _deterministic() -> bool:
    import torch

    return bool(torch.are_deterministic_algorithms_enabled())


def check_cache_blocks(transformer: Any, options: CacheOptions) -> None:
    """Fn/Bn must fit every cached block list (cache-dit's CLI default Fn=1 always does)."""
    import torch

    for name, child in transformer.named_children():
        cached = isinstance(child, torch.nn.ModuleList) and getattr(child, "_forward_pattern", None)
        if cached and options.fn + options.bn > len(child):
            raise RunFailure(
                "CACHE_OPTIONS",
                f"Fn={options.fn} + Bn={options.bn} exceeds the {len(child)} blocks of `{name}`",
            )
