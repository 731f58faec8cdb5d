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

A module of the model keeps the batch axis; a convolution keeps the rank, a module given tokens
`(n, s, d)` keeps the tokens and makes new features, any other module given a grid makes tokens
and features (`(n, c, h, w) -> (n, s, d)`: a patch embedding).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..astutil import call_name, int_literal, mentions_gradient_checkpointing, self_attr, walk
from ..parallel_input import ParallelBlockList, ParallelContext
from .axis_syntax import CONVERSIONS
from .block_binding import is_block_call
from .query_layout import einops_groups, norm_dim

Axis = tuple[str, ...]
Layout = tuple[Axis, ...]
_WILD = "-1"
_KEEP = (*CONVERSIONS, "cos", "sin", "exp", "neg", "sigmoid", "tanh", "relu", "abs")


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


def trace_atoms(ctx: ParallelContext, param: str, constructors: dict[str, str]) -> AtomTrace | None:
    """Follow forward's input `param` through forward; None when its rank is never unpacked."""
    if ctx.forward is None:
        return None
    tracker = _Tracker(ctx, param, constructors)
    tracker.block(ctx.forward.body)
    if tracker.trace is None:
        return None
    return tracker.trace


class _Tracker:
    def __init__(self, ctx: ParallelContext, param: str, constructors: dict[str, str]) -> None:
        self.lists: tuple[ParallelBlockList, ...] = ctx.block_lists
        self.param = param
        self.constructors = constructors
        self.values: dict[str, Layout] = {}
        self.trace: AtomTrace | None = None
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
        elif isinstance(stmt, ast.Expr):
            self.layout(stmt.value)

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
            return
        size = self.size(value)
        if isinstance(size, tuple) and self.trace is not None:
            self.trace.sizes[target.id] = size

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
            return _WILD
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
            return left if left == right else None
        tracked, other = (left, node.right) if left is not None else (right, node.left)
        if tracked is None:
            return None
        attr = _held_tensor(other)
        if attr is not None and self.trace is not None:
            self.trace.combinations.append(StreamCombination(attr, tracked, node.lineno))
        return tracked

    def _call(self, node: ast.Call) -> Layout | None:
        listed = self._block_list(node)
        if listed is not None:
            stream = self._first_tracked(node)
            if stream is not None and self.trace is not None:
                self.trace.sites.append(BlockSite(listed, stream, node.lineno))
            elif self.trace is not None and self.trace.lost is None:
                self.trace.lost = (f"the stream handed to `{listed}`", node.lineno)
            return stream
        name = call_name(node)
        if name.split(".")[-1] == "rearrange" and len(node.args) >= 2:
            inner = self.layout(node.args[0])
            return None if inner is None else self._rearranged(inner, node)
        if name in ("torch.permute", "torch.transpose", "torch.flatten", "torch.reshape"):
            inner = self.layout(node.args[0]) if node.args else None
            rest = ast.Call(func=node.func, args=node.args[1:], keywords=node.keywords)
            return None if inner is None else self._method(inner, name[6:], rest)
        attr = self_attr(node.func)
        if attr is not None and attr in self.constructors:
            return self._module(attr, node)
        if isinstance(node.func, ast.Attribute):
            inner = self.layout(node.func.value)
            if inner is not None:
                return self._method(inner, node.func.attr, node)
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
            return None
        constructor = self.constructors[attr].split(".")[-1]
        if self.trace is not None:
            self.trace.combinations.append(
                StreamCombination(attr, inner, node.lineno, module=True, constructor=constructor)
            )
        if "Conv" in constructor:
            return (inner[0], *(self._new() for _ in inner[1:]))
        if len(inner) <= 3:
            return (*inner[:-1], self._new())
        return (inner[0], self._new(), self._new())

    def _new(self) -> Axis:
        self.fresh += 1
        return (f"m{self.fresh}",)

    # layout ops ---------------------------------------------------------------------------
    def _method(self, inner: Layout, method: str, node: ast.Call) -> Layout | None:
        rank = len(inner)
        args = node.args
        if method in _KEEP:
            return inner
        if method == "permute":
            dims = _ints(
                args[0].elts
                if len(args) == 1 and isinstance(args[0], ast.Tuple | ast.List)
                else args
            )
            if dims is None or sorted(norm_dim(d, rank) for d in dims) != list(range(rank)):
                return None
            return tuple(inner[norm_dim(d, rank)] for d in dims)
        if method in ("transpose", "swapaxes", "swapdims"):
            dims = _ints(args)
            if dims is None or len(dims) != 2:
                return None
            a, b = (norm_dim(d, rank) for d in dims)
            out = list(inner)
            out[a], out[b] = inner[b], inner[a]
            return tuple(out)
        if method == "movedim":
            dims = _ints(args)
            if dims is None or len(dims) != 2:
                return None
            out = list(inner)
            moved = out.pop(norm_dim(dims[0], rank))
            out.insert(norm_dim(dims[1], rank), moved)
            return tuple(out)
        if method in ("reshape", "view"):
            return _reshaped(inner, [self.size(s) for s in _size_args(node)])
        if method == "flatten":
            start = _int_or(node, 0, "start_dim", 0)
            end = _int_or(node, 1, "end_dim", -1)
            if start is None or end is None:
                return None
            start, end = norm_dim(start, rank), norm_dim(end, rank)
            merged = tuple(a for axis in inner[start : end + 1] for a in axis)
            return (*inner[:start], merged, *inner[end + 1 :])
        if method == "unflatten" and len(args) == 2:
            dim = int_literal(args[0])
            if dim is None or not isinstance(args[1], ast.Tuple | ast.List):
                return None
            dim = norm_dim(dim, rank)
            parts = _reshaped((inner[dim],), [self.size(s) for s in args[1].elts])
            return None if parts is None else (*inner[:dim], *parts, *inner[dim + 1 :])
        return None

    def _rearranged(self, inner: Layout, node: ast.Call) -> Layout | None:
        pattern = node.args[1]
        if not (isinstance(pattern, ast.Constant) and isinstance(pattern.value, str)):
            return None
        left, arrow, right = pattern.value.partition("->")
        lhs, rhs = einops_groups(left), einops_groups(right)
        if not arrow or lhs is None or rhs is None or len(lhs) != len(inner):
            return None
        known: dict[str, Axis] = {}
        for kw in node.keywords:
            size = self.size(kw.value) if kw.arg else None
            if kw.arg and isinstance(size, tuple):
                known[kw.arg] = size
        bound: dict[str, Axis] = {}
        for group, axis in zip(lhs, inner, strict=True):
            sizes = [known.get(name, _WILD) if name != "1" else () for name in group]
            parts = _reshaped((axis,), sizes)
            if parts is None:
                return None
            bound.update(zip(group, parts, strict=True))
        out: list[Axis] = []
        for group in rhs:
            if any(name not in bound and name != "1" for name in group):
                return None
            out.append(tuple(a for name in group if name != "1" for a in bound[name]))
        return tuple(out)


def _reshaped(inner: Layout, sizes: list[Axis | str | None]) -> Layout | None:
    """`inner` reshaped to `sizes` (atoms, `-1`, or None: not read), matched atom by atom; at
    most one size may be `-1` or unread (it takes the atoms left)."""
    flat = [a for axis in inner for a in axis]
    wild = [i for i, s in enumerate(sizes) if not isinstance(s, tuple)]
    if len(wild) > 1:
        return None
    cut = wild[0] if wild else len(sizes)
    out: list[Axis] = [() for _ in sizes]
    start = 0
    for i in range(cut):
        size = sizes[i]
        assert isinstance(size, tuple)
        if tuple(flat[start : start + len(size)]) != size:
            return None
        out[i], start = size, start + len(size)
    end = len(flat)
    for i in range(len(sizes) - 1, cut, -1):
        size = sizes[i]
        assert isinstance(size, tuple)
        if end - len(size) < start or tuple(flat[end - len(size) : end]) != size:
            return None
        out[i], end = size, end - len(size)
    if wild:
        out[cut] = tuple(flat[start:end])
    elif start != end:
        return None
    return tuple(out)


def _size_args(node: ast.Call) -> list[ast.expr]:
    shape = next((k.value for k in node.keywords if k.arg in ("shape", "size")), None)
    if shape is None and len(node.args) == 1 and isinstance(node.args[0], ast.Tuple | ast.List):
        shape = node.args[0]
    if isinstance(shape, ast.Tuple | ast.List):
        return list(shape.elts)
    return list(node.args)


def _ints(nodes: list[ast.expr]) -> list[int] | None:
    out = [int_literal(n) for n in nodes]
    return None if any(v is None for v in out) else [v for v in out if v is not None]


def _int_or(node: ast.Call, index: int, keyword: str, default: int) -> int | None:
    if len(node.args) > index:
        return int_literal(node.args[index])
    for kw in node.keywords:
        if kw.arg == keyword:
            return int_literal(kw.value)
    return default


def _held_tensor(node: ast.expr) -> str | None:
    """`self.table` / `self.table.to(x.dtype)` / `self.pos.table`: the dotted attribute."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CONVERSIONS
    ):
        node = node.func.value
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "self" and parts:
        return ".".join(reversed(parts))
    return None
