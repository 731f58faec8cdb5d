"""The layout of a query-like expression in one function: names bound to layouts (`Layout`),
followed through the layout ops (`query_layout.moved_layout`), their `torch.` spellings
(`torch.transpose(q, 1, 2)`), subscripts, joins (`cat`, `stack`), `view_as_complex`, einops
`rearrange`, and the functions a reader resolves (`called`).
"""

from __future__ import annotations

import ast

from ..astutil import callee_name
from .query_layout import Layout, dim_arg, indexed_layout, moved_layout, norm_dim, rearranged
from .query_layout import stacked as stacked_layout

# `torch.<op>(x, ...)`: the method `x.<op>(...)`, which moves axes (elementwise `torch.` functions
# keep the layout, as a module applied to the queries does)
_TORCH_LAYOUT_OPS = ("transpose", "swapaxes", "swapdims", "permute", "flatten", "unflatten")
_TORCH_LAYOUT_OPS += ("reshape", "flip")
NOT_A_FUNCTION = object()


class QueryExprs:
    """Layouts of the query-like tensors of one function."""

    def __init__(self, layouts: dict[str, Layout]) -> None:
        self.layouts = layouts

    def is_table(self, name: str) -> bool:
        """Whether `name` is bound to a position table (never a module applied to queries)."""
        return False

    def called(self, call: ast.Call) -> object:
        """The layout a function the reader resolves returns (None when not shown), or
        NOT_A_FUNCTION when `call` does not run one."""
        return NOT_A_FUNCTION

    def layout(self, expr: ast.expr) -> Layout | None:
        """The layout of a query-like tensor `expr`, followed through layout ops."""
        if isinstance(expr, ast.Name):
            return self.layouts.get(expr.id)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add | ast.Sub | ast.Mult):
            return self.layout(expr.left) or self.layout(expr.right)
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            return self.layout(expr.operand)
        if isinstance(expr, ast.Subscript):
            inner = self.layout(expr.value)
            return indexed_layout(inner, expr.slice) if inner is not None else None
        return self._call_layout(expr) if isinstance(expr, ast.Call) else None

    def _call_layout(self, expr: ast.Call) -> Layout | None:
        name = callee_name(expr)
        if name in ("cat", "concat", "stack") and expr.args:
            return self._joined(expr, name == "stack")
        if name in ("view_as_complex", "view_as_real") and expr.args:
            inner = self.layout(expr.args[0])
            if inner is None:
                return None
            if name == "view_as_complex":
                return Layout(inner.rank - 1, inner.seq) if inner.seq < inner.rank - 1 else None
            return Layout(inner.rank + 1, inner.seq)
        if name == "rearrange" and len(expr.args) >= 2:
            inner = self.layout(expr.args[0])
            return rearranged(inner, expr.args[1]) if inner is not None else None
        found = self.called(expr)
        if found is not NOT_A_FUNCTION:
            return found if isinstance(found, Layout) else None
        func = expr.func
        if not isinstance(func, ast.Attribute):
            return None
        if _torch(func.value) and name in _TORCH_LAYOUT_OPS and expr.args:
            inner = self.layout(expr.args[0])
            method = ast.Call(func, expr.args[1:], expr.keywords)
            return moved_layout(inner, name, method) if inner is not None else None
        inner = self.layout(func.value)
        if inner is None:  # a module applied to a query (`attn.to_q(x)`, `self.norm(q)`)
            if isinstance(func.value, ast.Name | ast.Attribute) and expr.args:
                if isinstance(func.value, ast.Name) and self.is_table(func.value.id):
                    return None
                return self.layout(expr.args[0])
            return None
        if (name in ("view_as", "reshape_as") and expr.args) or _shape_of(expr) is not None:
            return self._reshaped_as(inner, expr)
        return moved_layout(inner, name, expr)

    def _joined(self, expr: ast.Call, stack: bool) -> Layout | None:
        """`cat` along an axis other than the sequence's, or `stack`, of parts of one layout."""
        if not isinstance(expr.args[0], ast.List | ast.Tuple):
            return None
        parts = [self.layout(e) for e in expr.args[0].elts]
        dim = dim_arg(expr, 1)
        if stack:
            return stacked_layout(parts, dim)
        first = parts[0] if parts else None
        if first is None or dim is None or any(p != first for p in parts):
            return None
        return first if norm_dim(dim, first.rank) != first.seq else None

    def _reshaped_as(self, inner: Layout, expr: ast.Call) -> Layout | None:
        """`t.view_as(x)`, `t.reshape(*x.shape)`: x's layout, when t's already is x's."""
        other = expr.args[0] if callee_name(expr) in ("view_as", "reshape_as") else _shape_of(expr)
        target = self.layout(other) if other is not None else None
        return target if target == inner else None

    def split_layout(self, value: ast.expr) -> Layout | None:
        """`q, k, v = qkv.chunk(3, dim=-1)`: each part keeps the layout."""
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
            return None
        inner = self.layout(value.func.value)
        method = value.func.attr
        if inner is None or method not in ("chunk", "split", "tensor_split", "unbind"):
            return None
        dim = dim_arg(value, 0 if method == "unbind" else 1)
        if dim is None:
            return None
        dim = norm_dim(dim, inner.rank)
        if dim == inner.seq:
            return None
        if method == "unbind":  # `q, k, v = qkv.unbind(2)`: that axis goes
            return Layout(inner.rank - 1, inner.seq - (dim < inner.seq))
        return inner


def _torch(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Name) and expr.id == "torch"


def _shape_of(call: ast.Call) -> ast.expr | None:
    """`x` of `t.reshape(*x.shape)` / `t.view(x.shape)`; None for any other call."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr in ("view", "reshape")):
        return None
    if len(call.args) != 1:
        return None
    arg = call.args[0]
    arg = arg.value if isinstance(arg, ast.Starred) else arg
    if isinstance(arg, ast.Attribute) and arg.attr == "shape":
        return arg.value
    return None
