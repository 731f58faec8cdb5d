"""Where forward (and the blocks it hands the size to) reads the size of an axis a split would
cut, and whether each read stays right with this rank's share of it.

Under a split of forward's input on that axis, every size forward measures on it is this rank's.
Right: the size in a reshape, view, repeat, expand, `repeat_interleave` or einops pattern (the
per-frame repeats of a caption or timestep, a regroup by frames), a name computed from it and
read the same way, the size handed to a block that reads it the same way (`block(x, t, T, S)`
with `rearrange(h, "B (T S) C -> (B S) T C", T=T, S=S)` inside). Checked at each call instead:
a comparison with a literal (`num_frame > 1`), which must agree for the whole and the local
size. Anything else reads it as if it were the whole size (rotary angles computed from the frame
count, a table cut to it): a reason to refuse, with the statement. So does the size laying out
(reshape, view, unflatten, rearrange) a tensor computed from another input of forward and not
from this rank's share (`t.view(b, f, -1)` of a per-frame `timestep (B, F)`): a per-frame input
beside the split one, whole on every rank.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..astutil import callee_name, names_in, short_text, walk
from ..model import Evidence
from ..parallel_input import ParallelContext
from .axis_atoms import AtomTrace, BlockReading
from .axis_layout_ops import Axis
from .block_binding import is_block_call

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
# size calls that lay a tensor out by the size (its receiver must hold this rank's share)
_LAYOUTS = ("reshape", "view", "rearrange", "unflatten")
_OPS = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!="}
_FLIPPED = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "==": "==", "!=": "!="}


@dataclass
class SizeReads:
    """The comparisons to check at each call, and the reads that refuse."""

    guards: list[tuple[str, int]] = field(default_factory=list)
    reasons: list[Evidence] = field(default_factory=list)


def size_reads(ctx: ParallelContext, trace: AtomTrace, atom: str) -> SizeReads:
    """Reads of the size of input axis `atom` in forward and in the blocks it is handed to."""
    out = SizeReads()
    if ctx.forward is None:
        return out
    names = {n for n, atoms in trace.sizes.items() if atom in atoms}
    _scan(ctx, ctx.forward, names, trace.shape_reads, atom, out, trace)
    if not out.reasons:
        _inputs_laid_out(ctx, ctx.forward, trace, names, atom, out)
    return out


def _inputs_laid_out(
    ctx: ParallelContext,
    func: ast.FunctionDef,
    trace: AtomTrace,
    names: set[str],
    atom: str,
    out: SizeReads,
) -> None:
    """A reshape by the split axis' size of a tensor computed from another input of forward
    (none of it from the split input or this rank's sizes): a per-frame input the split does not
    cut, laid out as if it were this rank's."""
    params = other_inputs(func, trace.param)
    origins = input_origins(func, params, {trace.param}, trace.shape_reads, atom, names)
    for node in walk(func):
        if not isinstance(node, ast.Call) or callee_name(node) not in _LAYOUTS:
            continue
        receiver = layout_receiver(node)
        args = [*node.args[1 if receiver is not None and receiver in node.args else 0 :]]
        args += [k.value for k in node.keywords]
        if receiver is None or not any(_reads_size(a, names, trace, atom) for a in args):
            continue
        inputs = set().union(*(origins.get(n, set()) for n in names_in(receiver)))
        inputs |= names_in(receiver) & params
        if inputs and None not in inputs:
            out.reasons.append(
                Evidence(
                    f"`{short_text(node)}` lays out `{short_text(receiver)}`, computed from "
                    f"forward's input `{sorted(inputs)[0]}`, by the size of the axis a split "
                    "would cut: a per-frame input beside the split one stays whole on every rank",
                    ctx.path,
                    node.lineno,
                )
            )
            return


DESCRIPTIONS = ("dtype", "device", "ndim", "shape", "is_cuda")


def other_inputs(func: ast.FunctionDef, split: str) -> set[str]:
    """forward's parameters other than `self` and the split input."""
    args = func.args
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} - {"self", split}


def assignments(func: ast.FunctionDef) -> list[ast.Assign | ast.AnnAssign]:
    """`func`'s assignments with a value, in source order."""
    found = [
        n for n in walk(func) if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None
    ]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def input_origins(
    func: ast.FunctionDef,
    params: set[str],
    local: set[str],
    shape_reads: dict[int, Axis],
    atom: str,
    sizes: set[str],
) -> dict[str, set[str | None]]:
    """Name -> the inputs of forward it is computed from (`None`: rows of this rank's: the
    split input and what is computed from it, or a tensor laid out or repeated by the split
    axis' size), statements in source order. `local` (the split input) grows with the names
    computed from it; `sizes`: names holding the split axis' size, which make a value this
    rank's only inside a reshape, view, repeat or einops call (arithmetic with the frame count
    keeps the rows it had)."""
    parents = {id(c): p for p in walk(func) for c in ast.iter_child_nodes(p)}
    origins: dict[str, set[str | None]] = {}
    for node in assignments(func):
        assert node.value is not None
        found: set[str | None] = set()
        # `x.dtype`, `x.device`, `x.shape[k]`: attributes that hand over no rows of `x` (a size
        # of the split axis is a shape read of its atom, counted above)
        described = {
            id(a.value)
            for a in walk(node.value)
            if isinstance(a, ast.Attribute) and a.attr in DESCRIPTIONS
        }
        for read in walk(node.value):
            sized = atom in shape_reads.get(id(read), ()) or (
                isinstance(read, ast.Name) and read.id in sizes
            )
            if sized and _in_size_call(read, parents):
                found.add(None)
            if not isinstance(read, ast.Name) or id(read) in described:
                continue
            if read.id in local:
                found.add(None)
            elif read.id in params:
                found.add(read.id)
            found |= origins.get(read.id, set())
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for name in walk(target):
                if isinstance(name, ast.Name):
                    origins[name.id] = found
                    if None in found:
                        local.add(name.id)
    return origins


def layout_receiver(node: ast.Call) -> ast.expr | None:
    """The tensor a layout call lays out: `t.view(...)`'s `t`, `rearrange(t, ...)`'s `t`."""
    if isinstance(node.func, ast.Attribute) and node.func.attr != "rearrange":
        owner = node.func.value
        if isinstance(owner, ast.Name) and owner.id in ("torch", "einops"):
            return node.args[0] if node.args else None
        return owner
    return node.args[0] if node.args else None


def _reads_size(arg: ast.expr, names: set[str], trace: AtomTrace, atom: str) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id in names) or atom in trace.shape_reads.get(id(n), ())
        for n in walk(arg)
    )


def _scan(
    ctx: ParallelContext,
    func: ast.FunctionDef,
    names: set[str],
    shape_reads: dict[int, Axis],
    atom: str,
    out: SizeReads,
    trace: AtomTrace | None,
) -> None:
    """`func`'s reads of the names and shape reads holding `atom`; `trace` (forward only):
    a size handed to a block is judged by the block's own reads."""
    parents = {id(c): p for p in walk(func) for c in ast.iter_child_nodes(p)}
    for stmt in func.body:
        for node in walk(stmt):
            read = (
                isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names
            ) or atom in shape_reads.get(id(node), ())
            if not read:
                continue
            guard = _guard(node, parents)
            if guard is not None:
                out.guards.append(guard)
                continue
            if _in_size_call(node, parents):
                continue
            derived = _assigned_to(node, parents)
            if derived is not None:
                names |= derived
                continue
            if trace is not None and _handed_to_block(ctx, node, parents, trace, atom, out):
                continue
            statement = _statement_of(node, parents)
            out.reasons.append(
                Evidence(
                    f"`{short_text(statement)}` reads the size of the axis a split would cut: "
                    "under the split it is this rank's share",
                    ctx.path,
                    getattr(node, "lineno", func.lineno),
                )
            )
            return


def _handed_to_block(
    ctx: ParallelContext,
    node: ast.AST,
    parents: dict[int, ast.AST],
    trace: AtomTrace,
    atom: str,
    out: SizeReads,
) -> bool:
    """The size is an argument of a block call whose block reads it rightly."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.keyword):
        parent = parents.get(id(parent))
    if not isinstance(parent, ast.Call):
        return False
    listed = next((b.attr for b in ctx.block_lists if is_block_call(parent, b)), None)
    reading: BlockReading | None = trace.blocks.get(listed) if listed else None
    if reading is None:
        return False
    names = {n for n, atoms in reading.sizes.items() if atom in atoms}
    before = len(out.reasons)
    _scan(ctx, reading.forward, names, reading.shape_reads, atom, out, None)
    return len(out.reasons) == before


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
