"""The layout (rank, sequence axis) of the tensors a function makes from query-like tensors whose
layout it knows, one expression at a time: names bound to layouts, element-wise arithmetic,
modules and element-wise functions applied (`attn.to_q(x)`, `self.norm(q)`), the layout ops
`query_layout.moved_layout` reads and their `torch.` spellings (`torch.transpose(q, 1, 2)`),
subscripts (`qkv[0]`), joins (`cat`, `stack`), `view_as_complex`, einops `rearrange`, a reshape
back to another tensor's shape (`t.reshape(*x.shape)`, `t.view_as(x)`), either branch of a
conditional expression, the parts of a split along another axis (`q, k, v = qkv.chunk(3,
dim=-1)`) and the functions a reader resolves (`called`).

One reader for the position-table use reading (`position_uses`, which follows the queries of
the blocks' attention) and for the windows and reductions of the functions a module hands its
tokens to (`called_windows`, `token_windows`).
"""

from __future__ import annotations

import ast

from ..astutil import callee_name
from .query_layout import (
    REDUCTIONS,
    Layout,
    dim_arg,
    dropped,
    indexed_layout,
    moved_layout,
    norm_dim,
    rearranged,
    stacked,
)

NOT_A_FUNCTION = object()
# `torch.<op>(x, ...)`: the method `x.<op>(...)`, which moves, merges or drops axes (other
# functions of these namespaces keep the layout, as a module applied to the queries does)
_NAMESPACES = ("torch", "F", "torch.nn.functional")
_AS_METHODS = ("transpose", "swapaxes", "swapdims", "permute", "flatten", "unflatten")
_AS_METHODS += ("reshape", "flip", *REDUCTIONS)
_SPLITS = ("chunk", "split", "tensor_split", "unbind")
_AS_OTHER = ("view_as", "reshape_as", "expand_as")
_ELEMENTWISE = ast.Add | ast.Sub | ast.Mult | ast.Div


class ValueLayouts:
    """Layouts of the query-like tensors of one function (`layouts`: the names bound so far)."""

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
        """The layout of `expr`, or None when it is not read."""
        if isinstance(expr, ast.Name):
            return self.layouts.get(expr.id)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, _ELEMENTWISE):
            return self.layout(expr.left) or self.layout(expr.right)
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            return self.layout(expr.operand)
        if isinstance(expr, ast.IfExp):  # either branch, when the other does not disagree
            found = {self.layout(b) for b in (expr.body, expr.orelse)} - {None}
            return found.pop() if len(found) == 1 else None
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
        if ast.unparse(func.value) in _NAMESPACES and name in _AS_METHODS and expr.args:
            inner = self.layout(expr.args[0])
            receiver = ast.Attribute(expr.args[0], name, ast.Load())
            as_method = ast.Call(receiver, expr.args[1:], expr.keywords)
            return self._method_layout(inner, as_method) if inner is not None else None
        inner = self.layout(func.value)
        if inner is None:  # a module applied to a query (`attn.to_q(x)`, `self.norm(q)`)
            if isinstance(func.value, ast.Name | ast.Attribute) and expr.args:
                if isinstance(func.value, ast.Name) and self.is_table(func.value.id):
                    return None
                return self.layout(expr.args[0])
            return None
        return self._method_layout(inner, expr)

    def _method_layout(self, inner: Layout, call: ast.Call) -> Layout | None:
        """A method of a tensor of layout `inner`: a layout op, or a reshape to another tensor's
        shape (that tensor's layout, when the tokens are on the same axis of both)."""
        assert isinstance(call.func, ast.Attribute)
        other = _shape_of(call)
        if other is None:
            return moved_layout(inner, call.func.attr, call)
        target = self.layout(other)
        return target if target is not None and target.seq == inner.seq else None

    def _joined(self, expr: ast.Call, stack: bool) -> Layout | None:
        """`cat` along an axis other than the sequence's, or `stack`, of parts of one layout."""
        if not isinstance(expr.args[0], ast.List | ast.Tuple):
            return None
        parts = [self.layout(e) for e in expr.args[0].elts]
        dim = dim_arg(expr, 1)
        if stack:
            return stacked(parts, dim)
        first = parts[0] if parts else None
        if first is None or dim is None or any(p != first for p in parts):
            return None
        return first if norm_dim(dim, first.rank) != first.seq else None

    def split_layout(self, value: ast.expr) -> Layout | None:
        """`q, k, v = qkv.chunk(3, dim=-1)`: the layout of each part of a split along another
        axis than the sequence's (`unbind` drops that axis)."""
        if _is_rearrange(value):  # `q, k, v = rearrange(qkv, "B L (K H D) -> K B L H D", K=3)`
            whole = self.layout(value)
            return dropped(whole, 0) if whole is not None and whole.seq != 0 else None
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
            return None
        inner = self.layout(value.func.value)
        method = value.func.attr
        if inner is None or method not in _SPLITS:
            return None
        dim = dim_arg(value, 0 if method == "unbind" else 1)
        if method == "unbind":
            return dropped(inner, dim)
        return inner if dim is not None and norm_dim(dim, inner.rank) != inner.seq else None

    def unpacked(self, target: ast.expr, value: ast.expr) -> dict[str, Layout | None]:
        """The layout each name of an assignment's target gets: `q = ...`, `q, k = a, b`, `q, k,
        v = qkv.chunk(3, dim=-1)`."""
        if isinstance(target, ast.Name):
            return {target.id: self.layout(value)}
        if not isinstance(target, ast.Tuple | ast.List):
            return {}
        if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
            out: dict[str, Layout | None] = {}
            for part, elt in zip(target.elts, value.elts, strict=True):
                out.update(self.unpacked(part, elt))
            return out
        split = self.split_layout(value)
        return {e.id: split for e in target.elts if isinstance(e, ast.Name)}


def _is_rearrange(value: ast.expr) -> bool:
    """An einops `rearrange(x, pattern, ...)` call (unpacking its result walks its axis 0)."""
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name | ast.Attribute)
        and (value.func.id if isinstance(value.func, ast.Name) else value.func.attr) == "rearrange"
        and len(value.args) >= 2
    )


def _shape_of(call: ast.Call) -> ast.expr | None:
    """The tensor `x` whose shape a method gives its tensor: `t.view_as(x)`, `t.reshape_as(x)`,
    `t.expand_as(x)`, `t.reshape(*x.shape)`, `t.view(x.shape)`; None for any other call."""
    assert isinstance(call.func, ast.Attribute)
    method = call.func.attr
    if method in _AS_OTHER:
        return call.args[0] if call.args else None
    if method not in ("view", "reshape") or len(call.args) != 1:
        return None
    arg = call.args[0]
    arg = arg.value if isinstance(arg, ast.Starred) else arg
    return arg.value if isinstance(arg, ast.Attribute) and arg.attr == "shape" else None
