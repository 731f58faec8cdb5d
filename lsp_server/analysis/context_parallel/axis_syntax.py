"""Readings of single index and call expressions the axis inference combines: where axes land
after a subscript or a new axis, literal `dim` arguments, slices to a length."""

from __future__ import annotations

import ast

from ..astutil import call_name, int_literal, self_attr

# element-wise methods and functions: the value keeps its axes
POINTWISE = (
    "to",
    "float",
    "double",
    "half",
    "bfloat16",
    "contiguous",
    "type_as",
    "cos",
    "sin",
    "exp",
    "clone",
    "detach",
    "cpu",
    "cuda",
    "real",
    "imag",
    "polar",
)


def is_full_slice(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Slice)
        and node.lower is None
        and node.upper is None
        and node.step is None
    )


def kept_axes(index: ast.expr) -> list[int] | None:
    """`[:, None]` -> [0]: where each axis of the value lands when a subscript only adds unit
    axes (`None`) around full slices; None for any other subscript."""
    parts = list(index.elts) if isinstance(index, ast.Tuple) else [index]
    kept: list[int] = []
    for i, part in enumerate(parts):
        if isinstance(part, ast.Constant) and part.value is None:
            continue
        if not is_full_slice(part):
            return None
        kept.append(i)
    return kept if len(kept) < len(parts) else None


def after_new_axis(inner: int | None, dim: int | None) -> int | None:
    """Where axis `inner` (counted from the front) lands when a new axis is inserted at `dim`:
    one further when it comes at or before it, unchanged when after it or appended last (-1);
    unknown for any other negative position (it depends on the rank)."""
    if inner is None or dim is None:
        return None
    if dim == -1:
        return inner
    if dim < 0:
        return None
    return inner + 1 if dim <= inner else inner


def int_arg(call: ast.Call, index: int, keyword: str) -> int | None:
    node = call.args[index] if index < len(call.args) else None
    node = node or next((k.value for k in call.keywords if k.arg == keyword), None)
    return int_literal(node)


def keeps_leading(call: ast.Call) -> bool:
    """`t.view(*t.shape[:-1], 2, 2)`: the new shape starts with the tensor's own leading sizes."""
    if not (isinstance(call.func, ast.Attribute) and call.args):
        return False
    first = call.args[0]
    return (
        isinstance(first, ast.Starred)
        and isinstance(first.value, ast.Subscript)
        and isinstance(first.value.value, ast.Attribute)
        and first.value.value.attr == "shape"
        and isinstance(first.value.slice, ast.Slice)
        and first.value.slice.lower is None
        and first.value.slice.upper is not None
    )


def no_leading_axes(expr: ast.expr) -> bool:
    """An operand that cannot put axes in front of the other side's: a number, or an attribute
    of `self` (a frequency buffer or parameter, one axis of features)."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, int | float)
    return self_attr(expr) is not None


def is_frequency_fn(name: str) -> bool:
    """A function that turns positions into frequencies (`get_1d_rotary_pos_embed`, `rope(...)`)."""
    lowered = name.lower()
    return any(w in lowered for w in ("rotary", "rope", "freq", "pos_embed", "sincos"))


def is_shape_read(value: ast.expr) -> bool:
    """`x.shape[1]`, `x.size(1)`, `len(x)`: a length read from a tensor."""
    if isinstance(value, ast.Subscript):
        return isinstance(value.value, ast.Attribute) and value.value.attr == "shape"
    if isinstance(value, ast.Call):
        name = call_name(value)
        return name == "len" or (
            isinstance(value.func, ast.Attribute) and value.func.attr == "size"
        )
    return False


def is_minus_one(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and node.operand.value == 1
    )


def tuple_index(expr: ast.Subscript) -> int | None:
    """`f[0]`: a non-negative integer index (an element of a tuple-valued result)."""
    index = expr.slice
    if isinstance(index, ast.Constant) and isinstance(index.value, int):
        return index.value if index.value >= 0 else None
    return None


def length_slice_axis(index: ast.expr) -> int | None:
    """The axis a subscript cuts to a length or a window of one (`[:n]` -> 0, `[:, :n]` -> 1,
    `[a : a + n, ...]` -> 0); None when there is none, or when `None`, an integer index or a `...`
    before it make the axis ambiguous."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    for i, part in enumerate(parts):
        if not isinstance(part, ast.Slice):
            return None  # `None` / `...` / an integer index: the axis is not the position
        if (
            part.step is None
            and part.upper is not None
            and not isinstance(part.upper, ast.Constant)
        ):
            rest = parts[i + 1 :]
            if all(
                (isinstance(p, ast.Slice) and p.lower is None and p.upper is None)
                or (isinstance(p, ast.Constant) and p.value is Ellipsis)
                for p in rest
            ):
                return i
            return None
    return None


def cat_dim(call: ast.Call) -> int | None:
    for kw in call.keywords:
        if kw.arg in ("dim", "axis") and isinstance(kw.value, ast.Constant):
            return kw.value.value if isinstance(kw.value.value, int) else None
        if kw.arg in ("dim", "axis") and isinstance(kw.value, ast.UnaryOp):
            return -1
    if len(call.args) > 1 and isinstance(call.args[1], ast.Constant):
        value = call.args[1].value
        return value if isinstance(value, int) else None
    return 0


def tiles_a_vector(call: ast.Call) -> bool:
    """`v.repeat_interleave(n)` (no `dim`: the result is flat) or `v.repeat(n)` (one count): a
    1-D vector stays a 1-D vector, each entry repeated or the whole tiled."""
    if not isinstance(call.func, ast.Attribute) or any(k.arg == "dim" for k in call.keywords):
        return False
    return call.func.attr in ("repeat_interleave", "repeat") and len(call.args) == 1


# element-wise conversions: a tensor's layout and sizes stay as they are
CONVERSIONS = (
    "float",
    "half",
    "bfloat16",
    "double",
    "to",
    "type",
    "type_as",
    "contiguous",
    "clone",
    "detach",
)


def shape_prefix(expr: ast.expr, rank: int) -> int | None:
    """How many leading sizes `x.shape[:k]` keeps of a rank-`rank` tensor (`[:-1]`: rank - 1,
    `[:2]`: 2); None for anything else or a prefix out of range."""
    if not (
        isinstance(expr, ast.Subscript)
        and isinstance(expr.value, ast.Attribute)
        and expr.value.attr == "shape"
        and isinstance(expr.slice, ast.Slice)
        and expr.slice.lower is None
        and expr.slice.step is None
        and expr.slice.upper is not None
    ):
        return None
    upper = int_literal(expr.slice.upper)
    if upper is None:
        return None
    kept = upper if upper >= 0 else rank + upper
    return kept if 0 <= kept <= rank else None
