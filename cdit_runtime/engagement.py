"""Did a parallel phase parallelize anything? Judged from `work_meter`'s measurements.

A context-parallel phase whose splits never fired, or a tensor-parallel phase that sharded no
weight, computes the whole model on every rank: its output equals the baseline and would pass.
Such a phase is ``not_exercised``, never ``pass``: the integration was not verified to split.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .contract import PhaseResult, PhaseSpec

__all__ = ["judge_engagement"]

# The median Linear call of a split phase takes about 1/size of the baseline's rows; above this
# share of them nothing (or too little to matter) was split.
SPLIT_MAX_SHARE = 0.95
# Sharded weights leave a rank a share of the transformer's elements; at or above this one no
# weight was sharded.
SHARD_MAX_SHARE = 0.999


def judge_engagement(
    phase: PhaseResult,
    spec: PhaseSpec,
    record: Mapping[str, Any],
    records: Mapping[str, Mapping[str, Any]],
    specs: Mapping[str, PhaseSpec],
) -> None:
    """Turn a passing parallel phase that split nothing into ``not_exercised``; note the
    evidence of one that did."""
    if phase.verdict not in ("pass", "warn"):
        return
    base = _baseline_work(records, specs)
    work = record.get("work")
    if not base or not isinstance(work, Mapping):
        return
    for what, share, limit, failure in _checks(spec, work, base):
        if share >= limit:
            phase.verdict = "not_exercised"
            phase.verdict_reason = failure.format(share=share)
            return
        phase.notes.append(f"{what}: {share:.2f}x the baseline's on each rank")


def _checks(
    spec: PhaseSpec, work: Mapping[str, Any], base: Mapping[str, Any]
) -> list[tuple[str, float, float, str]]:
    kind = spec.kind if spec.kind != "vae_p" else spec.vae_base
    out: list[tuple[str, float, float, str]] = []
    cp = kind in ("ulysses", "ring", "uaa", "hybrid")
    tp = kind in ("tp", "tp_tep", "hybrid")
    if cp and work.get("medianRows") and base.get("medianRows"):
        out.append(
            (
                "context parallelism split the tokens: rows per Linear call",
                work["medianRows"] / base["medianRows"],
                SPLIT_MAX_SHARE,
                "context parallelism split nothing: the transformer's Linear layers took "
                "{share:.2f}x the baseline's rows per call on each rank, so every rank computed "
                "the whole sequence (splits that never fire: keys matching no module, "
                "expected_dims the inputs never have); the output proves nothing about the plan",
            )
        )
    if tp and work.get("paramElements") and base.get("paramElements"):
        out.append(
            (
                "tensor parallelism sharded the weights: parameter elements",
                work["paramElements"] / base["paramElements"],
                SHARD_MAX_SHARE,
                "tensor parallelism sharded no weight: each rank held {share:.2f}x the "
                "baseline's transformer parameters, so every rank computed the whole model; "
                "the output proves nothing about the plan",
            )
        )
    if (
        spec.kind == "tp_tep"
        and work.get("textEncoderElements")
        and base.get("textEncoderElements")
    ):
        out.append(
            (
                "text-encoder parallelism sharded the text encoders: parameter elements",
                work["textEncoderElements"] / base["textEncoderElements"],
                SHARD_MAX_SHARE,
                "text-encoder parallelism sharded no weight: each rank held {share:.2f}x the "
                "baseline's text-encoder parameters; the output proves nothing about TE-P",
            )
        )
    return out


def _baseline_work(
    records: Mapping[str, Mapping[str, Any]], specs: Mapping[str, PhaseSpec]
) -> Mapping[str, Any] | None:
    for name, spec in specs.items():
        if spec.kind == "baseline":
            work = (records.get(name) or {}).get("work")
            return work if isinstance(work, Mapping) else None
    return None
