"""The attention strategy: MHA, or for GQA models sharded / FFN-only / replicated attention.

* MHA: Q/K/V (and added-context) projections colwise, output rowwise, the attributes the processor
  reads as per-rank sizes divided (`attention.shard_attrs`).
* GQA with `num_kv_heads % tp == 0`: the same, dividing both head counts (`gqa_sharded`).
* GQA with `num_kv_heads % tp != 0`: either leave the attention unsharded and shard only the FFN
  and modulation (`gqa_ffn_only`, better for long sequences: no extra communication) or replicate
  Q (`to_q` colwise with replicated output, K/V unsharded, output rowwise with replicated input,
  no `shard_div_attr`: `gqa_replicate`, one all-gather of Q per layer, fine for short sequences).
  Benchmark both. The strategy reported is the one for the smallest TP size considered; the
  others are in `strategyBySize` and `alternatives`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import Diagnostic
from .attention import AttentionInfo
from .plan import BlockFlow
from .roles import COLWISE, COLWISE_REPLICATE, ROWWISE, ROWWISE_REPLICATE_INPUT

LONG_SEQUENCE_TOKENS = 10_000


@dataclass
class Decision:
    strategy: str = "mha"
    by_size: dict[int, str] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    dropped: set[tuple[str, str]] = field(default_factory=set)  # (list attr, block path)
    dropped_owners: set[tuple[str, str]] = field(default_factory=set)
    alternatives: dict[str, dict[str, Any]] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)


def _attention_layers(flow: BlockFlow, info: AttentionInfo) -> dict[str, str]:
    """The projections of one attention and the row projections that consume its output."""
    inputs = info.q | info.k | info.v
    out = {p: flow.roles.styles[p] for p in inputs if p in flow.roles.styles}
    for consumer, producers in flow.roles.consumers.items():
        if producers & inputs and flow.roles.styles.get(consumer) in (
            ROWWISE,
            ROWWISE_REPLICATE_INPUT,
        ):
            out[consumer] = flow.roles.styles[consumer]
            for p in producers:  # gates multiplied into the attention output
                if flow.roles.styles.get(p) in (COLWISE, COLWISE_REPLICATE):
                    out[p] = flow.roles.styles[p]
    return out


def _replicate_variant(flow: BlockFlow, info: AttentionInfo) -> dict[str, str]:
    out: dict[str, str] = {}
    for path, style in _attention_layers(flow, info).items():
        if style in (ROWWISE, ROWWISE_REPLICATE_INPUT):
            out[path] = ROWWISE_REPLICATE_INPUT
        elif path in info.q or path not in (info.k | info.v):
            out[path] = COLWISE_REPLICATE
    return out


def decide(
    flows: list[tuple[BlockFlow, list[AttentionInfo]]], tp_sizes: tuple[int, ...]
) -> Decision:
    decision = Decision()
    sizes = sorted({s for s in tp_sizes if s > 1}) or [2]
    gqa = [(f, i) for f, infos in flows for i in infos if i.sharded and i.gqa]
    if not gqa:
        _decide_mha(flows, sizes, decision)
        _gqa_flags(flows, decision)
        return decision
    kv_values = []
    for _, info in gqa:
        kv = info.kv_heads.value if info.kv_heads is not None and info.kv_heads.known else None
        kv_values.append(kv if isinstance(kv, int) else None)
    for size in sizes:
        ok = all(kv is None or kv % size == 0 for kv in kv_values)
        decision.by_size[size] = "gqa_sharded" if ok else "gqa_ffn_only"
    decision.strategy = decision.by_size[sizes[0]]
    kv0 = kv_values[0]
    bad = [s for s, v in decision.by_size.items() if v == "gqa_ffn_only"]
    _gqa_reasons(gqa[0], kv0, bad, decision)
    _gqa_alternatives(gqa, kv0, bad, decision)
    _gqa_flags(flows, decision)
    return decision


def _decide_mha(
    flows: list[tuple[BlockFlow, list[AttentionInfo]]], sizes: list[int], decision: Decision
) -> None:
    """No sharded GQA attention: plain MHA sharding at every size."""
    fused = any(f.roles.fused_qkv for f, _ in flows)
    decision.by_size = {s: "mha" for s in sizes}
    if any(i.sharded for _, infos in flows for i in infos):
        decision.reasons.append(
            "MHA: query/key/value (and added-context) projections colwise, the output "
            "projection rowwise; shard_div_attr on the attributes the processor reads as "
            "per-rank sizes (see shardDivReasons / shardDivSkipped)"
        )
    if fused:
        decision.reasons.append(
            "fused QKV projection: its output is replicated (colwise with Replicate output, "
            "output projection rowwise with Replicate input, no shard_div_attr) so q/k/v are "
            "split at the right place; re-interleaving the weight per head group would allow "
            "real sharding"
        )


def _gqa_reasons(
    first: tuple[BlockFlow, AttentionInfo], kv0: int | None, bad: list[int], decision: Decision
) -> None:
    """Why the GQA strategy was chosen, and a warning when some TP sizes do not divide the
    key/value heads."""
    flow0, info0 = first
    heads = info0.heads.value if info0.heads is not None and info0.heads.known else None
    evidence = "; ".join(info0.gqa_evidence)
    decision.reasons.append(
        f"GQA in `{flow0.attr}.*.{info0.owner or '<block>'}` ({evidence}); "
        f"query heads {heads if heads is not None else '?'}, "
        f"key/value heads {kv0 if kv0 is not None else '?'}"
    )
    if kv0 is None:
        decision.reasons.append(
            "the key/value head count is not known statically: check num_kv_heads % tp == 0 "
            "(else use FFN-only or Replicate attention)"
        )
    if not bad:
        decision.reasons.append(
            "num_kv_heads is divisible by every TP size: shard Q/K/V colwise and divide both "
            "head counts"
        )
        return
    decision.reasons.append(
        f"num_kv_heads={kv0} is not divisible by TP size(s) {bad}: leave attention "
        f"unsharded and shard the FFN and modulation only (long sequences, ≳"
        f"{LONG_SEQUENCE_TOKENS} tokens), or replicate Q (gqa_replicate, one all-gather per "
        "layer, short sequences); benchmark both"
    )
    path, line = info0.calls[0].path, info0.calls[0].line
    decision.diagnostics.append(
        Diagnostic(
            "warning",
            "CDIT302",
            f"GQA: {kv0} key/value heads are not divisible by TP size(s) {bad}; "
            "use FFN-only TP for long sequences or the Replicate strategy for short ones "
            "(benchmark both; naive Q-only sharding garbles the output)",
            path,
            line,
        )
    )


def _gqa_alternatives(
    gqa: list[tuple[BlockFlow, AttentionInfo]],
    kv0: int | None,
    bad: list[int],
    decision: Decision,
) -> None:
    """The FFN-only and Replicate variants (offered when some size does not divide the heads
    or the head count is unknown); under FFN-only the attention layers are dropped."""
    ffn_only: dict[str, str] = {}
    replicate: dict[str, str] = {}
    for flow, info in gqa:
        prefix = f"{flow.attr}.*."
        layers = _attention_layers(flow, info)
        for path in layers:
            ffn_only[prefix + path] = "<removed>"
        for path, style in _replicate_variant(flow, info).items():
            replicate[prefix + path] = style
        if decision.strategy == "gqa_ffn_only":
            decision.dropped |= {(flow.attr, p) for p in layers}
            decision.dropped_owners.add((flow.attr, info.owner))
    if bad or kv0 is None:
        decision.alternatives["gqa_ffn_only"] = {"removeLayers": sorted(ffn_only)}
        decision.alternatives["gqa_replicate"] = {"layers": replicate, "shardDivAttrs": []}


def _gqa_flags(flows: list[tuple[BlockFlow, list[AttentionInfo]]], decision: Decision) -> None:
    seen: set[tuple[str, int]] = set()
    for _, infos in flows:
        for info in infos:
            if info.gqa_flag is None or info.gqa_flag[:2] in seen:
                continue
            seen.add(info.gqa_flag[:2])
            path, line, value = info.gqa_flag
            decision.diagnostics.append(
                Diagnostic(
                    "info",
                    "CDIT308",
                    f"attention is called with enable_gqa={value}: SDPA may fall back to a slow "
                    "kernel for GQA (with a mask only math/cuDNN accept it); benchmark against "
                    "repeating the K/V heads before the call (2.2x faster on one GQA model) or "
                    "the cuDNN SDPA backend",
                    path,
                    line,
                )
            )
