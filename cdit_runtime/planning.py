"""Which phases run, where, and how many launches they need (no torch: runs in the controller).

Fewest launches and model loads that correctness allows:

* every multi-process phase of one world size shares one launch (one import and one model load
  per rank); each phase gets fresh copies of what it modifies (`phases.fresh_pipeline`), because
  cache-dit cannot undo CP/TP in place (TP swaps weights for DTensor shards);
* the single-process phases ride along in the first launch: the baseline on rank 0 alone; a
  cache phase on every rank at once (``REPLICATED``), because cache-dit all-reduces its residual
  diffs over the default process group whenever ``torch.distributed`` is initialised with more
  than one process (``CachedBlocks._is_parallelized``), so one rank caching alone would wait for
  the others forever; identical replicas average to the same value;
* phases that cannot run here are skipped with the reason as data: more processes than GPUs,
  hybrid CP + TP below 4 processes (with 2 processes cache-dit's ``ulysses_tp`` silently
  degrades to TP only), and phases that need a part a standalone integration declares in
  ``NOT_GENERATED`` (`not_generated`).

Every phase kind runs on a CPU-only host (gloo, one process per rank): the workers patch
cache-dit's accelerator-only steps there (`cpu_patches`: the Ring attention LSE from PyTorch's
CPU flash-attention op, ``"cpu"`` device meshes for TP, TE-P and VAE-P, the GPU guard of the
TP RMSNorm), so nothing is refused for want of a GPU. See docs/cpu-parallel.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

from .contract import PARALLEL_KINDS, ErrorInfo, PhaseSpec, VerificationRequest
from .errors import RunFailure, error_info
from .not_generated import not_generated_refusal

__all__ = [
    "MIN_CPU_PROCESSES",
    "REPLICATED",
    "LaunchPlan",
    "count_gpus",
    "cpu_cores",
    "cpu_process_limit",
    "plan_launches",
    "resolve_device",
]

REPLICATED = -1  # rank of a single-process phase that every rank of the launch runs
# Hybrid CP + TP needs 4 processes: every phase kind must run on any CPU host (a little
# oversubscription costs time, not correctness), so the CPU limit is never below this.
MIN_CPU_PROCESSES = 4


@dataclass
class LaunchPlan:
    world: int
    phases: list[tuple[PhaseSpec, int]] = field(default_factory=list)  # (spec, rank|REPLICATED)

    @property
    def ids(self) -> list[str]:
        return [spec.id for spec, _ in self.phases]


def count_gpus() -> int:
    """Visible NVIDIA GPUs without importing torch (``CUDA_VISIBLE_DEVICES`` is honoured)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    found = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    if visible is not None:
        return min(found, len([v for v in visible.split(",") if v.strip()]))
    return found


def cpu_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        try:
            return max(1, len(affinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def cpu_process_limit() -> int:
    """Most processes one host runs for a CPU launch: one per core, at least `MIN_CPU_PROCESSES`.

    On GPUs the limit is the visible devices (a phase that needs more is skipped, see
    `_refusal`)."""
    return max(cpu_cores(), MIN_CPU_PROCESSES)


def resolve_device(request: VerificationRequest) -> tuple[str, int]:
    gpus = count_gpus() if request.device in ("auto", "cuda") else 0
    if request.device == "cuda" and gpus == 0:
        raise RunFailure("MISSING_GPUS", "device 'cuda' was requested but no GPU is visible")
    return ("cuda" if gpus > 0 else "cpu"), gpus


def _refusal(spec: PhaseSpec, device: str, gpus: int) -> ErrorInfo | None:
    world = spec.world_size
    if spec.kind in PARALLEL_KINDS and spec.kind != "hybrid" and spec.size < 2:
        return error_info("BAD_REQUEST", f"{spec.id}: a parallel phase needs size >= 2")
    if spec.kind == "hybrid" and (spec.cp_size < 2 or spec.tp_size < 2 or world < 4):
        return error_info(
            "WORLD_TOO_SMALL",
            f"{spec.id}: hybrid CP + TP needs CP >= 2 and TP >= 2, i.e. at least 4 processes "
            f"(got {spec.cp_size} x {spec.tp_size}); not running TP alone under a hybrid label",
        )
    if device == "cuda" and world > gpus:
        code = "WORLD_TOO_SMALL" if spec.kind == "hybrid" else "MISSING_GPUS"
        extra = " (a 2-GPU ulysses_tp would silently run TP only)" if spec.kind == "hybrid" else ""
        return error_info(code, f"{spec.id}: needs {world} GPUs, {gpus} visible{extra}")
    return None


def plan_launches(
    request: VerificationRequest, device: str, gpus: int
) -> tuple[list[LaunchPlan], dict[str, ErrorInfo]]:
    """Launches in order (the first one carries the single-process phases) and refusals."""
    refused: dict[str, ErrorInfo] = {}
    singles: list[PhaseSpec] = []
    multi: dict[int, list[PhaseSpec]] = {}
    for spec in request.phases:
        reason = _refusal(spec, device, gpus) or not_generated_refusal(spec, request)
        if reason is not None:
            refused[spec.id] = reason
        elif spec.world_size == 1:
            singles.append(spec)
        else:
            multi.setdefault(spec.world_size, []).append(spec)
    worlds = sorted(multi)
    launches = [LaunchPlan(world) for world in worlds] or ([LaunchPlan(1)] if singles else [])
    if singles:
        first = launches[0]
        ordered = sorted(singles, key=lambda s: s.kind != "baseline")
        for spec in ordered:
            # the baseline and other-kernel runs use no cache-dit: rank 0 runs them alone
            alone = spec.kind in ("baseline", "kernels") or first.world == 1
            first.phases.append((spec, 0 if alone else REPLICATED))
    for launch in launches:
        launch.phases.extend((spec, 0) for spec in multi.get(launch.world, []))
    return launches, refused
