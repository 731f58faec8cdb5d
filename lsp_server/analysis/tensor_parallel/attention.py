"""Facts about each attention call of a block, read from the processor's data flow.

* `shard_div_attr` targets: the module attributes used as the outer factor when a sharded
  projection is reshaped into heads (`unflatten(-1, (attn.heads, -1))`, `view(b, s, attn.heads,
  d)`, einops `"(h d)"` with `h=attn.heads`) or as split sizes of a sharded tensor's last dim
  (`split(x, [3 * attn.inner_dim, attn.mlp_hidden_dim])`). A processor that reshapes with
  `(-1, attn.head_dim)` is TP-agnostic; the module's head count (`*heads` attributes) is still
  divided so that other code reading it sees the local value.
* GQA: keys/values reshaped with another head-count attribute than queries, a key projection
  narrower than the query projection, K/V heads repeated before the call, or `enable_gqa=`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .roles import COLWISE, Roles
from .trace import AttnCall, Node, Trace
from .values import Scalar

_NOT_SIZES = ("factor", "ratio", "mult", "scale", "eps", "dropout", "theta")
_PER_HEAD = ("head_dim", "dim_head", "head_size", "d_head", "head_channels", "attention_head_dim")


@dataclass
class AttentionInfo:
    owner: str  # block-relative module path ("" = the block itself)
    node: Node | None
    calls: list[AttnCall]
    q: set[str]
    k: set[str]
    v: set[str]
    sharded: bool
    heads_attr: str | None = None
    heads: Scalar | None = None
    kv_attr: str | None = None
    kv_heads: Scalar | None = None
    gqa_evidence: list[str] = field(default_factory=list)
    gqa_flag: tuple[str, int, str] | None = None  # (path, line, value) of `enable_gqa=`

    @property
    def gqa(self) -> bool:
        return bool(self.gqa_evidence)


def size_attr(name: str) -> bool:
    low = name.lower()
    return not any(w in low for w in _NOT_SIZES) and low not in _PER_HEAD


def attentions(trace: Trace, roles: Roles) -> list[AttentionInfo]:
    by_owner: dict[str, AttentionInfo] = {}
    sharded = roles.sharded()
    for call in trace.attn_calls:
        owner = call.owner.path or "" if call.owner is not None else ""
        info = by_owner.get(owner)
        if info is None:
            info = AttentionInfo(owner, call.owner, [], set(), set(), set(), False)
            by_owner[owner] = info
        info.calls.append(call)
        info.q |= call.q.linears()
        info.k |= call.k.linears()
        info.v |= call.v.linears()
        if (call.q.linears() | call.k.linears() | call.v.linears()) & sharded:
            info.sharded = True
        if call.gqa_flag is not None and call.gqa_flag.value is not False:
            value = "True" if call.gqa_flag.value is True else "an expression"
            info.gqa_flag = (call.path, call.line, value)
    for info in by_owner.values():
        _heads(info, trace)
    return list(by_owner.values())


def _heads(info: AttentionInfo, trace: Trace) -> None:
    q_attrs: dict[str, Any] = {}
    kv_attrs: dict[str, Any] = {}
    for use in trace.shapes:
        if use.kind != "reshape":
            continue
        for path, attr in use.attrs:
            if path != info.owner or "head" not in attr.lower() or not size_attr(attr):
                continue
            if use.linears & info.q and not use.linears & (info.k | info.v):
                q_attrs[attr] = path
            elif use.linears & (info.k | info.v) and not use.linears & info.q:
                kv_attrs[attr] = path
    node = info.node
    if q_attrs:
        info.heads_attr = next(iter(q_attrs))
    elif node is not None:
        info.heads_attr = next((a for a in node.attrs if a.lower().endswith("heads")), None)
    if node is not None and info.heads_attr:
        info.heads = _scalar(node.attrs.get(info.heads_attr))
    extra = [a for a in kv_attrs if a not in q_attrs]
    if extra:
        info.kv_attr = extra[0]
        info.kv_heads = _scalar(node.attrs.get(extra[0])) if node is not None else None
        same = (
            info.kv_heads is not None
            and info.heads is not None
            and info.kv_heads.known
            and info.kv_heads.value == info.heads.value
        )
        if not same:
            info.gqa_evidence.append(
                f"keys/values are reshaped with `{extra[0]}`, queries with `{info.heads_attr}`"
            )
    _widths(info, trace)
    kv = info.k | info.v
    if any(e.linears & kv and not e.linears & info.q for e in trace.repeats):
        info.gqa_evidence.append("key/value heads are repeated before the attention call")
    if info.gqa_flag is not None:
        info.gqa_evidence.append(f"the attention call passes enable_gqa={info.gqa_flag[2]}")


def _widths(info: AttentionInfo, trace: Trace) -> None:
    """A key projection narrower than the query projection (diffusers `kv_heads=`)."""
    if info.q & info.k:
        return
    q_out = _out(trace, info.q)
    k_out = _out(trace, info.k)
    if q_out is None or k_out is None or k_out >= q_out or k_out <= 0:
        return
    info.gqa_evidence.append(f"the key projection is narrower ({k_out}) than the query ({q_out})")
    heads = info.heads.value if info.heads is not None and info.heads.known else None
    if info.kv_heads is None and isinstance(heads, int) and (heads * k_out) % q_out == 0:
        var = bool(info.heads.var) if info.heads is not None else True
        info.kv_heads = Scalar(heads * k_out // q_out, var)


def _out(trace: Trace, paths: set[str]) -> int | None:
    for path in sorted(paths):
        node = trace.linear_nodes.get(path)
        if node is not None and node.out_features is not None:
            value = node.out_features.value
            if isinstance(value, int):
                return value
    return None


def _scalar(value: Any) -> Scalar | None:
    return value if isinstance(value, Scalar) else None


def shard_attrs(trace: Trace, roles: Roles, infos: list[AttentionInfo]) -> list[tuple[str, str]]:
    """(module path, attr) pairs to divide by the TP size, in a stable order."""
    sharded = {p for p, s in roles.styles.items() if s == COLWISE}
    out: dict[tuple[str, str], None] = {}
    replicated = roles.replicated_owners
    for use in trace.shapes:
        if not use.linears & sharded:
            continue
        for path, attr in sorted(use.attrs):
            if path in replicated or not size_attr(attr):
                continue
            out.setdefault((path, attr), None)
    for info in infos:
        if not info.sharded or info.owner in replicated or info.node is None:
            continue
        if any(p == info.owner and "head" in a.lower() for p, a in out):
            continue
        for attr, value in info.node.attrs.items():
            if attr.lower().endswith("heads") and isinstance(value, Scalar):
                out.setdefault((info.owner, attr), None)
    return list(out)
