"""Which attention runs across ranks when forward's input is split on one axis (`axis_atoms`).

A block list whose blocks get the stream with the axis in the batch keeps its attention local;
one whose blocks get it as the outer part of the sequence runs its attention across ranks. A
block that regroups its own tokens (Open-Sora's STDiT: spatial attention over `(B T) S C`,
temporal attention over `(B S) T C`, both in one block) is read per module: each attention the
block calls is local or routed by the layout it is handed (`<list>.*.<attr>`), and any other
module the block hands the axis as its sequence must work on each token alone. A block whose
regroup or module call on the stream is not read gives no answer (no split).
"""

from __future__ import annotations

from ..parallel_input import ParallelContext
from .axis_atoms import AtomTrace, BlockReading, init_calls
from .axis_layout_ops import Layout
from .nested_attention import builds_attention, builds_token_local

LOCAL = "local"
ROUTED = "routed"


def axis_kind(layout: Layout, atom: str) -> str | None:
    """`local`: the atom is in the batch axis alone; `routed`: it is the outer part of the
    sequence axis of a `(batch, sequence, ...)` tensor; None otherwise (or absent)."""
    where = [i for i, axis in enumerate(layout) if atom in axis]
    if where == [0]:
        return LOCAL
    if where == [1] and len(layout) >= 3 and layout[1][0] == atom:
        return ROUTED
    return None


def attention_regions(ctx: ParallelContext, trace: AtomTrace, atom: str) -> dict[str, str] | None:
    """Region (a block list, or `<list>.*.<attr>` of an attention inside its blocks) -> local or
    routed, for a split of `atom`; None when a block site or a block's module cannot be placed."""
    kinds: dict[str, str] = {}
    for site in trace.sites:
        kind = axis_kind(site.layout, atom)
        if kind is None or kinds.setdefault(site.list_attr, kind) != kind:
            return None
    regions: dict[str, str] = {}
    for attr, kind in kinds.items():
        reading = trace.blocks.get(attr)
        if reading is None or not reading.regrouped:
            if reading is not None and reading.unread_regroup:
                return None
            regions[attr] = kind
            continue
        inner = _inner_regions(ctx, attr, reading, atom)
        if inner is None:
            return None
        regions.update(inner)
    return regions


def _inner_regions(
    ctx: ParallelContext, attr: str, reading: BlockReading, atom: str
) -> dict[str, str] | None:
    if reading.unread_regroup or reading.unread_call:
        return None
    block = next(b for b in ctx.block_lists if b.attr == attr)
    calls = init_calls(ctx, block.block)
    out: dict[str, str] = {}
    for use in reading.modules:
        if atom not in {a for axis in use.layout for a in axis}:
            continue
        kind = axis_kind(use.layout, atom)
        if kind is None:
            return None
        if not use.module:  # a tensor of the block added to the stream
            if kind == ROUTED:
                return None
            continue
        built = calls.get(use.attr)
        if built is None:
            return None
        call, owner = built
        if builds_attention(ctx, owner, call):
            key = f"{attr}.*.{use.attr}"
            if out.setdefault(key, kind) != kind:
                return None
        elif kind == ROUTED and not builds_token_local(ctx, owner, call):
            return None
    return out
