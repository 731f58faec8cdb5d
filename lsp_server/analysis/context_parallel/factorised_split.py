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

import ast
from dataclasses import dataclass, field
from typing import Any

from ..astutil import short_text, walk
from ..model import Evidence
from ..parallel_input import ParallelContext
from .axis_atoms import AtomTrace, Layout, trace_atoms
from .flow import ForwardFlow
from .result import HookPlan, SplitInput

# torch layers that work on each token alone: they may see the split axis outside the blocks
_TOKEN_LOCAL = (
    "Linear",
    "LayerNorm",
    "RMSNorm",
    "GroupNorm",
    "Dropout",
    "Identity",
    "GELU",
    "SiLU",
    "ReLU",
    "Tanh",
    "Sigmoid",
    "Mish",
)
# calls whose size arguments may read the split axis' size: they lay out or repeat per sample
_SIZE_CALLS = (
    "reshape",
    "view",
    "repeat_interleave",
    "repeat",
    "expand",
    "rearrange",
    "unflatten",
)
_OPS = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!="}
_FLIPPED = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "==": "==", "!=": "!="}


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
    trace = trace_atoms(ctx, flow.hidden, flow.constructors)
    if trace is None or not trace.sites:
        return None, []
    if trace.lost is not None:
        what, line = trace.lost
        return None, [_why(ctx, f"{what} could not be followed from `{flow.hidden}`", line)]
    found = _candidate(trace)
    if found is None:
        return None, []
    axis, kinds = found
    atom = f"in{axis}"
    reasons: list[Evidence] = []
    tables = _tables(ctx, trace, atom, reasons)
    guards = _size_uses(ctx, trace, atom, reasons)
    gather = _gather_axis(trace, atom, axis)
    if reasons:
        return None, reasons
    routed = tuple(k for k, v in kinds.items() if v == "routed")
    local = tuple(k for k, v in kinds.items() if v == "local")
    line = min(s.line for s in trace.sites)
    evidence = [
        _why(
            ctx,
            f"`{', '.join(local)}` hold axis {axis} of `{flow.hidden}` in the batch and "
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
    split = FactorisedSplit(
        flow.hidden, axis, trace.rank, gather, routed, local, tables, guards, evidence
    )
    return split, []


def _candidate(trace: AtomTrace) -> tuple[int, dict[str, str]] | None:
    """The one input axis every block site holds in the batch or as the outer part of its
    sequence, with at least one list of each kind."""
    found: list[tuple[int, dict[str, str]]] = []
    for axis in range(1, trace.rank):
        atom = f"in{axis}"
        kinds: dict[str, str] = {}
        for site in trace.sites:
            kind = _kind(site.layout, atom)
            if kind is None or kinds.setdefault(site.list_attr, kind) != kind:
                break
        else:
            if set(kinds.values()) == {"local", "routed"}:
                found.append((axis, kinds))
    return found[0] if len(found) == 1 else None


def _kind(layout: Layout, atom: str) -> str | None:
    where = [i for i, axis in enumerate(layout) if atom in axis]
    if where == [0]:
        return "local"
    if where == [1] and len(layout) >= 3 and layout[1][0] == atom:
        return "routed"
    return None


def _tables(
    ctx: ParallelContext, trace: AtomTrace, atom: str, reasons: list[Evidence]
) -> tuple[tuple[str, int], ...]:
    tables: dict[str, int] = {}
    for use in trace.combinations:
        kind = _kind(use.layout, atom) if atom in {a for ax in use.layout for a in ax} else "local"
        if kind == "local":
            continue
        if use.module:
            if use.constructor in _TOKEN_LOCAL and atom not in use.layout[-1]:
                continue
            reasons.append(
                _why(
                    ctx,
                    f"`self.{use.attr}` ({use.constructor or 'a module'}) runs outside the "
                    f"blocks over the axis a split would cut: each rank would see its share",
                    use.line,
                )
            )
        elif kind == "routed":
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


def _size_uses(
    ctx: ParallelContext, trace: AtomTrace, atom: str, reasons: list[Evidence]
) -> tuple[tuple[str, int], ...]:
    """Comparisons of the split axis' size with literals; anything else that reads the size
    (a module or table computed from it) is a reason."""
    if ctx.forward is None:
        return ()
    names = {n for n, atoms in trace.sizes.items() if atom in atoms}
    parents = {id(c): p for p in walk(ctx.forward) for c in ast.iter_child_nodes(p)}
    guards: list[tuple[str, int]] = []
    for stmt in ctx.forward.body:
        for node in walk(stmt):
            read = (
                isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names
            ) or atom in trace.shape_reads.get(id(node), ())
            if not read:
                continue
            guard = _guard(node, parents)
            if guard is not None:
                guards.append(guard)
                continue
            if _in_size_call(node, parents):
                continue
            derived = _assigned_to(node, parents)
            if derived is not None:
                names |= derived
                continue
            line = getattr(node, "lineno", ctx.forward.lineno)
            reasons.append(
                _why(
                    ctx,
                    f"`{short_text(_statement_of(node, parents))}` reads the size of the axis a "
                    "split would cut: under the split it is this rank's share",
                    line,
                )
            )
            return ()
    return tuple(dict.fromkeys(guards))


def _guard(node: ast.AST, parents: dict[int, ast.AST]) -> tuple[str, int] | None:
    parent = parents.get(id(node))
    if not (isinstance(parent, ast.Compare) and len(parent.ops) == 1):
        return None
    op = _OPS.get(type(parent.ops[0]))
    if op is None:
        return None
    other = parent.comparators[0] if parent.left is node else parent.left
    if not (isinstance(other, ast.Constant) and type(other.value) is int):
        return None
    return (op if parent.left is node else _FLIPPED[op], other.value)


def _in_size_call(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    current = node
    while True:
        parent = parents.get(id(current))
        if parent is None or isinstance(parent, ast.stmt):
            return False
        if isinstance(parent, ast.Call) and current is not parent.func:
            name = parent.func.attr if isinstance(parent.func, ast.Attribute) else ""
            if isinstance(parent.func, ast.Name):
                name = parent.func.id
            if name in _SIZE_CALLS:
                return True
        if not isinstance(parent, ast.BinOp | ast.Call | ast.keyword | ast.Tuple | ast.List):
            return False
        current = parent


def _assigned_to(node: ast.AST, parents: dict[int, ast.AST]) -> set[str] | None:
    """`n = num_frame` / `n = num_frame * 2`: the names bound to a value computed from it."""
    current = node
    while isinstance(parents.get(id(current)), ast.BinOp):
        current = parents[id(current)]
    parent = parents.get(id(current))
    if isinstance(parent, ast.Assign) and all(isinstance(t, ast.Name) for t in parent.targets):
        return {t.id for t in parent.targets if isinstance(t, ast.Name)}
    return None


def _statement_of(node: ast.AST, parents: dict[int, ast.AST]) -> ast.AST:
    current = node
    while id(current) in parents and not isinstance(current, ast.stmt):
        current = parents[id(current)]
    return current


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
