"""The axes of forward's input each tensor of forward holds, followed through layout ops.

A factorised video transformer unpacks its latent (`b, c, f, h, w = x.shape`), merges the frame
axis into the batch for its spatial blocks (`x.permute(0, 2, 1, 3, 4).reshape(-1, c, h, w)`,
`rearrange(x, "b c f h w -> (b f) c h w")`) and regroups the tokens around each temporal block
so that the frames become the sequence (`(b f) s d -> (b s) f d`). To know which input axis
each block list attends over, every axis of a tracked tensor is a tuple of atoms (outer to
inner): an input axis (`in2`) or a fresh one a module made (`m1`: the tokens of a patch
embedding, the features of a projection). Reshapes are matched atom by atom against the sizes
they are given (names unpacked from `.shape`, `x.shape[k]`, products, one `-1`); a size that
cannot be read stops the tracking of that tensor, never a guess.

A module of the model keeps the batch axis; a convolution keeps the rank (and an axis its kernel
and stride are 1 on: `Conv3d(c, d, (1, p, p), (1, p, p))` keeps the frames), a module given
tokens `(n, s, d)` keeps the tokens and makes new features, any other module given a grid makes
tokens and features (`(n, c, h, w) -> (n, s, d)`: a patch embedding).

Each block list's first block call is followed into the block's `forward` too (`BlockReading`):
the modules it calls on the stream with their layouts, so that a block regrouping its own tokens
(`rearrange(h, "B (T S) C -> (B S) T C", T=T, S=S)` before a temporal attention) is read per
module. What the block does that cannot be followed is recorded: a regroup whose result is not
read, a module call on a stream-derived value whose layout is lost.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..astutil import (
    call_name,
    callee_name,
    int_literal,
    mentions_gradient_checkpointing,
    names_in,
    self_attr,
    walk,
)
from ..init_attributes import init_attributes
from ..parallel_input import ParallelBlockList, ParallelContext
from ..sources import ClassRef
from .axis_layout_ops import (
    WILD,
    Axis,
    Layout,
    atoms,
    held_tensor,
    kernel_keeps,
    moved,
    rearranged,
)
from .block_binding import is_block_call


@dataclass(frozen=True)
class BlockSite:
    """A block of `list_attr` called with the stream laid out as `layout`."""

    list_attr: str
    layout: Layout
    line: int


@dataclass(frozen=True)
class StreamCombination:
    """A tensor the model holds (`self.<attr>`) combined element-wise with the stream laid out
    as `layout`; or a module of the model (`module=True`) applied to it outside the blocks."""

    attr: str
    layout: Layout
    line: int
    module: bool = False
    constructor: str = ""
    # input atoms a convolution keeps on their own axis (kernel, stride 1, no padding there)
    keeps: frozenset[str] = frozenset()


@dataclass
class BlockReading:
    """A block's `forward` followed from the layout its list hands it: the module calls on the
    stream (with their layouts), the sizes its parameters carry, whether a regroup or a module
    call on the stream could not be read."""

    forward: ast.FunctionDef
    owner: ClassRef
    modules: list[StreamCombination] = field(default_factory=list)
    sizes: dict[str, Axis] = field(default_factory=dict)
    shape_reads: dict[int, Axis] = field(default_factory=dict)
    unread_regroup: int = 0  # line of a regroup of the stream whose result is not read
    unread_call: int = 0  # line of a module call on the stream whose layout is lost
    regrouped: bool = False  # a module saw the stream in another layout than the block got


@dataclass
class AtomTrace:
    """What the tracking of forward's stream input found."""

    param: str
    rank: int
    sites: list[BlockSite] = field(default_factory=list)
    combinations: list[StreamCombination] = field(default_factory=list)
    sizes: dict[str, Axis] = field(default_factory=dict)  # size names -> atoms
    shape_reads: dict[int, Axis] = field(default_factory=dict)  # id(x.shape[k]) -> atoms
    returned: Layout | None = None
    lost: tuple[str, int] | None = None  # why a block site could not be read, and where
    blocks: dict[str, BlockReading] = field(default_factory=dict)  # list -> its block read


def trace_atoms(ctx: ParallelContext, param: str) -> AtomTrace | None:
    """Follow forward's input `param` through forward; None when its rank is never unpacked."""
    if ctx.forward is None:
        return None
    tracker = _Tracker(ctx, param, ctx.transformer)
    tracker.block(ctx.forward.body)
    if tracker.trace is None:
        return None
    return tracker.trace


def init_calls(ctx: ParallelContext, cls: ClassRef) -> dict[str, tuple[ast.Call, ClassRef]]:
    """`self.x = Module(...)` in the `__init__` of `cls` and its bases (the most derived
    first, `Resolver.init_methods`): attribute -> the call and the class whose `__init__` makes
    it."""
    found: dict[str, tuple[ast.Call, ClassRef]] = {}
    for init, owner in ctx.resolver.init_methods(cls):
        for bound in init_attributes(init):
            if isinstance(bound.value, ast.Call):
                found.setdefault(bound.attr, (bound.value, owner))
    return found


_REGROUPS = ("permute", "transpose", "swapaxes", "swapdims", "movedim", "reshape", "view")
_REGROUPS += ("flatten", "unflatten", "rearrange")


class _Tracker:
    def __init__(self, ctx: ParallelContext, param: str, owner: ClassRef, depth: int = 0) -> None:
        self.ctx = ctx
        self.lists: tuple[ParallelBlockList, ...] = ctx.block_lists
        self.param = param
        self.owner = owner
        self.calls = init_calls(ctx, owner)
        self.depth = depth
        self.values: dict[str, Layout] = {}
        self.trace: AtomTrace | None = None
        self.reading: BlockReading | None = None  # set when this tracker reads a block
        self.tainted: set[str] = {param}  # names computed from the stream (layout known or not)
        self.fresh = 0
        self.line = 0

    # statements ---------------------------------------------------------------------------
    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.line = stmt.lineno
            self._note_shape_reads(stmt)
            self.statement(stmt)

    def statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            self._assign(stmt.targets[0], stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self._assign(stmt.target, stmt.value)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            value = ast.BinOp(
                left=ast.Name(stmt.target.id, ast.Load()), op=stmt.op, right=stmt.value
            )
            ast.copy_location(value, stmt)
            self._assign(stmt.target, value)
        elif isinstance(stmt, ast.If):
            self._branch(stmt)
        elif isinstance(stmt, ast.For | ast.While):
            before = dict(self.values)
            self.block(stmt.body)
            self._join(before, dict(self.values))
        elif isinstance(stmt, ast.With):
            self.block(stmt.body)
        elif isinstance(stmt, ast.Return) and stmt.value is not None and self.trace is not None:
            value = stmt.value
            if isinstance(value, ast.Tuple) and value.elts:
                value = value.elts[0]
            if isinstance(value, ast.Call) and value.args and not value.keywords:
                value = value.args[0]  # `Output(sample=x)` is read by keyword below
            elif isinstance(value, ast.Call) and value.keywords:
                value = value.keywords[0].value
            self.trace.returned = self.layout(value)
        elif isinstance(stmt, ast.Expr) and self.layout(stmt.value) is None:
            self._note_unread(stmt.value)

    def _branch(self, stmt: ast.If) -> None:
        if mentions_gradient_checkpointing(stmt.test) and stmt.orelse:
            self.block(stmt.orelse)  # the checkpointed branch runs the same blocks
            return
        before = dict(self.values)
        self.block(stmt.body)
        taken = dict(self.values)
        self.values = dict(before)
        self.block(stmt.orelse)
        self._join(taken, dict(self.values))

    def _join(self, one: dict[str, Layout], other: dict[str, Layout]) -> None:
        """Names whose layout depends on the branch (or on the loop's pass) are not tracked."""
        self.values = {k: v for k, v in one.items() if other.get(k) == v}

    def _assign(self, target: ast.expr, value: ast.expr) -> None:
        if self._unpack_shape(target, value):
            return
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            if len(target.elts) == len(value.elts):
                for t, v in zip(target.elts, value.elts, strict=True):
                    self._assign(t, v)
            return
        if not isinstance(target, ast.Name):
            for node in walk(target):
                if isinstance(node, ast.Name):
                    self._forget(node.id)
            self.layout(value)
            return
        layout = self.layout(value)
        self._forget(target.id)
        if layout is not None:
            self.values[target.id] = layout
            self.tainted.add(target.id)
            return
        if names_in(value) & self.tainted:
            self.tainted.add(target.id)
            self._note_unread(value)
            return
        self.tainted.discard(target.id)
        size = self.size(value)
        if isinstance(size, tuple) and self.trace is not None:
            self.trace.sizes[target.id] = size

    def _note_unread(self, value: ast.expr) -> None:
        """A stream-derived value whose layout is lost: a regroup or a module call on it is
        recorded in the block reading."""
        if self.reading is None:
            return
        for node in walk(value):
            if not isinstance(node, ast.Call):
                continue
            name = callee_name(node).split(".")[-1]
            args = [*node.args, *(k.value for k in node.keywords)]
            reads = set().union(*(names_in(a) for a in args))
            if isinstance(node.func, ast.Attribute):
                reads |= names_in(node.func.value)
            if not reads & self.tainted:
                continue
            if name in _REGROUPS:
                self.reading.unread_regroup = self.reading.unread_regroup or node.lineno
            elif self_attr(node.func) in self.calls:
                self.reading.unread_call = self.reading.unread_call or node.lineno

    def _forget(self, name: str) -> None:
        self.values.pop(name, None)
        if self.trace is not None:
            self.trace.sizes.pop(name, None)

    def _unpack_shape(self, target: ast.expr, value: ast.expr) -> bool:
        """`b, c, f, h, w = x.shape`: sizes of a tracked tensor, or the input's rank."""
        if not (
            isinstance(target, ast.Tuple)
            and isinstance(value, ast.Attribute)
            and value.attr == "shape"
            and isinstance(value.value, ast.Name)
            and all(isinstance(e, ast.Name) for e in target.elts)
        ):
            return False
        name = value.value.id
        if name == self.param and self.trace is None and name not in self.values:
            rank = len(target.elts)
            self.trace = AtomTrace(self.param, rank)
            self.values[name] = tuple((f"in{i}",) for i in range(rank))
        layout = self.values.get(name)
        if layout is None or len(layout) != len(target.elts) or self.trace is None:
            return False
        for elt, axis in zip(target.elts, layout, strict=True):
            self.trace.sizes[elt.id] = axis  # type: ignore[attr-defined]
        return True

    def _note_shape_reads(self, stmt: ast.stmt) -> None:
        if self.trace is None:
            return
        for node in walk(stmt):
            axes = self._shape_read(node)
            if axes is not None:
                self.trace.shape_reads[id(node)] = axes

    # sizes --------------------------------------------------------------------------------
    def _shape_read(self, node: ast.AST) -> Axis | None:
        """`x.shape[k]` / `x.size(k)` of a tracked tensor: the atoms of that axis."""
        owner, index = None, None
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "shape"
        ):
            owner, index = node.value.value, int_literal(node.slice)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "size"
            and len(node.args) == 1
        ):
            owner, index = node.func.value, int_literal(node.args[0])
        if not isinstance(owner, ast.Name) or index is None:
            return None
        layout = self.values.get(owner.id)
        if layout is None or not -len(layout) <= index < len(layout):
            return None
        return layout[index]

    def size(self, node: ast.expr) -> Axis | str | None:
        """The atoms a size expression multiplies, `-1`, or None (not read)."""
        literal = int_literal(node)
        if literal == -1:
            return WILD
        if literal == 1:
            return ()
        if isinstance(node, ast.Name) and self.trace is not None:
            return self.trace.sizes.get(node.id)
        read = self._shape_read(node)
        if read is not None:
            return read
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            left, right = self.size(node.left), self.size(node.right)
            if isinstance(left, tuple) and isinstance(right, tuple):
                return left + right
        return None

    # values -------------------------------------------------------------------------------
    def layout(self, node: ast.expr) -> Layout | None:
        if isinstance(node, ast.Name):
            return self.values.get(node.id)
        if isinstance(node, ast.BinOp):
            return self._combined(node)
        if isinstance(node, ast.IfExp):
            body, orelse = self.layout(node.body), self.layout(node.orelse)
            return body if body == orelse else None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call):
            if int_literal(node.slice) == 0 and self._block_list(node.value) is not None:
                return self.layout(node.value)
            return None
        if isinstance(node, ast.Call):
            return self._call(node)
        return None

    def _combined(self, node: ast.BinOp) -> Layout | None:
        left, right = self.layout(node.left), self.layout(node.right)
        if left is not None and right is not None:
            # a module's output has new feature atoms: the token axes must agree
            return left if left[:-1] == right[:-1] and len(left) == len(right) else None
        tracked, other = (left, node.right) if left is not None else (right, node.left)
        if tracked is None:
            return None
        attr = held_tensor(other)
        if attr is not None and self.trace is not None:
            self.trace.combinations.append(StreamCombination(attr, tracked, node.lineno))
        return tracked

    def _call(self, node: ast.Call) -> Layout | None:
        listed = self._block_list(node) if self.depth == 0 else None
        if listed is not None:
            stream = self._first_tracked(node)
            if stream is not None and self.trace is not None:
                self.trace.sites.append(BlockSite(listed, stream, node.lineno))
                if listed not in self.trace.blocks:
                    self._enter(listed, node)
            elif self.trace is not None and self.trace.lost is None:
                self.trace.lost = (f"the stream handed to `{listed}`", node.lineno)
            return stream
        name = call_name(node)
        if name.split(".")[-1] == "rearrange" and len(node.args) >= 2:
            inner = self.layout(node.args[0])
            moved = None if inner is None else self._rearranged(inner, node)
            if moved is None and inner is not None and self.reading is not None:
                self.reading.unread_regroup = self.reading.unread_regroup or node.lineno
            return moved
        if name in ("torch.permute", "torch.transpose", "torch.flatten", "torch.reshape"):
            inner = self.layout(node.args[0]) if node.args else None
            rest = ast.Call(func=node.func, args=node.args[1:], keywords=node.keywords)
            return None if inner is None else self._method(inner, name[6:], rest)
        attr = self_attr(node.func)
        if attr is not None and attr in self.calls:
            return self._module(attr, node)
        if isinstance(node.func, ast.Attribute):
            inner = self.layout(node.func.value)
            if inner is not None:
                moved = self._method(inner, node.func.attr, node)
                if moved is None and node.func.attr in _REGROUPS and self.reading is not None:
                    self.reading.unread_regroup = self.reading.unread_regroup or node.lineno
                return moved
        return None

    def _first_tracked(self, node: ast.Call) -> Layout | None:
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            layout = self.layout(arg)
            if layout is not None:
                return layout
        return None

    def _block_list(self, node: ast.Call) -> str | None:
        return next((b.attr for b in self.lists if is_block_call(node, b)), None)

    def _module(self, attr: str, node: ast.Call) -> Layout | None:
        inner = self._first_tracked(node)
        if inner is None:
            self._note_unread(node)
            return None
        call = self.calls[attr][0]
        constructor = call_name(call).split(".")[-1]
        out: Layout | None = None
        if "Conv" in constructor:
            out = (inner[0], self._new(), *self._kept_by_kernel(call, inner[2:]))
        if self.trace is not None:
            keeps = frozenset(a for i in range(2, len(out or ())) for a in (out or ())[i])
            self.trace.combinations.append(
                StreamCombination(attr, inner, node.lineno, True, constructor, keeps & atoms(inner))
            )
        if out is not None:
            return out
        if len(inner) <= 3:
            return (*inner[:-1], self._new())
        return (inner[0], self._new(), self._new())

    def _kept_by_kernel(self, call: ast.Call, spatial: Layout) -> list[Axis]:
        """The spatial axes of a convolution's output: the input's where `kernel_keeps`, new
        otherwise."""
        keeps = kernel_keeps(call, len(spatial))
        return [axis if kept else self._new() for axis, kept in zip(spatial, keeps, strict=True)]

    def _enter(self, listed: str, node: ast.Call) -> None:
        """Follow the list's block into its `forward` with the layouts and sizes of the call."""
        block = next(b for b in self.lists if b.attr == listed)
        found = self.ctx.resolver.find_method(block.block, "forward")
        if found is None or self.trace is None:
            return
        forward, owner = found
        params = [a.arg for a in forward.args.args[1:]]
        bound = dict(zip(params, node.args, strict=False))
        bound.update({k.arg: k.value for k in node.keywords if k.arg in params})
        stream = next((p for p, a in bound.items() if self.layout(a) is not None), None)
        if stream is None:
            return
        child = _Tracker(self.ctx, stream, block.block, depth=1)
        child.trace = AtomTrace(stream, 0)
        child.reading = BlockReading(forward, owner)
        given = self.layout(bound[stream])
        for param, arg in bound.items():
            layout, size = self.layout(arg), self.size(arg)
            if layout is not None:
                child.values[param] = layout
            elif isinstance(size, tuple):
                child.trace.sizes[param] = size
        child.reading.sizes = dict(child.trace.sizes)
        child.block(forward.body)
        reading = child.reading
        reading.modules = child.trace.combinations
        reading.shape_reads = child.trace.shape_reads
        reading.regrouped = any(
            m.layout[:2] != (given or ())[:2] for m in reading.modules if given is not None
        )
        self.trace.blocks[listed] = reading

    def _new(self) -> Axis:
        self.fresh += 1
        return (f"m{self.fresh}" if self.depth == 0 else f"m{self.param}.{self.fresh}",)

    # layout ops ---------------------------------------------------------------------------
    def _method(self, inner: Layout, method: str, node: ast.Call) -> Layout | None:
        return moved(inner, method, node, self.size)

    def _rearranged(self, inner: Layout, node: ast.Call) -> Layout | None:
        known: dict[str, Axis] = {}
        for kw in node.keywords:
            size = self.size(kw.value) if kw.arg else None
            if kw.arg and isinstance(size, tuple):
                known[kw.arg] = size
        found = rearranged(inner, node.args[1], known)
        if found is None:
            return None
        out, bound = found
        for kw in node.keywords:  # `S=S` with `S` not read before: the pattern tells its atoms
            if (
                kw.arg in bound
                and isinstance(kw.value, ast.Name)
                and self.trace is not None
                and kw.value.id not in self.trace.sizes
            ):
                self.trace.sizes[kw.value.id] = bound[kw.arg]
        return out
