"""The layout of a query-like tensor (its rank and sequence axis), followed through the layout
ops attention code applies to it: `view`/`reshape` that split trailing axes, `unflatten`,
`transpose`, `permute`, `flatten` away from the sequence axis, a reduction over another axis
(`t.sum(dim=-1)`), einops `rearrange`. Whole expressions are `value_layouts`' to read.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ..astutil import int_literal
from .axis_syntax import CONVERSIONS, int_arg, shape_prefix
from .index_syntax import index_pattern, indexed

# ops that keep a tensor's layout
KEEP_LAYOUT = CONVERSIONS
# reductions over the axis `dim` names: it goes (it stays, of size 1, with `keepdim=True`)
REDUCTIONS = ("sum", "mean", "amax", "amin", "prod", "std", "var", "logsumexp")


@dataclass(frozen=True)
class Layout:
    """A query-like tensor: its rank and sequence axis."""

    rank: int
    seq: int


def moved_layout(inner: Layout, method: str, call: ast.Call) -> Layout | None:
    """A layout op applied to a query-like tensor."""
    rank, seq = inner.rank, inner.seq
    args = call.args
    if method in KEEP_LAYOUT or method in ("norm", "softmax", "neg"):
        return inner
    if method == "flip":  # reversed features keep the layout; reversed tokens do not
        dims = _dims(call)
        return inner if dims is not None and seq not in [norm_dim(d, rank) for d in dims] else None
    if method in ("transpose", "swapaxes", "swapdims") and len(args) == 2:
        a, b = (int_literal(x) for x in args)
        if a is None or b is None:
            return None
        a, b = norm_dim(a, rank), norm_dim(b, rank)
        return Layout(rank, b if seq == a else a if seq == b else seq)
    if method == "permute":
        dims = [
            int_literal(x)
            for x in (
                args[0].elts
                if len(args) == 1 and isinstance(args[0], ast.Tuple | ast.List)
                else args
            )
        ]
        if any(d is None for d in dims) or len(dims) != rank:
            return None
        order = [norm_dim(d, rank) for d in dims if d is not None]
        return Layout(rank, order.index(seq)) if seq in order else None
    if method == "unflatten" and len(args) == 2:
        dim = int_literal(args[0])
        sizes = args[1]
        if dim is None or not isinstance(sizes, ast.Tuple | ast.List):
            return None
        dim = norm_dim(dim, rank)
        if dim == seq:
            return None
        grown = len(sizes.elts) - 1
        return Layout(rank + grown, seq if dim > seq else seq + grown)
    if method == "flatten":
        start = int_literal(args[0]) if args else 0
        end = int_literal(args[1]) if len(args) > 1 else -1
        if start is None or end is None:
            return None
        start, end = norm_dim(start, rank), norm_dim(end, rank)
        if start > seq:
            return Layout(rank - (end - start), seq)
        if end < seq:
            return Layout(rank - (end - start), seq - (end - start))
        return None
    if method in ("view", "reshape"):
        return _reshaped(inner, args)
    if method in REDUCTIONS and (args or call.keywords):
        dim = dim_arg(call, 0)
        if any(k.arg == "keepdim" and _true(k.value) for k in call.keywords):
            return inner if dim is not None and norm_dim(dim, rank) != seq else None
        return dropped(inner, dim)
    return None


def dropped(inner: Layout, dim: int | None) -> Layout | None:
    """The layout once the axis `dim` goes (`t.sum(dim=-1)`, each part of `qkv.unbind(2)`);
    None when it is the sequence axis (or not read)."""
    if dim is None or norm_dim(dim, inner.rank) == inner.seq:
        return None
    return Layout(inner.rank - 1, inner.seq - (norm_dim(dim, inner.rank) < inner.seq))


def _true(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def indexed_layout(inner: Layout, index: ast.expr) -> Layout | None:
    """A subscript of a query-like tensor (`qkv[0]`, `pairs[..., 1]`, `q[:, None]`): the axes
    it leaves; None when it picks, cuts or loses the sequence axis."""
    pattern = index_pattern(index)
    done = indexed(range(inner.rank), pattern) if pattern is not None else None
    if done is None or inner.seq not in done[0] or inner.seq in done[1]:
        return None
    axes = done[0]
    return Layout(len(axes), axes.index(inner.seq))


def stacked(parts: list[Layout | None], dim: int | None) -> Layout | None:
    """`torch.stack([a, b], dim)` of tensors of one layout: a new axis at `dim`."""
    first = parts[0] if parts else None
    if first is None or dim is None or any(p != first for p in parts):
        return None
    at = norm_dim(dim, first.rank + 1)
    if not 0 <= at <= first.rank:
        return None
    return Layout(first.rank + 1, first.seq + (at <= first.seq))


def _dims(call: ast.Call) -> list[int] | None:
    """The `dims` of `x.flip(-1)`, `x.flip([2, 3])`, `x.flip(dims=(-1,))`."""
    given = [k.value for k in call.keywords if k.arg == "dims"] or list(call.args)
    if len(given) == 1 and isinstance(given[0], ast.List | ast.Tuple):
        given = list(given[0].elts)
    dims = [int_literal(d) for d in given]
    return [d for d in dims if d is not None] if dims and None not in dims else None


def _reshaped(inner: Layout, args: list[ast.expr]) -> Layout | None:
    """`view(b, -1, h, d)` / `reshape(*x.shape[:-1], -1, 2)`: the axes up to the sequence axis
    kept as they are (names, `-1`, shape reads), later ones split."""
    if len(args) == 1 and isinstance(args[0], ast.Tuple | ast.List):
        args = list(args[0].elts)
    if args and isinstance(args[0], ast.Starred):  # `*x.shape[:-1]`: a kept prefix
        kept = shape_prefix(args[0].value, inner.rank)
        if kept is None or inner.seq >= kept or any(isinstance(a, ast.Starred) for a in args[1:]):
            return None
        return Layout(kept + len(args) - 1, inner.seq)
    if any(isinstance(a, ast.Starred) for a in args) or len(args) < inner.rank:
        return None
    if not all(_plain_size(a) for a in args[: inner.seq + 1]):
        return None
    return Layout(len(args), inner.seq)


def _plain_size(expr: ast.expr) -> bool:
    """A size that keeps an axis: a name, `-1`, a literal, a shape read (no product)."""
    if isinstance(expr, ast.Name | ast.Constant):
        return True
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.operand, ast.Constant):
        return True
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute):
        return expr.value.attr == "shape"
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        return expr.func.attr == "size"
    return isinstance(expr, ast.Attribute)


def rearranged(inner: Layout, pattern: ast.expr) -> Layout | None:
    if not (isinstance(pattern, ast.Constant) and isinstance(pattern.value, str)):
        return None
    left, arrow, right = pattern.value.partition("->")
    if not arrow:
        return None
    lhs, rhs = einops_groups(left), einops_groups(right)
    if lhs is None or rhs is None or len(lhs) != inner.rank:
        return None
    token = lhs[inner.seq]
    if len(token) != 1:
        return None
    for index, group in enumerate(rhs):
        if group == token:
            return Layout(len(rhs), index)
    return None


def einops_groups(side: str) -> list[tuple[str, ...]] | None:
    out: list[tuple[str, ...]] = []
    for match in re.finditer(r"\(([^)]*)\)|(\S+)", side.strip()):
        if match.group(1) is not None:
            out.append(tuple(match.group(1).split()))
        else:
            out.append((match.group(2),))
    return out or None


def norm_dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def dim_arg(call: ast.Call, position: int) -> int | None:
    """The `dim` of a call (positional at `position` or by keyword), 0 when not given."""
    given = len(call.args) > position or any(k.arg == "dim" for k in call.keywords)
    return int_arg(call, position, "dim") if given else 0
