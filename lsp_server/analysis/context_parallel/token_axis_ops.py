"""Work along the token axis in a module's own `forward`, the axis read through the layouts of
the values it makes from its first input (`(B, S, C)`, followed through head splits, transposes
and the functions of the file it hands them to: `value_layouts`, `called_windows`):

- scans, shifts, reversals and transforms over the tokens (`h.cumsum(1)`, `torch.roll(h, 1,
  1)`, `F.pad(h, (0, 0, 1, 0))`, an `nn.ZeroPad2d((0, 0, 1, -1))` module, `h.flip(1)`,
  `torch.fft.fft(h, dim=1)`, `torch.fft.fft2(h)` over its last two axes): each token's output
  depends on its neighbours, or on every token;
- weights over the token axis (a Linear applied with the tokens last, `self.token_mlp(h.
  transpose(1, 2))`; `self.w @ h`; `k.transpose(-2, -1) @ v`): sized for, or summed over, the
  whole sequence;
- a number computed from the token length (`scale=x.shape[1] ** -0.5`, `math.log(n)` with `b, n,
  _ = x.shape`): the length is this rank's under a split;
- in attention modules, reductions and normalizations over the tokens of the queries, keys or
  values (`F.normalize(q, dim=-2)` on `(B, H, S, D)`, `k.softmax(dim=-2)`). Outside attention
  those are `token_reductions`' (which counts only those flowing back into the stream).

Under a token split every rank would do the work on its own slice: the model runs and is wrong
(or stops on a size). Read by `token_mixing` in blocks and the modules they build.
"""

from __future__ import annotations

import ast

from ..astutil import call_name, callee_name, int_literal, short_text, walk
from ..parallel_input import ParallelContext
from ..sources import ClassRef, SourceFile, qualified
from .called_functions import Caller, module_caller, statement_value, statements
from .called_windows import _bind, _comprehensions, layout_values
from .query_layout import Layout, dropped, norm_dim
from .token_reductions import names
from .token_work import first_param
from .value_layouts import ValueLayouts

_STREAM = Layout(3, 1)
_SCANS = ("cumsum", "cumprod", "cummax", "cummin", "logcumsumexp")
_REDUCES = ("mean", "sum", "amax", "amin", "max", "min", "std", "var", "logsumexp", "prod")
_REDUCES += ("norm", "softmax", "log_softmax", "normalize")
# torch.fft transforms -> the axes they run over when no `dim` is given (None: every axis)
_FFTS: dict[str, tuple[int, ...] | None] = {
    **dict.fromkeys(("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"), (-1,)),
    **dict.fromkeys(("fft2", "ifft2", "rfft2", "irfft2"), (-2, -1)),
    **dict.fromkeys(("fftn", "ifftn", "rfftn", "irfftn"), None),
}
_NAMESPACES = ("torch", "F", "torch.nn.functional", "nn.functional", "torch.fft", "fft")
_PAD_MODULES = tuple(
    f"{kind}Pad{n}d"
    for kind in ("Zero", "Constant", "Reflection", "Replication")
    for n in (1, 2, 3)
)
_LENGTH_MATH = ("log", "log2", "log10", "sqrt", "exp", "pow")
_SCALES = ("scale", "softmax_scale", "sm_scale")
_EDGE = "under a token split the tokens at each rank's edge would meet this rank's own"
_OWN_POSITIONS = (
    "counts positions from the tokens it sees",
    "under a token split every rank would count its own tokens from 0",
)
Found = tuple[str, str]  # what the module does (the code is quoted after it), and why it breaks


def token_axis_work(
    ctx: ParallelContext, cls: ClassRef, func: ast.FunctionDef, attention: bool
) -> tuple[int, str] | None:
    """The first statement of `func` (a method of `cls`) working along the token axis of a value
    made from its first input: (line, message after the class's name). `attention`: `cls` is an
    attention module (its reductions over the tokens count too)."""
    stream = first_param(func)
    caller = module_caller(ctx, cls, func)
    if stream is None or caller is None:
        return None
    return _Reading(ctx, cls, caller, attention).read(stream)


class _Reading:
    def __init__(self, ctx: ParallelContext, cls: ClassRef, caller: Caller, attention: bool):
        self.ctx, self.cls, self.caller, self.attention = ctx, cls, caller, attention
        self.values: ValueLayouts = layout_values(ctx, caller, {})
        self.lengths: set[str] = set()
        self.tracked: set[str] = set()

    def read(self, stream: str) -> tuple[int, str] | None:
        self.tracked.add(stream)
        self.values.layouts[stream] = _STREAM
        for stmt in statements(self.caller.func):
            value = statement_value(stmt)
            if value is None:
                continue
            _comprehensions(value, self.tracked, self.values.layouts)
            for node in walk(value):
                found = self._work(node)
                if found is not None:
                    return node.lineno, f"{found[0]} (`{short_text(node)}`): {found[1]}"
            self._bind_lengths(stmt, value)
            if not self._generated(stmt, value) and not self._unpacked_rows(stmt, value):
                _bind(stmt, value, self.tracked, self.values)
        return None

    def _work(self, node: ast.AST) -> Found | None:
        if isinstance(node, ast.BinOp):
            return self._arithmetic(node)
        if not isinstance(node, ast.Call):
            return None
        return self._length_number(node) or self._module_call(node) or self._tensor_op(node)

    def _tensor_op(self, call: ast.Call) -> Found | None:
        """A torch op over the token axis of a laid-out value."""
        name = callee_name(call)
        func = call.func
        if not isinstance(func, ast.Attribute):
            return None
        if ast.unparse(func.value) in _NAMESPACES:
            operand, rest = (call.args[0], call.args[1:]) if call.args else (None, [])
        else:
            operand, rest = func.value, list(call.args)
        layout = self._layout(operand)
        if layout is None:
            return None
        dims = _op_dims(name, rest, call, layout, self.attention)
        if dims is None or layout.seq not in dims:
            return None
        if name in ("pad", "roll", "diff"):
            return "pairs each token with its neighbours", _EDGE
        if name == "flip":
            return (
                "reverses the order of the tokens",
                "under a token split each rank would reverse its own slice",
            )
        if name in _FFTS:
            return (
                "transforms over the tokens (every output from every token)",
                "under a token split each rank would transform its own tokens",
            )
        return (
            "reduces over the tokens it sees",
            "under a token split each rank would reduce over its own tokens",
        )

    def _module_call(self, call: ast.Call) -> Found | None:
        """`self.<m>(t)`: a Linear with the tokens of `t` last, or a padding module over them."""
        attr = _self_attr_call(call)
        built = _built(self.ctx, self.cls, attr) if attr else None
        layout = self._layout(call.args[0]) if call.args else None
        if built is None or layout is None:
            return None
        ctor, source = built
        kind = qualified(source, call_name(ctor)).split(".")[-1]
        if kind == "Sequential" and ctor.args and isinstance(ctor.args[0], ast.Call):
            kind = qualified(source, call_name(ctor.args[0])).split(".")[-1]
        if kind == "Linear" and layout.seq == layout.rank - 1:
            return _TOKEN_WEIGHTS
        if kind in _PAD_MODULES and ctor.args:
            covered = int(kind[-2])  # ZeroPad2d pads the last two axes
            if layout.seq in (_padded_axes(ctor.args[0], layout.rank, covered) or ()):
                return f"pads the tokens it sees with `{short_text(ctor)}`", _EDGE
        return None

    def _arithmetic(self, node: ast.BinOp) -> Found | None:
        if isinstance(node.op, ast.MatMult):
            left, right = self._layout(node.left), self._layout(node.right)
            if left is not None and left.seq == left.rank - 1:
                return _TOKEN_WEIGHTS
            untracked = not names(node.left) & self.tracked
            if untracked and right is not None and right.seq == right.rank - 2:
                return _TOKEN_WEIGHTS
            return None
        if isinstance(node.op, ast.Pow) and self._length(node.left):
            return _LENGTH_NUMBER
        if isinstance(node.op, ast.Mult | ast.Div):
            sides = (node.left, node.right)
            if any(self._length(s) for s in sides) and any(self._layout(s) for s in sides):
                return _LENGTH_NUMBER
        return None

    def _length_number(self, call: ast.Call) -> Found | None:
        """`math.log(n)`, `sdpa(..., scale=...)` of a token length; `torch.arange(n)` of one
        (positions counted from this module's own tokens: `q.shape[2]` of `(B, H, S, D)`
        queries, through the layouts)."""
        math = call_name(call).startswith("math.") and callee_name(call) in _LENGTH_MATH
        if math and any(self._length(a) for a in call.args):
            return _LENGTH_NUMBER
        sized = call.args[1:2] if len(call.args) > 1 else call.args[:1]
        if callee_name(call) == "arange" and any(self._length(a) for a in sized):
            return _OWN_POSITIONS
        if any(k.arg in _SCALES and self._length(k.value) for k in call.keywords):
            return _LENGTH_NUMBER
        return None

    def _layout(self, expr: ast.expr | None) -> Layout | None:
        if expr is None or not names(expr) & self.tracked:
            return None
        return self.values.layout(expr)

    def _length(self, expr: ast.expr) -> bool:
        """A token length of a laid-out value, or a number computed from one."""
        if isinstance(expr, ast.Name):
            return expr.id in self.lengths
        if isinstance(expr, ast.BinOp):
            return self._length(expr.left) or self._length(expr.right)
        if isinstance(expr, ast.UnaryOp):
            return self._length(expr.operand)
        if isinstance(expr, ast.Call) and callee_name(expr) in ("int", "float") and expr.args:
            return self._length(expr.args[0])
        owner, axis = _measured(expr)
        layout = self._layout(owner) if owner is not None else None
        return layout is not None and axis is not None and norm_dim(axis, layout.rank) == layout.seq

    def _bind_lengths(self, stmt: ast.stmt, value: ast.expr) -> None:
        """`b, n, _ = x.shape` (the sequence axis of the layout), `n = x.shape[1]`."""
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            return
        target = stmt.targets[0]
        if isinstance(target, ast.Name):
            if self._length(value):
                self.lengths.add(target.id)
            else:
                self.lengths.discard(target.id)
            return
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Attribute):
            layout = self._layout(value.value) if value.attr == "shape" else None
            if layout is not None and layout.rank == len(target.elts):
                seq = target.elts[layout.seq]
                if isinstance(seq, ast.Name):
                    self.lengths.add(seq.id)

    def _unpacked_rows(self, stmt: ast.stmt, value: ast.expr) -> bool:
        """`q, k, v = qkv.permute(2, 0, 3, 1, 4)`: a tensor unpacked along its first axis (not
        the tokens'), each name taking the layout without it."""
        if not (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Tuple)
            and not isinstance(value, ast.Tuple | ast.List)
        ):
            return False
        layout = self._layout(value)
        rows = dropped(layout, 0) if layout is not None else None
        if rows is None:
            return False
        for target in stmt.targets[0].elts:
            if isinstance(target, ast.Name):
                self.tracked.add(target.id)
                self.values.layouts[target.id] = rows
        return True

    def _generated(self, stmt: ast.stmt, value: ast.expr) -> bool:
        """`q, k, v = (f(p) for p in qkv.chunk(3, dim=-1))`: each name gets the layout of the
        generated element, `p` taking the layout of the parts."""
        if not (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Tuple)
            and isinstance(value, ast.GeneratorExp | ast.ListComp)
            and len(value.generators) == 1
            and isinstance(value.generators[0].target, ast.Name)
            and names(value.generators[0].iter) & self.tracked
        ):
            return False
        part = value.generators[0].target.id
        iterated = value.generators[0].iter
        layouts = self.values.layouts
        parts = iterated.elts if isinstance(iterated, ast.Tuple | ast.List) else None
        found = {self.values.layout(p) for p in parts} if parts else set()
        part_layout = (
            self.values.split_layout(iterated)
            if parts is None
            else (found.pop() if len(found) == 1 else None)
        )
        if part_layout is not None:
            layouts[part] = part_layout
        element = self.values.layout(value.elt) if part_layout is not None else None
        layouts.pop(part, None)
        for target in stmt.targets[0].elts:
            if isinstance(target, ast.Name):
                self.tracked.add(target.id)
                layouts.pop(target.id, None)
                if element is not None:
                    layouts[target.id] = element
        return True


_TOKEN_WEIGHTS = (
    "mixes the tokens through weights over the token axis",
    "those are sized for, or summed over, the whole sequence, of which under a token split each "
    "rank holds a slice",
)
_LENGTH_NUMBER = (
    "computes a number from the length of the tokens it sees",
    "under a token split that length is this rank's",
)


def _op_dims(
    name: str, rest: list[ast.expr], call: ast.Call, layout: Layout, attention: bool
) -> set[int] | None:
    """The axes (normalized to `layout`'s rank) a torch op runs over; None when not one read."""
    keyword = {k.arg: k.value for k in call.keywords}
    if name in _SCANS:
        dims = [keyword.get("dim", rest[0] if rest else None)]
    elif name == "roll":
        if "dims" not in keyword and len(rest) < 2:
            return {layout.seq}  # rolled flattened: every axis
        dims = [keyword.get("dims", rest[1] if len(rest) > 1 else None)]
    elif name == "diff":
        dims = [keyword.get("dim", rest[1] if len(rest) > 1 else ast.Constant(-1))]
    elif name == "flip":
        dims = [keyword["dims"]] if "dims" in keyword else rest
    elif name in _FFTS:
        given = keyword.get("dim", rest[1] if len(rest) > 1 else None)
        default = _FFTS[name]
        if given is None and default is None:
            return set(range(layout.rank))
        dims = [given] if given is not None else [ast.Constant(d) for d in default or ()]
    elif name == "pad":
        return _padded_axes(keyword.get("pad", rest[0] if rest else None), layout.rank)
    elif name in _REDUCES and attention:
        dims = [_reduction_dim(name, rest, keyword)]
    else:
        return None
    return _normalized(dims, layout.rank)


def _reduction_dim(name: str, rest: list[ast.expr], keyword: dict) -> ast.expr | None:
    if name == "normalize":  # F.normalize(x, p=2.0, dim=1)
        return keyword.get("dim", rest[1] if len(rest) > 1 else ast.Constant(1))
    if name == "norm":  # t.norm(p, dim)
        return keyword.get("dim", rest[1] if len(rest) > 1 else None)
    return keyword.get("dim", keyword.get("axis", rest[0] if rest else None))


def _normalized(dims: list[ast.expr | None], rank: int) -> set[int] | None:
    out: set[int] = set()
    for dim in dims:
        parts = dim.elts if isinstance(dim, ast.Tuple | ast.List) else [dim]
        for part in parts:
            value = int_literal(part)
            if value is None:
                return None
            out.add(norm_dim(value, rank))
    return out


def _padded_axes(pad: ast.expr | None, rank: int, covered: int | None = None) -> set[int] | None:
    """The axes a padding tuple (last axis first, two entries each; an entry not read counts as
    non-zero) pads; an int pads each of the `covered` last axes (a padding module's)."""
    if pad is None:
        return None
    if int_literal(pad) is not None:
        last = covered or 0
        return set(range(rank - last, rank)) if int_literal(pad) else set()
    if not isinstance(pad, ast.Tuple | ast.List):
        return None
    values = [int_literal(e) for e in pad.elts]
    return {rank - 1 - i // 2 for i, v in enumerate(values) if v is None or v != 0}


def _measured(expr: ast.expr) -> tuple[ast.expr | None, int | None]:
    """`x.shape[i]` / `x.size(i)`: (x, i)."""
    if (
        isinstance(expr, ast.Subscript)
        and isinstance(expr.value, ast.Attribute)
        and expr.value.attr == "shape"
    ):
        return expr.value.value, int_literal(expr.slice)
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "size"
        and len(expr.args) == 1
    ):
        return expr.func.value, int_literal(expr.args[0])
    return None, None


def _self_attr_call(call: ast.Call) -> Found | None:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.attr if func.value.id == "self" else None
    return None


def _built(ctx: ParallelContext, cls: ClassRef, attr: str) -> tuple[ast.Call, SourceFile] | None:
    """The constructor call `self.<attr> = Cls(...)` of the first `__init__` assigning it, with
    the file it is written in."""
    for init, owner in ctx.resolver.init_methods(cls):
        for node in walk(init):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            target = node.targets[0]
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
                and target.attr == attr
            ):
                source = owner.source or ctx.source
                return (node.value, source) if isinstance(node.value, ast.Call) else None
    return None
