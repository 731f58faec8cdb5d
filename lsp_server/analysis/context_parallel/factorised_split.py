"""Context parallelism for factorised transformers: split an input axis that some block lists
hold in the batch and others attend over.

A video transformer with spatial and temporal blocks (frames merged into the batch for the
spatial blocks, the tokens regrouped so that the frames are the sequence of the temporal ones)
cannot be split on its token sequence: the split axis would change from one block to the next.
It can be split on the frame axis of forward's latent, once, at the root: the spatial blocks
then see whole frames (their attention stays local), the temporal blocks attend over this
rank's frames (their attention is routed through cache-dit's all-to-all or ring), and what
forward derives from the frame count (caption and timestep repeats per frame) is this rank's,
consistently. The output is gathered on the same axis.

Read from the code, never from names: which input axis each list holds where (`axis_atoms`),
model tensors added to the stream while that axis is the sequence (sliced to this rank's rows at
each call), comparisons of the frame count with a literal (checked to agree for the local and
the whole count), and every other use of the frame count, which refuses: a position table or a
module computed from it would see this rank's count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import Evidence
from ..parallel_input import ParallelContext
from .axis_atoms import AtomTrace, init_calls, trace_atoms
from .axis_block_inputs import whole_inputs_to_local_blocks
from .axis_regions import LOCAL, ROUTED, attention_regions, axis_kind
from .axis_size_reads import size_reads
from .flow import ForwardFlow
from .nested_attention import builds_token_local
from .result import HookPlan, SplitInput


@dataclass(frozen=True)
class FactorisedSplit:
    """The split of forward's `param` on `axis` (of `rank` axes), gathered on `gather_axis`."""

    param: str
    axis: int
    rank: int
    gather_axis: int
    routed: tuple[str, ...]  # block lists attending over the split axis
    local: tuple[str, ...]  # block lists holding it in the batch (their attention stays local)
    # model tensors added to the stream while the split axis is its sequence: (dotted attribute,
    # the table's axis counted from its end) sliced to this rank's rows at each call
    tables: tuple[tuple[str, int], ...] = ()
    # `size <op> literal` comparisons forward makes: they must agree for the local and whole size
    guards: tuple[tuple[str, int], ...] = ()
    evidence: list[Evidence] = field(default_factory=list)
    # other inputs of forward split with it: (parameter, its axis that follows the split one)
    inputs: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "param": self.param,
            "axis": self.axis,
            "rank": self.rank,
            "gatherAxis": self.gather_axis,
            "routed": list(self.routed),
            "local": list(self.local),
            "tables": [[attr, axis] for attr, axis in self.tables],
            "guards": [[op, value] for op, value in self.guards],
            **({"inputs": [[name, dim] for name, dim in self.inputs]} if self.inputs else {}),
        }

    def hook_plan(self) -> HookPlan:
        """cache-dit's root split; one module key cannot also gather its output, so the
        generated module gathers it (on `gather_axis`) in a hook of its own."""
        plan = HookPlan()
        why = f"split `{self.param}` on its axis {self.axis} at the root"
        plan.split("", self.param, SplitInput(self.axis, self.rank, reason=why))
        return plan


def factorised_split(
    ctx: ParallelContext, flow: ForwardFlow
) -> tuple[FactorisedSplit | None, list[Evidence]]:
    """The split, or why there is none (empty when the shape is not a factorised one)."""
    if flow.hidden is None:
        return None, []
    trace = trace_atoms(ctx, flow.hidden)
    if trace is None or not trace.sites:
        return None, []
    if trace.lost is not None:
        what, line = trace.lost
        return None, [_why(ctx, f"{what} could not be followed from `{flow.hidden}`", line)]
    found = _candidate(ctx, trace)
    if found is None:
        return None, []
    axis, regions = found
    atom = f"in{axis}"
    reasons: list[Evidence] = []
    tables = _tables(ctx, trace, atom, reasons)
    reads = size_reads(ctx, trace, atom)
    reasons += reads.reasons
    size_names = {n for n, atoms in trace.sizes.items() if atom in atoms}
    whole, companions = whole_inputs_to_local_blocks(ctx, trace, atom, size_names)
    reasons += whole
    gather = _gather_axis(trace, atom, axis)
    if reasons:
        return None, reasons
    routed = tuple(k for k, v in regions.items() if v == ROUTED)
    local = tuple(k for k, v in regions.items() if v == LOCAL)
    line = min(s.line for s in trace.sites)
    held = f"`{', '.join(local)}` hold" if local else "nothing holds"
    evidence = [
        _why(
            ctx,
            f"{held} axis {axis} of `{flow.hidden}` in the batch and "
            f"`{', '.join(routed)}` attend over it: split it at the root (each rank runs its "
            f"share of that axis; attention of `{', '.join(routed)}` runs across ranks, the "
            "other attention stays local), gather the output on its axis "
            f"{gather}",
            line,
        )
    ]
    evidence += [
        _why(ctx, f"`self.{t}` is sliced to this rank's rows at each call", line) for t, _ in tables
    ]
    guards = tuple(dict.fromkeys(reads.guards))
    evidence += [
        _why(ctx, f"`{name}` is split with it on its axis {dim} (its rows follow the frames)", line)
        for name, dim in companions
    ]
    split = FactorisedSplit(
        flow.hidden, axis, trace.rank, gather, routed, local, tables, guards, evidence, companions
    )
    return split, []


def _candidate(ctx: ParallelContext, trace: AtomTrace) -> tuple[int, dict[str, str]] | None:
    """The one input axis whose attention regions can all be placed, some attention holding it
    in the batch and some attending over it (a model attending over it everywhere is a token
    split's to plan)."""
    found: list[tuple[int, dict[str, str]]] = []
    for axis in range(1, trace.rank):
        regions = attention_regions(ctx, trace, f"in{axis}")
        if regions is not None and {ROUTED, LOCAL} <= set(regions.values()):
            found.append((axis, regions))
    return found[0] if len(found) == 1 else None


def _tables(
    ctx: ParallelContext, trace: AtomTrace, atom: str, reasons: list[Evidence]
) -> tuple[tuple[str, int], ...]:
    tables: dict[str, int] = {}
    built = init_calls(ctx, ctx.transformer)
    for use in trace.combinations:
        present = atom in {a for ax in use.layout for a in ax}
        kind = axis_kind(use.layout, atom) if present else LOCAL
        if kind == LOCAL:
            continue
        if use.module:
            found = built.get(use.attr)
            local = found is not None and builds_token_local(ctx, found[1], found[0])
            if local and atom not in use.layout[-1]:
                continue
            if atom in use.keeps:  # a convolution of kernel 1 along the axis
                continue
            reasons.append(
                _why(
                    ctx,
                    f"`self.{use.attr}` ({use.constructor or 'a module'}) runs outside the "
                    f"blocks over the axis a split would cut: each rank would see its share",
                    use.line,
                )
            )
        elif kind == ROUTED:
            tables[use.attr] = -(len(use.layout) - 1)
        else:
            reasons.append(
                _why(
                    ctx,
                    f"`self.{use.attr}` is combined with the stream along the split axis",
                    use.line,
                )
            )
    return tuple(tables.items())


def _gather_axis(trace: AtomTrace, atom: str, axis: int) -> int:
    """Where the output holds the split axis: read from the returned value when it is followed,
    else the input's axis (a denoiser returns its latent's layout; the generated module checks
    the output's length on that axis at each call)."""
    if trace.returned is not None:
        for i, part in enumerate(trace.returned):
            if part and part[0] == atom:
                return i
    return axis


def _why(ctx: ParallelContext, message: str, line: int) -> Evidence:
    return Evidence(message, ctx.path, line)
