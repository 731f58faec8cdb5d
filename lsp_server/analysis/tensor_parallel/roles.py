"""Tensor-parallel roles of a block's Linear layers, decided from the recorded data flow.

* A Linear whose input is computed from other projections through an attention call or a
  nonlinearity (activation, gating product) consumes a sharded tensor: RowwiseParallel. The
  projections feeding it are ColwiseParallel (Q/K/V and added-context projections into the
  attention call, FFN up/gate projections, attention gates).
* A Linear whose output modulates a normalized stream (chunked shift/scale/gate, broadcast over
  tokens) and is not part of such a pair: ColwiseParallel(output_layouts=Replicate()).
* A projection split into q/k/v of one attention call is a fused QKV: the safe layout replicates
  its output (`colwise_replicate`, consumer `rowwise_replicate_input`, no `shard_div_attr`) unless
  it also feeds an MLP branch (fused QKV+MLP), which is sharded after a per-rank weight
  re-interleave. A consumer fed by `cat([attn_out, mlp_out], -1)` needs its input columns regrouped;
  a projection chunked in two and gated (`silu(a) * b`) needs its rows interleaved.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .per_head_params import per_head_parameter
from .trace import AttnCall, Event, Node, Trace
from .values import ACT, ATTN, CATLAST

COLWISE, ROWWISE = "colwise", "rowwise"
COLWISE_REPLICATE, ROWWISE_REPLICATE_INPUT = "colwise_replicate", "rowwise_replicate_input"


@dataclass
class Rearrangement:
    path: str
    kind: str  # fused_out_down | packed_gated | fused_qkv_mlp | fused_qkv
    message: str
    where: tuple[str, int]
    producers: tuple[str, ...] = ()  # fused_out_down: the projections whose outputs it joins


@dataclass
class Roles:
    styles: dict[str, str] = field(default_factory=dict)  # block-relative path -> style
    reasons: dict[str, str] = field(default_factory=dict)
    consumers: dict[str, set[str]] = field(default_factory=dict)  # rowwise -> its producers
    rearrangements: list[Rearrangement] = field(default_factory=list)
    replicated_owners: set[str] = field(default_factory=set)  # attention modules not sharded
    fused_qkv: dict[str, AttnCall] = field(default_factory=dict)
    whole_width: dict[str, Event] = field(default_factory=dict)  # replicated: a shape's width
    grouped: dict[str, Event] = field(default_factory=dict)  # replicated: groups of heads
    per_head: dict[str, Event] = field(default_factory=dict)  # replicated: per-head parameters
    # attention path -> a per-head parameter built only under a condition (warned about)
    per_head_conditional: dict[str, Event] = field(default_factory=dict)

    def sharded(self) -> set[str]:
        return {p for p, s in self.styles.items() if s == COLWISE}


def classify(trace: Trace, replicate_fused_mlp: bool = False) -> Roles:
    """The layer roles of one block. A projection packing q/k/v and an MLP branch is sharded
    with a weight rearrangement (`fused_qkv_mlp`); `replicate_fused_mlp`: the plan without it
    (the projection's output replicated, like a fused QKV)."""
    roles = Roles()
    mods = set(trace.modulations)
    for path, value in trace.linear_inputs.items():
        srcs = {(p, via) for p, via in value.srcs if p not in mods and p != path}
        if not any(via in (ACT, ATTN) for _, via in srcs):
            continue
        if roles.styles.get(path) == COLWISE:
            continue  # already the producer of an earlier pair (deeper MLP): left replicated
        producers = {p for p, _ in srcs if roles.styles.get(p) != ROWWISE}
        if not producers:
            continue
        roles.styles[path] = ROWWISE
        roles.consumers[path] = producers
        through = "attention" if any(v == ATTN for _, v in srcs) else "a nonlinearity"
        roles.reasons[path] = f"consumes {', '.join(sorted(producers))} through {through}"
        for p in producers:
            roles.styles[p] = COLWISE
            roles.reasons[p] = f"projects into {path} ({through})"
        if CATLAST in value.flags:
            where = trace.linear_lines.get(path, ("", 0))
            roles.rearrangements.append(
                Rearrangement(
                    path,
                    "fused_out_down",
                    f"{path} consumes a last-dim concatenation of several sharded branches: "
                    "regroup its weight columns per rank before RowwiseParallel",
                    where,
                    tuple(sorted(producers)),
                )
            )
    for path in trace.modulations:
        if path in trace.linear_inputs and path not in roles.styles:
            roles.styles[path] = COLWISE_REPLICATE
            roles.reasons[path] = "modulation: its output scales/shifts/gates a normalized stream"
    _fused(trace, roles, replicate_fused_mlp)
    _grouped(trace, roles)
    _per_head(trace, roles)
    _whole_widths(trace, roles)
    _packed(trace, roles)
    return roles


def _fused(trace: Trace, roles: Roles, replicate_fused_mlp: bool) -> None:
    found: dict[str, AttnCall] = {}
    for call in trace.attn_calls:
        args = [call.q.linears(), call.k.linears(), call.v.linears()]
        for p in sorted(set().union(*args)):
            if roles.styles.get(p) == COLWISE and sum(p in a for a in args) >= 2:
                found.setdefault(p, call)
    for p, call in found.items():
        consumers = [r for r, prods in roles.consumers.items() if p in prods]
        via = {v for r in consumers for q, v in trace.linear_inputs[r].srcs if q == p}
        where = trace.linear_lines.get(p, ("", 0))
        if ACT in via and not replicate_fused_mlp:
            roles.rearrangements.append(
                Rearrangement(
                    p,
                    "fused_qkv_mlp",
                    f"{p} packs q/k/v and an MLP branch: interleave its output rows per rank "
                    "(per q/k/v and gate/up group) before ColwiseParallel",
                    where,
                )
            )
            continue
        roles.fused_qkv[p] = call
        reason = (
            "fused QKV and an MLP branch (one projection split into q/k/v and the MLP input): "
            "replicated output (its rows are not interleaved per rank)"
            if ACT in via
            else "fused QKV (one projection split into q/k/v): replicated output"
        )
        if call.owner is not None:
            roles.replicated_owners.add(call.owner.path or "")
        _replicate(roles, p, reason, f"consumes the attention of the replicated fused QKV {p}")


def _replicate(roles: Roles, path: str, reason: str, consumer_reason: str) -> None:
    """`path`'s output replicated; its consumers take a replicated input, and their other
    producers replicate their outputs too."""
    roles.styles[path] = COLWISE_REPLICATE
    roles.reasons[path] = reason
    for r in [r for r, prods in roles.consumers.items() if path in prods]:
        roles.styles[r] = ROWWISE_REPLICATE_INPUT
        roles.reasons[r] = consumer_reason
        roles.rearrangements = [x for x in roles.rearrangements if x.path != r]
        for other in roles.consumers.get(r, ()):
            if roles.styles.get(other) == COLWISE:
                roles.styles[other] = COLWISE_REPLICATE
                roles.reasons[other] = f"feeds {r}, whose input is replicated"


def _grouped(trace: Trace, roles: Roles) -> None:
    """A sharded projection whose output is split into groups ahead of its heads (two query
    maps of a differential attention, `reshape(b, n, 2, heads, -1)`): a column shard would hold
    whole groups, not a share of every group's heads. Replicated (correct on every TP size),
    like a fused QKV; its attention module is not sharded."""
    for event in trace.grouped:
        for p in sorted(event.linears & roles.sharded()):
            roles.grouped[p] = event
            _replicate(
                roles,
                p,
                f"replicated output: `{event.detail}` splits its columns into groups of heads",
                f"consumes {p}, whose output is replicated (groups of heads)",
            )
            for call in trace.attn_calls:
                if p in call.q.linears() | call.k.linears() | call.v.linears():
                    roles.replicated_owners.add(owner_of(call))


def _per_head(trace: Trace, roles: Roles) -> None:
    """An attention module holding a parameter per head (`per_head_params`): its heads cannot
    be sharded by the projections alone; its projections are replicated (correct on every TP
    size), the rest of the block still sharded."""
    for call in trace.attn_calls:
        owner = call.owner
        node = owner.cls.node if isinstance(owner, Node) and owner.cls is not None else None
        if not isinstance(node, ast.ClassDef):
            continue
        path = owner.path or ""
        linears = call.q.linears() | call.k.linears() | call.v.linears()
        attrs = {
            attr
            for use in trace.shapes
            if use.kind == "reshape" and use.linears & linears
            for where, attr in use.attrs
            if where == path
        }
        found = per_head_parameter(node, attrs)
        if found is None:
            continue
        where = (str(owner.cls.source.path) if owner.cls.source else "", found[1])
        if found[2] is not None:  # another configuration than the one planned: said, not acted on
            roles.per_head_conditional[path] = Event(frozenset(), *where, f"{found[0]}|{found[2]}")
            continue
        for p in sorted(linears & roles.sharded()):
            roles.per_head[p] = Event(frozenset({p}), *where, found[0])
            _replicate(
                roles,
                p,
                f"replicated output: its attention holds `{found[0]}` per head",
                f"consumes {p}, whose attention holds a parameter per head",
            )
        roles.replicated_owners.add(path)


def _whole_widths(trace: Trace, roles: Roles) -> None:
    """A sharded projection's output reshaped or split to the full width of an unsharded
    tensor (`o.reshape(b, n, d)` after `b, n, d = x.shape`) would not fit the per-rank width:
    the pair is replicated (correct on every TP size; the projections are not sharded)."""
    for event in trace.whole_widths:
        for p in sorted(event.linears & roles.sharded()):
            roles.whole_width[p] = event
            _replicate(
                roles,
                p,
                f"replicated output: `{event.detail}` gives its output the full width read "
                "from an unsharded tensor's shape",
                f"consumes {p}, whose output is replicated (a size read from a shape)",
            )
            for call in trace.attn_calls:
                if p in call.q.linears() | call.k.linears() | call.v.linears():
                    roles.replicated_owners.add(owner_of(call))


def _packed(trace: Trace, roles: Roles) -> None:
    seen: set[str] = set()
    for event in trace.chunks:
        for p in event.linears:
            if p in seen or roles.styles.get(p) != COLWISE or event.detail != "2":
                continue
            if any(r.path == p for r in roles.rearrangements):
                continue
            if _feeds_attention_only(trace, roles, p):
                continue  # q/k/v halves are not a gate and an up projection
            seen.add(p)
            roles.rearrangements.append(
                Rearrangement(
                    p,
                    "packed_gated",
                    f"{p} packs two halves that are split and combined (gate * up): interleave "
                    "its output rows per rank before ColwiseParallel",
                    (event.path, event.line),
                )
            )


def _feeds_attention_only(trace: Trace, roles: Roles, path: str) -> bool:
    vias = {
        via
        for consumer, producers in roles.consumers.items()
        if path in producers
        for src, via in trace.linear_inputs[consumer].srcs
        if src == path
    }
    return vias == {ATTN}


def owner_of(call: AttnCall) -> str:
    return call.owner.path or "" if isinstance(call.owner, Node) else ""


__all__ = ["Event", "Roles", "classify", "owner_of"]
