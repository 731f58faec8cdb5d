"""``verify --tune``: the grid as phases, the combined second stage, the front and the advice.

No torch: runs in the controller. A tune is an ordinary run whose phases are generated:

* stage 1 — every attention backend on the plain pipeline, eager (``kernels`` phases), every
  DBCache setting on the default kernels (``cache`` phases; the first setting of each Fn/Bn
  split carries the no-cache control), and on more than one GPU the parallel phases over every
  GPU;
* stage 2 — chosen from stage 1's verdicts: the fastest passing backend compiled
  (``torch.compile`` costs minutes per phase on a large model: it is tried on the winner only),
  and with the best passing cache settings, eager and compiled; the fastest passing parallel
  phase with those cache settings.

Every point gets the normal verdict against the baseline; the report keeps the passing points'
Pareto front (latency vs PSNR) and recommends the fastest passing point that beats the baseline,
as Python to paste and as a command line that verifies it alone.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from .contract import (
    PARALLEL_KINDS,
    CacheOptions,
    PhaseResult,
    PhaseSpec,
    TuneOptions,
    TunePoint,
    TuneReport,
    VerificationRequest,
)

__all__ = [
    "available_backends",
    "cli_line",
    "control_donor",
    "expand",
    "pareto_front",
    "python_snippet",
    "report",
    "second_stage",
]

DEFAULT_BACKEND = "native"  # diffusers' default: torch's scaled_dot_product_attention
TIMING_CONTROL = "kernels-native"  # the baseline's settings measured again as a grid point
# torch's own SDPA kernels, chosen explicitly through diffusers (no extra package needed)
_GPU_NATIVE = ("native", "_native_cudnn", "_native_flash", "_native_efficient")
# backends that need a package: (backend, module that provides it)
_GPU_PACKAGES = (
    ("flash", "flash_attn"),
    ("_flash_3", "flash_attn_interface"),
    ("sage", "sageattention"),
)
_CPU = ("native", "_native_math")


def available_backends(device: str) -> list[str]:
    """The attention backends this machine can run (kernels torch has, packages installed)."""
    if device != "cuda":
        return list(_CPU)
    found = [name for name, module in _GPU_PACKAGES if importlib.util.find_spec(module)]
    return [*_GPU_NATIVE, *found]


def _compiles(options: TuneOptions, device: str) -> list[bool]:
    if options.compile is not None:
        return list(dict.fromkeys(options.compile))
    return [False, True] if device == "cuda" else [False]


def _kernel_name(backend: str | None, compiled: bool) -> str:
    return f"kernels-{backend or DEFAULT_BACKEND}" + ("-compile" if compiled else "")


def _cache_name(options: CacheOptions) -> str:
    return (
        f"fn{options.fn}-bn{options.bn}-rdt{options.residual_diff_threshold:g}"
        f"-ws{options.max_warmup_steps}"
    )


def expand(request: VerificationRequest, device: str, gpus: int) -> VerificationRequest:
    """The request with its phases replaced by the baseline and stage 1 of the grid."""
    options = request.tune
    if options is None:
        return request
    backends = options.attention_backends
    if backends is None:
        backends = available_backends(device)
    # the timing control: the baseline again, in the place of a grid point (the first phase
    # after a load may run slower or faster for reasons that are not its kernels)
    phases = [PhaseSpec("baseline"), PhaseSpec("kernels", name=TIMING_CONTROL, compile=False)]
    for backend in dict.fromkeys(backends):
        if backend == DEFAULT_BACKEND:
            continue  # that is the baseline
        phases.append(
            PhaseSpec(
                "kernels",
                name=_kernel_name(backend, False),
                attention_backend=backend,
                compile=False,
            )
        )
    base = request.cache
    warmups = options.max_warmup_steps or [base.max_warmup_steps]
    controlled: set[tuple[int, int]] = set()
    for fn in dict.fromkeys(options.fn):
        for bn in dict.fromkeys(options.bn):
            for rdt in dict.fromkeys(options.residual_diff_thresholds):
                for warmup in dict.fromkeys(warmups):
                    # the no-cache control checks the integration (adapter, Fn/Bn split): once
                    # per split is enough, the threshold and the warmup do not change it
                    control = base.control and (fn, bn) not in controlled
                    controlled.add((fn, bn))
                    cache = dataclasses.replace(
                        base,
                        fn=fn,
                        bn=bn,
                        residual_diff_threshold=rdt,
                        max_warmup_steps=warmup,
                        calibrate_share=None,
                        control=control,
                    )
                    phases.append(
                        PhaseSpec(
                            "cache",
                            name=f"cache-{_cache_name(cache)}",
                            cache_options=cache,
                            attention_backend=None,
                            compile=False,
                        )
                    )
    if device == "cuda" and gpus > 1 and options.parallel:
        for kind in ("ulysses", "ring", "tp"):
            phases.append(PhaseSpec(kind, name=f"parallel-{kind}-{gpus}", size=gpus, compile=False))
    return dataclasses.replace(request, phases=phases)


def _passed(phase: PhaseResult | None) -> bool:
    return phase is not None and phase.verdict == "pass" and phase.latency_s is not None


def _fastest(specs: Sequence[PhaseSpec], phases: Mapping[str, PhaseResult]) -> list[PhaseSpec]:
    """The passing ones among ``specs``, fastest first."""
    ok = [s for s in specs if _passed(phases.get(s.id))]
    return sorted(ok, key=lambda s: phases[s.id].latency_s or math.inf)


def second_stage(
    request: VerificationRequest, phases: Mapping[str, PhaseResult], device: str
) -> list[PhaseSpec]:
    """Stage 2, from stage 1's verdicts: the fastest passing backend (the default when none beat
    the baseline) compiled, and with the best passing cache settings, eager and compiled; on
    several GPUs the fastest passing parallel phase with them. ``torch.compile`` costs minutes
    per phase on large models, so it is tried on the winning backend only."""
    options = request.tune
    if options is None:
        return []
    base_latency = reference_latency(phases)
    faster = [
        s
        for s in _fastest([s for s in request.phases if s.kind == "kernels"], phases)
        if base_latency is None or (phases[s.id].latency_s or math.inf) < base_latency
    ]
    backend = faster[0].attention_backend if faster else None
    compiles = _compiles(options, device)
    caches = _fastest([s for s in request.phases if s.kind == "cache"], phases)[: options.combine]
    parallel = _fastest(
        [s for s in request.phases if s.kind in ("ulysses", "ring", "tp") and not s.cache], phases
    )
    out: list[PhaseSpec] = []
    if True in compiles:
        out.append(
            PhaseSpec(
                "kernels",
                name=_kernel_name(backend, True),
                attention_backend=backend,
                compile=True,
            )
        )
    for cache in caches:
        assert cache.cache_options is not None
        settings = dataclasses.replace(cache.cache_options, control=False)
        for compiled in compiles:
            if backend is None and not compiled:
                continue  # measured in stage 1
            kernels = _kernel_name(backend, compiled).removeprefix("kernels-")
            out.append(
                dataclasses.replace(
                    cache,
                    name=f"tuned-{kernels}-{_cache_name(settings)}",
                    attention_backend=backend,
                    compile=compiled,
                    cache_options=settings,
                )
            )
        if parallel:
            best = parallel[0]
            out.append(
                dataclasses.replace(
                    best,
                    name=f"{best.id}-{_cache_name(settings)}",
                    cache=True,
                    cache_options=settings,
                )
            )
    return out


def _psnr(phase: PhaseResult) -> float:
    if phase.kind == "baseline":
        return math.inf  # the reference itself
    value = phase.psnr_db if phase.psnr_db is not None else phase.latent_psnr_db
    if value is None:
        return -math.inf
    return math.inf if value == "inf" else float(value)


def pareto_front(points: Sequence[TunePoint], phases: Mapping[str, PhaseResult]) -> list[str]:
    """Ids of the passing points (and the baseline) no other such point beats on both latency
    and PSNR, fastest first."""
    candidates = [
        p
        for p in points
        if p.latency_s is not None and (p.verdict == "pass" or p.verdict == "reference")
    ]
    front = []
    for p in candidates:
        mine = (p.latency_s or math.inf, _psnr(phases[p.phase]))
        dominated = any(
            (q.latency_s or math.inf) <= mine[0]
            and _psnr(phases[q.phase]) >= mine[1]
            and ((q.latency_s or math.inf) < mine[0] or _psnr(phases[q.phase]) > mine[1])
            for q in candidates
            if q is not p
        )
        if not dominated:
            front.append(p)
    return [p.phase for p in sorted(front, key=lambda p: p.latency_s or math.inf)]


def _point(spec: PhaseSpec, phase: PhaseResult, stage: int) -> TunePoint:
    cached = spec.kind == "cache" or spec.cache
    parallel = spec.kind in PARALLEL_KINDS
    return TunePoint(
        phase=spec.id,
        stage=stage,
        attention_backend=spec.attention_backend,
        compile=bool(spec.compile),
        cache=spec.cache_options if cached else None,
        parallel=f"{spec.kind}-{spec.size}" if parallel else None,
        status=phase.status,
        verdict=phase.verdict,
        latency_s=phase.latency_s,
        compile_s=phase.compile_s,
        speedup=phase.speedup,
        psnr_db=phase.psnr_db,
        ssim=phase.ssim,
        cached_steps=phase.cached_steps,
    )


def reference_latency(phases: Mapping[str, PhaseResult]) -> float | None:
    """What a point must beat: the faster of the baseline and its timing control."""
    times = [
        phase.latency_s
        for name in ("baseline", TIMING_CONTROL)
        if (phase := phases.get(name)) is not None and phase.status == "ok" and phase.latency_s
    ]
    return min(times) if times else None


def _timing_note(phases: Mapping[str, PhaseResult]) -> str | None:
    first, again = phases.get("baseline"), phases.get(TIMING_CONTROL)
    if not (first and again and first.latency_s and again.latency_s):
        return None
    spread = abs(first.latency_s - again.latency_s) / min(first.latency_s, again.latency_s)
    if spread < 0.05:
        return None
    return (
        f"the baseline measured twice took {first.latency_s:.3f} s and {again.latency_s:.3f} s "
        f"({spread:.0%} apart): speedups are against the faster, and differences below that "
        "spread are noise (raise --repeat)"
    )


def control_donor(request: VerificationRequest, spec: PhaseSpec) -> str | None:
    """The tune phase whose no-cache control also covers ``spec`` (same integration and Fn/Bn
    split: the control checks the integration, which the threshold and warmup do not change)."""
    mine = spec.cache_options
    if request.tune is None or mine is None or mine.control:
        return None
    for other in request.phases:
        theirs = other.cache_options
        if (
            other.kind == "cache"
            and theirs is not None
            and theirs.control
            and (theirs.fn, theirs.bn) == (mine.fn, mine.bn)
            and other.integration == spec.integration
        ):
            return other.id
    return None


def report(
    request: VerificationRequest,
    phases: Mapping[str, PhaseResult],
    stage_two: set[str],
    dtype: str | None = None,
    notes: Sequence[str] = (),
) -> TuneReport:
    """The points in the order measured, their front, the recommendation and how to use it."""
    points = [
        _point(spec, phases[spec.id], 2 if spec.id in stage_two else 1)
        for spec in request.phases
        if spec.id in phases
    ]
    front = pareto_front(points, phases)
    for point in points:
        point.on_front = point.phase in front
    base_latency = reference_latency(phases)
    if base_latency is not None:
        for point in points:
            point.speedup = base_latency / point.latency_s if point.latency_s else None
    winners = [
        p
        for p in points
        if p.verdict == "pass"
        and p.latency_s is not None
        and (base_latency is None or p.latency_s < base_latency)
    ]
    winners.sort(key=lambda p: p.latency_s or math.inf)
    result = TuneReport(
        points=points,
        front=front,
        skipped=[p.phase for p in points if p.status == "skipped"],
        notes=list(notes),
    )
    timing = _timing_note(phases)
    if timing:
        result.notes.append(timing)
    if result.skipped:
        result.notes.append(
            f"{len(result.skipped)} point(s) not run: the time box of {request.tune.budget_s:g} s "
            "was spent (raise it with --tune-budget or narrow the grid)"
            if request.tune
            else f"{len(result.skipped)} point(s) not run"
        )
    failed = [p.phase for p in points if p.verdict in ("fail", "garbled") or p.status == "failed"]
    if failed:
        result.notes.append(f"failed their verdict or did not run: {', '.join(failed)}")
    if not winners:
        result.notes.append(
            "no configuration both passed its verdict and beat the baseline: keep the defaults"
        )
        return result
    best = winners[0]
    spec = next(s for s in request.phases if s.id == best.phase)
    result.recommended = best.phase
    result.python = python_snippet(request, spec, best, dtype)
    result.cli = cli_line(request, spec)
    return result


def _shown_psnr(value: float | str | None) -> str:
    if value is None:
        return "?"
    return "inf" if value == "inf" or value == math.inf else f"{float(value):.1f}"


def _cache_config_lines(options: CacheOptions) -> list[str]:
    return [
        "    cache_config=DBCacheConfig(",
        f"        Fn_compute_blocks={options.fn},",
        f"        Bn_compute_blocks={options.bn},",
        f"        residual_diff_threshold={options.residual_diff_threshold!r},",
        f"        max_warmup_steps={options.max_warmup_steps},",
        f"        warmup_interval={options.warmup_interval},",
        f"        max_cached_steps={options.max_cached_steps},",
        f"        max_continuous_cached_steps={options.max_continuous_cached_steps},",
        "    ),",
    ]


def _parallel_args(spec: PhaseSpec) -> str:
    key = {"ulysses": "ulysses_size", "ring": "ring_size", "tp": "tp_size"}.get(spec.kind)
    return f"{key}={spec.size}" if key else ""


def python_snippet(
    request: VerificationRequest, spec: PhaseSpec, point: TunePoint, dtype: str | None = None
) -> str:
    """The recommendation as Python for a script that already holds ``pipe``."""
    speed = f"{point.speedup:.2f}x" if point.speedup else "?"
    ssim = f", SSIM {point.ssim:.4f}" if point.ssim is not None else ""
    lines = [
        f"# verify --tune: {speed} over the baseline at PSNR {_shown_psnr(point.psnr_db)} dB{ssim}"
        f" ({dtype or request.dtype or 'default dtype'}, {point.phase})"
    ]
    cached = spec.kind == "cache" or spec.cache
    parallel = _parallel_args(spec)
    integration = request.integration
    uses_integration = cached or bool(parallel)
    standalone = integration.kind == "standalone" and bool(integration.path)
    if (uses_integration and not standalone) or (spec.compile and cached):
        lines.append("import cache_dit")
    if uses_integration:
        imports = ["DBCacheConfig"] if cached else []
        if parallel:
            imports.append("ParallelismConfig")
        lines.append(f"from cache_dit import {', '.join(imports)}")
        if standalone:
            stem = Path(integration.path or "").stem
            lines.append(f"from {stem} import enable  # the generated module {integration.path}")
            lines.append("")
            lines.append("enable(")
        else:
            lines.append("")
            lines.append("cache_dit.enable_cache(")
        lines.append("    pipe,")
        if cached and spec.cache_options is not None:
            lines.extend(_cache_config_lines(spec.cache_options))
        if parallel:
            lines.append(f"    parallelism_config=ParallelismConfig({parallel}),")
        lines.append(")")
    backend = spec.attention_backend
    if backend and not parallel:
        lines.append(f'pipe.transformer.set_attention_backend("{backend}")')
    if spec.compile:
        if cached:
            lines.append("cache_dit.set_compile_configs()  # recompile limits for cached blocks")
        took = f"  # compiles in the first call: {point.compile_s:.0f} s" if point.compile_s else ""
        lines.append(f"pipe.transformer.compile(){took}")
    return "\n".join(lines) + "\n"


def cli_line(request: VerificationRequest, spec: PhaseSpec) -> str:
    """A ``cdit-integrate verify`` command that verifies the recommendation alone."""
    args = ["cdit-integrate", "verify"]
    model = request.model
    if model.source == "tiny":
        args += ["--tiny", model.family or ""]
    elif model.path:
        args += ["--model", model.path] + (["--shrink"] if model.source == "shrink" else [])
    if model.pipeline_class:
        args += ["--pipeline-class", model.pipeline_class]
    for path in model.source_files:
        args += ["--source-file", path]
    integration = request.integration
    if integration.kind == "standalone" and integration.path:
        args += ["--integration", integration.path]
    elif integration.path:
        args += ["--checkout", integration.path]
    cached = spec.kind == "cache" or spec.cache
    kind = spec.kind + ("+cache" if spec.cache and spec.kind != "cache" else "")
    args += ["--phases", f"baseline,{kind}"]
    if _parallel_args(spec):
        args += ["--size", str(spec.size)]
    if spec.attention_backend:
        args += ["--attn", spec.attention_backend]
    if spec.compile:
        args += ["--compile"]
    if cached and spec.cache_options is not None:
        o = spec.cache_options
        args += ["--fn", str(o.fn), "--bn", str(o.bn), "--rdt", f"{o.residual_diff_threshold:g}"]
        args += ["--ws", str(o.max_warmup_steps)]
    for flag, value in (
        ("--steps", request.steps),
        ("--height", request.height),
        ("--width", request.width),
        ("--frames", request.num_frames),
        ("--dtype", request.dtype),
        ("--seed", request.seed if request.seed else None),
    ):
        if value is not None:
            args += [flag, str(value)]
    for name, value in request.extra_call_kwargs.items():
        args += ["--call-arg", f"{name}={json.dumps(value)}"]
    for name, path in request.inputs.items():
        args += ["--input", f"{name}={path}"]
    return " ".join(shlex.quote(a) for a in args)
