"""One phase on one rank, around its pipeline calls (those are `worker`'s).

`PhaseRun`: the phase's record so far and the phase pipeline. The steps that are no pipeline call:
setting the phase pipeline up (`set_up_pipe`), recording what was measured (`record_measurements`)
or why the phase failed (`failed_record`), releasing the pipeline on every path
(`release_phase`), and the record of a phase every rank ran (`collective_record`).
"""

from __future__ import annotations

import gc
import itertools
import sys
from dataclasses import dataclass, field
from typing import Any

from .contract import PhaseSpec, to_json
from .contract.worker import RankFailed
from .errors import classify
from .worker_context import Context, combine_records, ignored_arguments

__all__ = [
    "GIB",
    "PhaseRun",
    "collective_record",
    "failed_record",
    "module_bytes",
    "record_measurements",
    "release_phase",
    "release_pipeline",
    "set_up_pipe",
]

GIB = 1024**3


@dataclass
class PhaseRun:
    """One phase on this rank: its record so far and the phase pipeline to release at the end."""

    spec: PhaseSpec
    options: Any  # the phase's CacheOptions
    collective: bool  # every rank runs it
    report: bool  # this rank reports it (sends its events, saves its output)
    record: dict[str, Any] = field(
        default_factory=lambda: {"status": "ok", "config": {}, "notes": []}
    )
    pipe: Any = None  # the phase pipeline (copies of the components the phase modifies)
    enabled: bool = False  # the integration was enabled on `pipe`

    @property
    def plain(self) -> bool:
        """No integration applied (baseline, kernels)."""
        return self.spec.kind in ("baseline", "kernels")

    @property
    def multi(self) -> bool:
        return self.spec.world_size > 1


def module_bytes(module: Any, device: Any) -> int:
    """Bytes of ``module``'s parameters and buffers on ``device``."""
    tensors = itertools.chain(module.parameters(), module.buffers())
    return sum(t.numel() * t.element_size() for t in tensors if t.device == device)


def release_pipeline(pipe: Any, enabled: bool) -> None:
    """Disable cache-dit on a phase pipeline the integration was enabled on (best effort)."""
    if pipe is not None and enabled:
        try:
            import cache_dit

            cache_dit.disable_cache(pipe)
        except Exception:
            pass


def set_up_pipe(
    ctx: Context, run: PhaseRun, names: list[str], configs: tuple[Any, Any], integration: Any
) -> None:
    """The phase pipeline: fresh copies of ``names``, the integration enabled, the kernels set."""
    from .phases import apply_kernels, check_cache_blocks, fresh_pipeline

    cache, parallel = configs
    run.pipe = fresh_pipeline(ctx.pipe, names)
    if not run.plain:
        run.enabled = True
        integration.enable(run.pipe, cache, parallel)
        if cache is not None:
            check_cache_blocks(run.pipe.transformer, run.options)
    apply_kernels(run.pipe, names, run.spec, ctx.request)


def record_measurements(
    ctx: Context, run: PhaseRun, transformer_calls: int | None, cache: Any, idle: int
) -> None:
    """Ignored call arguments, transformer calls, peak memory above ``idle``, cache statistics."""
    import torch

    from .cache_stats import collect, executed_steps

    record = run.record
    ignored = ignored_arguments(ctx)
    if ignored:
        record["notes"].append(
            f"the pipeline's __call__ takes no {ignored}: not passed (check the spelling)"
        )
    record["transformerCalls"] = transformer_calls
    if ctx.cuda:
        peak = torch.cuda.max_memory_allocated(ctx.device) - idle
        record["peakMemoryGiB"] = [round(peak / GIB, 3)]
    if cache is not None:
        record["cacheStats"] = collect(run.pipe)
        record["executedSteps"] = executed_steps(run.pipe)


def failed_record(ctx: Context, run: PhaseRun, exc: Exception) -> dict[str, Any]:
    """The record of a phase that raised ``exc`` (called while it is handled)."""
    error = classify(exc, phase_kind=run.spec.kind)
    record = {"status": "failed", "config": run.record.get("config", {}), "error": to_json(error)}
    if run.collective:
        # The other ranks may now wait forever in a collective: tell the controller at once.
        ctx.channel.send(RankFailed(phase=run.spec.id, rank=ctx.rank, error=error))
    if not run.report:
        print(f"[rank {ctx.rank}] phase {run.spec.id} failed:", file=sys.stderr)
        import traceback

        traceback.print_exc()
    return record


def release_phase(ctx: Context, run: PhaseRun) -> None:
    """Every path: the cache disabled, the phase pipeline dropped, device memory returned."""
    import torch

    release_pipeline(run.pipe, run.enabled)
    run.pipe = None
    gc.collect()
    if ctx.cuda:
        torch.cuda.empty_cache()


def collective_record(ctx: Context, run: PhaseRun) -> dict[str, Any]:
    """Every rank's record combined (rank 0 reports it); a replicated phase says so."""
    record = combine_records(ctx, run.record, per_device=run.multi)
    if not run.multi and run.report:
        record["notes"] = [
            *record.get("notes", []),
            f"run on all {ctx.world} ranks at once (cache-dit all-reduces residual diffs "
            "when torch.distributed is initialised); figures of rank 0",
        ]
    return record
