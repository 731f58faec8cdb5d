"""Assembles the `TensorParallelResult` from the per-block flows: layer plan keyed
`<list>.*.<path>`, `shard_div_attr` targets, strategy, rearrangements, distributed norms,
DTensor-unsafe kernels, divisibility pre-flight, ModelMixin requirement and component support."""

from __future__ import annotations

from typing import Any

from ..components import component_support
from ..model import Diagnostic
from ..parallel_input import ParallelContext
from ..sources import SourceFile
from . import kernels, preflight
from .attention import AttentionInfo, attentions, shard_attrs
from .plan import BlockFlow, run_blocks
from .result import TensorParallelResult
from .roles import COLWISE, classify
from .strategy import decide
from .trace import Node


def assemble(ctx: ParallelContext) -> TensorParallelResult:
    result = TensorParallelResult()
    diags: list[Diagnostic] = []
    flows = run_blocks(ctx)
    analyzed = [(flow, attentions(flow.trace, flow.roles)) for flow in flows]
    decision = decide(analyzed, ctx.tp_sizes)
    result.attention_strategy = decision.strategy
    result.strategy_by_size = decision.by_size
    result.strategy_reasons = decision.reasons
    result.alternatives = decision.alternatives
    diags += decision.diagnostics
    default_where = (ctx.path, ctx.transformer.node.lineno if ctx.transformer.node else 1)
    for flow, infos in analyzed:
        _layers(result, flow, decision.dropped)
        dropped = {owner for attr, owner in decision.dropped_owners if attr == flow.attr}
        choice = shard_attrs(flow.trace, flow.roles, infos)
        attrs = [a for a in choice.attrs if a[0] not in dropped]
        prefix = f"{flow.attr}.*."
        for path, attr in attrs:
            key = prefix + (f"{path}.{attr}" if path else attr)
            result.shard_div_attrs.append(key)
            result.shard_div_reasons[key] = choice.reasons.get((path, attr), "")
        skipped = [a for a in choice.skipped if a[0] not in dropped]
        for path, attr in skipped:
            key = prefix + (f"{path}.{attr}" if path else attr)
            result.shard_div_skipped[key] = choice.skipped[(path, attr)]
        whole = [a for a in skipped if "head" in a[1].lower()]  # whole heads per rank
        where = _block_where(flow, default_where)
        checks = preflight.check(flow, attrs, dropped, ctx.tp_sizes, where, whole)
        if any(d.code == "CDIT301" for d in checks):
            checks = [d for d in checks if d.code != "CDIT310"]
        diags += checks
        diags += _flow_diagnostics(result, flow, infos, where)
        _replicated_fallback(result, flow, dropped)
    diags += _kernels(result, ctx, flows)
    if not ctx.is_diffusers:
        result.requires_model_mixin = True
        diags.append(
            Diagnostic(
                "warning",
                "CDIT307",
                f"{ctx.transformer.name} does not subclass diffusers ModelMixin: cache-dit's "
                "tensor parallelism asserts it (subclass ModelMixin, or parallelize the blocks "
                "with torch.distributed.tensor.parallel directly)",
                *default_where,
            )
        )
    components, notes = component_support(ctx.model_index)
    result.components = components
    for severity, message in notes:
        diags.append(Diagnostic(severity, "CDIT311", message, *default_where))  # type: ignore[arg-type]
    result.warnings = _dedupe(diags)
    return result


def _replicated_fallback(result: TensorParallelResult, flow: BlockFlow, dropped: set[str]) -> None:
    """For a projection packing q/k/v and an MLP branch: the list's plan without the weight
    rearrangement (that projection's output replicated, its consumer taking a replicated
    input), so a planner that does not interleave the rows still has a correct plan."""
    prefix = f"{flow.attr}.*."
    entries = [
        e
        for e in result.weight_rearrangement
        if e["kind"] == "fused_qkv_mlp" and e["layer"].startswith(prefix)
    ]
    if not entries:
        return
    roles = classify(flow.trace, replicate_fused_mlp=True)
    choice = shard_attrs(flow.trace, roles, attentions(flow.trace, roles))
    fallback = {
        "layers": {prefix + path: style for path, style in sorted(roles.styles.items())},
        "shardDivAttrs": [
            prefix + (f"{path}.{attr}" if path else attr)
            for path, attr in choice.attrs
            if path not in dropped
        ],
        "weightRearrangement": [prefix + r.path for r in roles.rearrangements],
    }
    for entry in entries:
        entry["fallback"] = fallback


def _layers(result: TensorParallelResult, flow: BlockFlow, dropped: set[tuple[str, str]]) -> None:
    prefix = f"{flow.attr}.*."
    for path, style in flow.roles.styles.items():
        if (flow.attr, path) in dropped:
            continue
        key = prefix + path
        result.layers[key] = style
        result.layer_reasons[key] = flow.roles.reasons.get(path, "")
        node = flow.trace.linear_nodes.get(path)
        conds = [c for c in (flow.cond, node.cond if node is not None else None) if c]
        if conds:
            absent = flow.absent or (node is not None and node.default_absent)
            result.conditional_layers[key] = {
                "style": style,
                "condition": " and ".join(conds),
                "defaultConfig": not absent,
            }


def _block_where(flow: BlockFlow, default: tuple[str, int]) -> tuple[str, int]:
    block = flow.block
    if block is not None and block.cls is not None and block.cls.source is not None:
        node = block.cls.node
        return str(block.cls.source.path), node.lineno if node is not None else 1
    return default


def _flow_diagnostics(
    result: TensorParallelResult,
    flow: BlockFlow,
    infos: list[AttentionInfo],
    where: tuple[str, int],
) -> list[Diagnostic]:
    prefix = f"{flow.attr}.*."
    out = _status_diagnostics(flow, where)
    out += _fused_qkv_diagnostics(flow, prefix)
    out += _grouped_diagnostics(flow, prefix)
    out += _per_head_diagnostics(flow, prefix)
    out += _whole_width_diagnostics(flow, prefix)
    out += _rearrangement_diagnostics(result, flow, prefix)
    out += _norm_diagnostics(result, flow, prefix)
    _record_attention(result, flow, infos, prefix)
    return out


def _status_diagnostics(flow: BlockFlow, where: tuple[str, int]) -> list[Diagnostic]:
    """An analysis that stopped early, or a list with no projection pair to shard."""
    out: list[Diagnostic] = []
    if flow.error:
        out.append(
            Diagnostic(
                "warning",
                "CDIT312",
                f"tensor-parallel analysis of `{flow.attr}` stopped early ({flow.error}); "
                "the plan may be partial",
                *where,
            )
        )
    if not flow.roles.styles and flow.cached:
        out.append(
            Diagnostic(
                "info",
                "CDIT309",
                f"no projection pair to shard was found in `{flow.attr}` "
                "(no Linear feeds an attention call or a nonlinearity into another Linear)",
                *where,
            )
        )
    return out


def _fused_qkv_diagnostics(flow: BlockFlow, prefix: str) -> list[Diagnostic]:
    return [
        Diagnostic(
            "warning",
            "CDIT303",
            f"{prefix}{path} is a fused QKV projection (split into q/k/v of one attention "
            "call): plain ColwiseParallel would split it at the wrong place; the plan "
            "replicates its output (re-interleave the weight per head group to shard it)",
            *(flow.trace.linear_lines.get(path) or (call.path, call.line)),
        )
        for path, call in flow.roles.fused_qkv.items()
    ]


def _grouped_diagnostics(flow: BlockFlow, prefix: str) -> list[Diagnostic]:
    return [
        Diagnostic(
            "warning",
            "CDIT303",
            f"{prefix}{path}'s output is split into groups ahead of its heads (`{event.detail}`): "
            "plain ColwiseParallel would give each rank whole groups instead of a share of every "
            "group's heads; the plan replicates its output",
            event.path,
            event.line,
        )
        for path, event in flow.roles.grouped.items()
        if path not in flow.roles.fused_qkv
    ]


def _per_head_diagnostics(flow: BlockFlow, prefix: str) -> list[Diagnostic]:
    return [
        Diagnostic(
            "warning",
            "CDIT303",
            f"{prefix}{path} feeds an attention that holds `{event.detail}` per head: sharding "
            "its heads would leave that parameter whole beside each rank's share of the heads; "
            "the plan replicates its output",
            event.path,
            event.line,
        )
        for path, event in flow.roles.per_head.items()
    ] + [
        Diagnostic(
            "warning",
            "CDIT303",
            f"{prefix}{path} holds `{event.detail.split('|')[0]}` per head when "
            f"`{event.detail.split('|', 1)[1]}`: the plan shards its heads, which fits only the "
            "configurations without it (with it, that parameter stays whole beside each rank's "
            "share of the heads)",
            event.path,
            event.line,
        )
        for path, event in flow.roles.per_head_conditional.items()
    ]


def _whole_width_diagnostics(flow: BlockFlow, prefix: str) -> list[Diagnostic]:
    by_event: dict[tuple[str, int, str], list[str]] = {}
    for path, event in flow.roles.whole_width.items():
        by_event.setdefault((event.path, event.line, event.detail), []).append(prefix + path)
    return [
        Diagnostic(
            "warning",
            "CDIT313",
            f"`{text}` gives the output of {', '.join(sorted(paths))} the full width read from "
            "an unsharded tensor's shape: sharded, it would not fit the per-rank width, so the "
            "plan replicates these projections (their attention or MLP runs whole on every "
            "rank); `-1` for that size would let them be sharded",
            path,
            line,
        )
        for (path, line, text), paths in by_event.items()
    ]


def _rearrangement_diagnostics(
    result: TensorParallelResult, flow: BlockFlow, prefix: str
) -> list[Diagnostic]:
    """Weights to rearrange before sharding: recorded on the result, one info each."""
    out: list[Diagnostic] = []
    for item in flow.roles.rearrangements:
        entry: dict[str, Any] = {
            "layer": prefix + item.path,
            "kind": item.kind,
            "reason": item.message,
        }
        if item.producers:
            entry["producers"] = [prefix + p for p in item.producers]
        result.weight_rearrangement.append(entry)
        out.append(Diagnostic("info", "CDIT304", prefix + item.message, *item.where))
    return out


def _norm_diagnostics(
    result: TensorParallelResult, flow: BlockFlow, prefix: str
) -> list[Diagnostic]:
    """Norms over the whole sharded width (across heads): recorded on the result, one warning
    per line."""
    sharded = flow.roles.sharded()
    by_line: dict[tuple[str, int], list[str]] = {}
    for event in flow.trace.norms:
        kind, _, module = event.detail.partition(":")
        if kind != "across-heads" or not event.linears & sharded:
            continue
        name = prefix + module if "." in module or module in _children(flow.block) else module
        entry = {"module": name, "projections": sorted(prefix + p for p in event.linears)}
        if entry not in result.distributed_norms:
            result.distributed_norms.append(entry)
        names = by_line.setdefault((event.path, event.line), [])
        if name not in names:
            names.append(name)
    return [
        Diagnostic(
            "warning",
            "CDIT305",
            f"{', '.join(names)} normalize(s) the whole sharded width (across heads): "
            "replace with a distributed RMSNorm (chunked weight, all-reduce of the mean "
            "square over the TP group) before sharding",
            path,
            line,
        )
        for (path, line), names in by_line.items()
    ]


def _record_attention(
    result: TensorParallelResult, flow: BlockFlow, infos: list[AttentionInfo], prefix: str
) -> None:
    for info in infos:
        result.attention.append(
            {
                "module": prefix + info.owner if info.owner else flow.attr + ".*",
                "sharded": info.sharded and info.owner not in flow.roles.replicated_owners,
                "query": sorted(prefix + p for p in info.q),
                "key": sorted(prefix + p for p in info.k),
                "value": sorted(prefix + p for p in info.v),
                "headsAttr": info.heads_attr,
                "heads": info.heads.value if info.heads is not None and info.heads.known else None,
                "kvHeadsAttr": info.kv_attr,
                "kvHeads": info.kv_heads.value
                if info.kv_heads is not None and info.kv_heads.known
                else None,
                "gqa": info.gqa_evidence,
            }
        )


def _children(block: Node | None) -> set[str]:
    return set(block.children) if block is not None else set()


def _kernels(
    result: TensorParallelResult, ctx: ParallelContext, flows: list[BlockFlow]
) -> list[Diagnostic]:
    sources: list[SourceFile] = [ctx.source]
    found = []
    for flow in flows:
        found += kernels.from_events(flow.trace.unsafe)
        sources += flow.trace.sources.values()
    found += kernels.from_sources(sources)
    out = []
    for kernel in kernels.dedupe(found):
        result.dtensor_unsafe.append(kernel.to_json())
        out.append(Diagnostic("warning", "CDIT306", kernel.message, kernel.path, kernel.line))
    return out


def _dedupe(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[str, str]] = set()
    out = []
    for d in diags:
        if (d.code, d.message) not in seen:
            seen.add((d.code, d.message))
            out.append(d)
    return out


__all__ = ["COLWISE", "assemble"]
