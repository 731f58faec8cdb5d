"""Layout ops on tensors whose axes are tuples of atoms (`axis_atoms`): `permute`, `transpose`,
`movedim`, `reshape` / `view` (matched atom by atom against the sizes given), `flatten`,
`unflatten`, einops `rearrange`; and the readings of a convolution's kernel, stride and padding.
Pure functions: the tracker hands them a reader of size expressions."""

from __future__ import annotations

import ast
from collections.abc import Callable

from ..astutil import int_literal
from .axis_syntax import CONVERSIONS
from .query_layout import einops_groups, norm_dim

Axis = tuple[str, ...]
Layout = tuple[Axis, ...]
WILD = "-1"
_KEEP = (*CONVERSIONS, "cos", "sin", "exp", "neg", "sigmoid", "tanh", "relu", "abs")
SizeReader = Callable[[ast.expr], "Axis | str | None"]


def moved(inner: Layout, method: str, node: ast.Call, size: SizeReader) -> Layout | None:
    """`inner` after `x.<method>(...)`; None when the op or its arguments are not read."""
    rank = len(inner)
    args = node.args
    if method in _KEEP:
        return inner
    if method == "permute":
        dims = _ints(
            args[0].elts if len(args) == 1 and isinstance(args[0], ast.Tuple | ast.List) else args
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
        axis = out.pop(norm_dim(dims[0], rank))
        out.insert(norm_dim(dims[1], rank), axis)
        return tuple(out)
    if method in ("reshape", "view"):
        return reshaped(inner, [size(s) for s in _size_args(node)])
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
        parts = reshaped((inner[dim],), [size(s) for s in args[1].elts])
        return None if parts is None else (*inner[:dim], *parts, *inner[dim + 1 :])
    return None


def rearranged(
    inner: Layout, pattern: ast.expr, known: dict[str, Axis]
) -> tuple[Layout, dict[str, Axis]] | None:
    """`inner` after einops `rearrange(x, pattern, **sizes)` (`known`: the sizes read), and the
    atoms each name of the pattern binds."""
    if not (isinstance(pattern, ast.Constant) and isinstance(pattern.value, str)):
        return None
    left, arrow, right = pattern.value.partition("->")
    lhs, rhs = einops_groups(left), einops_groups(right)
    if not arrow or lhs is None or rhs is None or len(lhs) != len(inner):
        return None
    bound: dict[str, Axis] = {}
    for group, axis in zip(lhs, inner, strict=True):
        sizes: list[Axis | str | None] = [
            known.get(name, WILD) if name != "1" else () for name in group
        ]
        parts = reshaped((axis,), sizes)
        if parts is None:
            return None
        bound.update(zip(group, parts, strict=True))
    out: list[Axis] = []
    for group in rhs:
        if any(name not in bound and name != "1" for name in group):
            return None
        out.append(tuple(a for name in group if name != "1" for a in bound[name]))
    return tuple(out), bound


def kernel_keeps(call: ast.Call, count: int) -> list[bool]:
    """Per spatial axis of a convolution built by `call`: whether its kernel and stride are 1
    and its padding 0 there (the output keeps the input's axis)."""
    kernel, stride, padding = (_per_axis(_conv_arg(call, i, k), count) for i, k in _CONV_ARGS)
    return [
        kernel[i] == 1 and stride[i] in (1, None) and padding[i] in (0, None) for i in range(count)
    ]


def reshaped(inner: Layout, sizes: list[Axis | str | None]) -> Layout | None:
    """`inner` reshaped to `sizes` (atoms, `-1`, or None: not read), matched atom by atom; at
    most one size may be `-1` or unread (it takes the atoms left)."""
    flat = [a for axis in inner for a in axis]
    last = sizes[-1] if sizes else None
    if flat and isinstance(last, tuple) and len(last) == 1 and _both_made(last[0], flat[-1]):
        flat[-1] = last[0]  # the features a module made have the width the reshape names
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


def _both_made(one: str, other: str) -> bool:
    """Two atoms modules made (neither an input axis)."""
    return one.startswith("m") and other.startswith("m")


_CONV_ARGS = ((2, "kernel_size"), (3, "stride"), (4, "padding"))


def _conv_arg(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[index] if len(call.args) > index else None


def _per_axis(node: ast.expr | None, count: int) -> list[int | None]:
    """A convolution argument per spatial axis: an int for all, a tuple of ints, or None
    (not given: the default, or not read)."""
    if node is None:
        return [None] * count
    if isinstance(node, ast.Tuple | ast.List) and len(node.elts) == count:
        return [int_literal(e) for e in node.elts]
    value = int_literal(node)
    return [value] * count if value is not None else [-1] * count


def atoms(layout: Layout) -> frozenset[str]:
    return frozenset(a for axis in layout for a in axis)


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


def held_tensor(node: ast.expr) -> str | None:
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
