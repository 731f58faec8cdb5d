"""Facts about each attention call of a block, read from the processor's data flow.

* `shard_div_attr` targets, decided from how each size of a shape operation on a column-sharded
  projection scales with the module attributes it is computed from (`trace.SizeUse`):
  - a COUNT size must become the per-rank value: the head count splitting the last dim
    (`unflatten(-1, (attn.heads, -1))`, `view(b, -1, attn.heads, head_dim)`, einops `"(h d)"`
    with `h=attn.heads`), the width of a merge back (`reshape(b, -1, attn.heads * head_dim)`),
    split sizes of the last dim (`split(x, [3 * attn.inner_dim, attn.mlp_hidden_dim])`), a head
    count passed to the attention call;
  - a PER_HEAD size must not change: `unflatten(-1, (-1, head_dim))` with
    `head_dim = attn.inner_dim // attn.heads` allows dividing both attributes or neither, never
    one of them (that would change head_dim).
  The smallest set of attributes meeting every constraint is divided. A size whose scaling is not
  known (computed from a tensor's shape) keeps the conservative reading: every attribute of a
  COUNT size is divided, a PER_HEAD size constrains nothing.
* A head count the processor never reads as a size (it reshapes with `(-1, attn.head_dim)`: `-1`
  absorbs the head count, the processor is TP-agnostic) needs no division. It is still divided
  when that breaks no constraint, so that the module's count equals each rank's local head count
  for other code that reads it (and `shard_div_attr` checks that every rank holds whole heads);
  it is left alone when it is read in a ratio with an unsharded size (`attn.inner_dim //
  attn.heads`), which dividing it alone would break. Every choice carries a reason citing the
  code (`ShardChoice`).
* GQA: keys/values reshaped with another head-count attribute than queries, a key projection
  narrower than the query projection, K/V heads repeated before the call, or `enable_gqa=`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from pathlib import PurePath
from typing import Any

from .roles import COLWISE, Roles
from .trace import COUNT, AttnCall, Node, ShapeUse, SizeUse, Trace
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


Key = tuple[str, str]  # (module path, attr)
MAX_SEARCH = 12  # free attributes searched exhaustively; more fall back to the direct reading


@dataclass
class ShardChoice:
    """The attributes to divide (in a stable order) with a reason each, and the attributes of a
    per-head size deliberately left undivided, with the reason."""

    attrs: list[Key] = field(default_factory=list)
    reasons: dict[Key, str] = field(default_factory=dict)
    skipped: dict[Key, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Constraint:
    use: ShapeUse
    size: SizeUse
    terms: tuple[tuple[Key, int], ...]  # exponents of the attributes that may be divided

    def met(self, chosen: set[Key]) -> bool:
        total = sum(e for k, e in self.terms if k in chosen)
        return total == (1 if self.size.role == COUNT else 0)


def shard_attrs(trace: Trace, roles: Roles, infos: list[AttentionInfo]) -> ShardChoice:
    """The `shard_div_attr` targets of one block (see the module docstring for the rule)."""
    sharded = {p for p, s in roles.styles.items() if s == COLWISE}
    replicated = roles.replicated_owners

    def free(key: Key) -> bool:
        return key[0] not in replicated and size_attr(key[1])

    order: dict[Key, None] = {}
    forced: dict[Key, ShapeUse] = {}
    constraints: list[_Constraint] = []
    uses = [u for u in trace.shapes if u.linears & sharded]
    for use in uses:
        for size in use.sizes:
            keys = [k for k in sorted(size.deps) if free(k)]
            if not keys:
                continue
            if size.mono is None:
                if size.role == COUNT:  # scaling unknown: the direct (conservative) reading
                    for key in keys:
                        forced.setdefault(key, use)
                        order.setdefault(key, None)
                continue
            terms = tuple((k, e) for k, e in size.mono if free(k))
            if terms:
                constraints.append(_Constraint(use, size, terms))
                for key, _ in terms:
                    order.setdefault(key, None)
    chosen = _solve(list(order), set(forced), constraints)
    out = ShardChoice()
    for key in order:
        if key in chosen:
            out.attrs.append(key)
            out.reasons[key] = _reason(key, forced.get(key), constraints, chosen)
    _head_counts(out, chosen, constraints, infos, uses, replicated)
    _ratios(out, chosen, constraints, uses)
    return out


def _violations(chosen: set[Key], constraints: list[_Constraint]) -> int:
    return sum(1 for c in constraints if not c.met(chosen))


def _solve(candidates: list[Key], forced: set[Key], constraints: list[_Constraint]) -> set[Key]:
    """The smallest superset of `forced` meeting the most constraints (earlier candidates first
    on ties)."""
    free = [k for k in candidates if k not in forced]
    if len(free) > MAX_SEARCH:
        direct = {
            c.terms[0][0]
            for c in constraints
            if c.size.role == COUNT and len(c.terms) == 1 and c.terms[0][1] == 1
        }
        return forced | direct
    best: tuple[int, int] | None = None
    best_set: set[Key] = set(forced)
    for r in range(len(free) + 1):
        for combo in combinations(free, r):
            chosen = forced | set(combo)
            score = (_violations(chosen, constraints), r)
            if best is None or score < best:
                best, best_set = score, chosen
        if best is not None and best[0] == 0:
            break
    return best_set


def _head_counts(
    out: ShardChoice,
    chosen: set[Key],
    constraints: list[_Constraint],
    infos: list[AttentionInfo],
    uses: list[ShapeUse],
    replicated: set[str],
) -> None:
    """Head counts of sharded attentions that no constraint chose, divided for consistency where
    that breaks no constraint."""
    base = _violations(chosen, constraints)
    for info in infos:
        if not info.sharded or info.owner in replicated or info.node is None:
            continue
        if any(p == info.owner and "head" in a.lower() for p, a in out.attrs):
            continue
        absorbed = _absorbed(info.q | info.k | info.v, uses)
        for attr, value in info.node.attrs.items():
            if not (attr.lower().endswith("heads") and isinstance(value, Scalar)):
                continue
            key = (info.owner, attr)
            if not size_attr(attr) or _violations(chosen | {key}, constraints) > base:
                continue
            chosen.add(key)
            out.attrs.append(key)
            name = _attr_name(key)
            how = (
                f"{_cite(absorbed)} lets -1 absorb the head count"
                if absorbed is not None
                else "no reshape of the projections by it was seen"
            )
            out.reasons[key] = (
                f"`{name}` is not read as a per-rank size ({how}): not needed by the "
                f"processor; divided so `{name}` equals each rank's local head count for "
                "other code that reads it, and so shard_div_attr checks that every rank "
                "holds whole heads"
            )


def _ratios(
    out: ShardChoice, chosen: set[Key], constraints: list[_Constraint], uses: list[ShapeUse]
) -> None:
    """Attributes of a per-head size left undivided because dividing one alone would change it."""
    base = _violations(chosen, constraints)
    for c in constraints:
        if c.size.role == COUNT:
            continue
        for key, _ in c.terms:
            if key in chosen or key in out.skipped:
                continue
            if _violations(chosen | {key}, constraints) <= base:
                continue
            absorbed = _absorbed(set(c.use.linears), uses)
            if absorbed is c.use:
                how = ", where -1 absorbs the head count"
            elif absorbed is not None:
                how = f"; {_cite(absorbed)} lets -1 absorb the head count"
            else:
                how = ""
            others = ", ".join(f"`{_attr_name(k)}`" for k, _ in c.terms if k != key)
            whole = f" (each rank still needs whole heads: {key[1]} % tp == 0)"
            out.skipped[key] = (
                f"`{_attr_name(key)}` is read in the per-head size `{_render(c.terms)}` of "
                f"{_cite(c.use)}{how}: dividing it alone would change the head size, so neither "
                f"it nor {others or 'the other factor'} is divided"
                + (whole if "head" in key[1].lower() else "")
            )


def _absorbed(projections: set[str], uses: list[ShapeUse]) -> ShapeUse | None:
    """A reshape of one of `projections` that leaves the head count to -1."""
    return next((u for u in uses if u.absorbed and u.linears & projections), None)


def _reason(
    key: Key, forced: ShapeUse | None, constraints: list[_Constraint], chosen: set[Key]
) -> str:
    name = _attr_name(key)
    if forced is not None:
        return (
            f"{_cite(forced)} sizes a column-sharded projection with `{name}` "
            f"({_kind(forced)}): divided so each rank uses its local value"
        )
    for c in constraints:
        if c.size.role == COUNT and any(k == key for k, _ in c.terms):
            return (
                f"{_cite(c.use)} uses a size equal to `{_render(c.terms)}` as a per-rank size "
                f"({_kind(c.use)}): divided so each rank uses its local value"
            )
    for c in constraints:
        if any(k == key for k, _ in c.terms):
            partners = [_attr_name(k) for k, _ in c.terms if k != key and k in chosen]
            return (
                f"{_cite(c.use)} derives the per-head size `{_render(c.terms)}`: divided "
                f"together with `{', '.join(partners) or '?'}` so the head size stays the same"
            )
    return f"`{name}` sizes a column-sharded projection"


def _kind(use: ShapeUse) -> str:
    if use.kind == "split":
        return "split sizes of the sharded last dim"
    if use.kind == "attention":
        return "head count passed to the attention call"
    return "head count or width of the sharded last dim"


def _attr_name(key: Key) -> str:
    return f"{key[0]}.{key[1]}" if key[0] else key[1]


def _render(terms: tuple[tuple[Key, int], ...]) -> str:
    """`attn.inner_dim // attn.heads` for {inner_dim: 1, heads: -1}."""
    num = [_attr_name(k) for k, e in terms for _ in range(e) if e > 0]
    den = [_attr_name(k) for k, e in terms for _ in range(-e) if e < 0]
    text = " * ".join(num) or "1"
    return text + "".join(f" // {d}" for d in den)


def _cite(use: ShapeUse) -> str:
    where = f"{PurePath(use.path).name}:{use.line}"
    return f"`{use.text}` ({where})" if use.text else where
