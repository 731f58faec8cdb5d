"""The layout (rank, sequence axis) of values a function makes from query-like tensors whose
layout it knows, one expression at a time: names, modules applied to them (`attn.to_q(x)`,
`self.norm(q)`), element-wise arithmetic, the layout ops `query_layout.moved_layout` reads, a
reduction over another axis (`t.sum(dim=-1)`), a reshape back to another tensor's shape
(`t.reshape(*x.shape)`, `t.view_as(x)`), parts of a split along another axis (`q, k, v =
qkv.chunk(3, dim=-1)`) and, through `returned`, the functions the code calls.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping

from ..astutil import callee_name
from .query_layout import Layout, dim_arg, moved_layout, norm_dim, rearranged

# the layout a called function returns, from the caller's layouts (None: not read)
Returned = Callable[[ast.Call, Mapping[str, Layout]], Layout | None]

_REDUCTIONS = frozenset({"sum", "mean", "amax", "amin", "prod", "std", "var", "logsumexp"})
_AS_OTHER = frozenset({"view_as", "reshape_as", "expand_as"})
_SPLITS = frozenset({"chunk", "split", "tensor_split", "unbind"})
# calls that move, merge or drop axes: spelled as functions of torch, read as the method
_MOVES = frozenset(
    {"transpose", "swapaxes", "swapdims", "permute", "flatten", "unflatten", "reshape"}
    | _REDUCTIONS
)
_NAMESPACES = frozenset({"torch", "F", "torch.nn.functional"})


def value_layout(
    expr: ast.expr, layouts: Mapping[str, Layout], returned: Returned | None = None
) -> Layout | None:
    """The layout of `expr`, or None when it is not read."""
    if isinstance(expr, ast.Name):
        return layouts.get(expr.id)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
        return value_layout(expr.left, layouts, returned) or value_layout(
            expr.right, layouts, returned
        )
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        return value_layout(expr.operand, layouts, returned)
    if isinstance(expr, ast.IfExp):  # either branch, when the other does not disagree
        found = {value_layout(b, layouts, returned) for b in (expr.body, expr.orelse)} - {None}
        return found.pop() if len(found) == 1 else None
    if not isinstance(expr, ast.Call):
        return None
    func = expr.func
    if callee_name(expr) in ("cat", "concat", "stack") and expr.args:
        return _joined(expr, layouts, returned)
    if isinstance(func, ast.Name):
        if func.id == "rearrange" and len(expr.args) >= 2:
            inner = value_layout(expr.args[0], layouts, returned)
            return rearranged(inner, expr.args[1]) if inner is not None else None
        return returned(expr, layouts) if returned is not None else None
    if not isinstance(func, ast.Attribute):
        return None
    if ast.unparse(func.value) in _NAMESPACES and expr.args and func.attr in _MOVES:
        # `torch.transpose(q, 1, 2)`: the method on its first argument
        method = ast.Attribute(expr.args[0], func.attr, ast.Load())
        return value_layout(ast.Call(method, expr.args[1:], expr.keywords), layouts, returned)
    inner = value_layout(func.value, layouts, returned)
    if inner is None:  # a module or an element-wise function applied to a value
        if isinstance(func.value, ast.Name | ast.Attribute) and expr.args:
            return value_layout(expr.args[0], layouts, returned)
        return None
    return _method_layout(inner, expr, layouts, returned)


def _method_layout(
    inner: Layout, call: ast.Call, layouts: Mapping[str, Layout], returned: Returned | None
) -> Layout | None:
    assert isinstance(call.func, ast.Attribute)
    method = call.func.attr
    if method in _AS_OTHER and call.args:
        return value_layout(call.args[0], layouts, returned)
    other = _other_shape(call)
    if method in ("reshape", "view") and other is not None:
        return value_layout(other, layouts, returned)
    if method in _REDUCTIONS and (call.args or call.keywords):
        dim = dim_arg(call, 0)
        if dim is None or norm_dim(dim, inner.rank) == inner.seq:
            return None
        dim = norm_dim(dim, inner.rank)
        if any(k.arg == "keepdim" and _true(k.value) for k in call.keywords):
            return inner
        return Layout(inner.rank - 1, inner.seq - (dim < inner.seq))
    return moved_layout(inner, method, call)


def _joined(
    call: ast.Call, layouts: Mapping[str, Layout], returned: Returned | None
) -> Layout | None:
    """`torch.cat(parts, dim)` along another axis than the sequence's, `torch.stack(parts, dim)`
    (a new axis), of parts that share one layout."""
    if not isinstance(call.args[0], ast.Tuple | ast.List) or not call.args[0].elts:
        return None
    found = {value_layout(p, layouts, returned) for p in call.args[0].elts}
    dim = dim_arg(call, 1)
    if len(found) != 1 or dim is None:
        return None
    inner = found.pop()
    if inner is None:
        return None
    if callee_name(call) != "stack":
        return inner if norm_dim(dim, inner.rank) != inner.seq else None
    dim = norm_dim(dim, inner.rank + 1)
    return Layout(inner.rank + 1, inner.seq + (dim <= inner.seq))


def unpacked_layouts(
    target: ast.expr, value: ast.expr, layouts: Mapping[str, Layout], returned: Returned | None
) -> dict[str, Layout | None]:
    """The layout each name of an assignment's target gets: `q = ...`, `q, k = a, b`, `q, k, v
    = qkv.chunk(3, dim=-1)`."""
    if isinstance(target, ast.Name):
        return {target.id: value_layout(value, layouts, returned)}
    if not isinstance(target, ast.Tuple | ast.List):
        return {}
    if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
        out: dict[str, Layout | None] = {}
        for part, elt in zip(target.elts, value.elts, strict=True):
            out.update(unpacked_layouts(part, elt, layouts, returned))
        return out
    split = split_layout(value, layouts, returned)
    return {e.id: split for e in target.elts if isinstance(e, ast.Name)}


def _other_shape(call: ast.Call) -> ast.expr | None:
    """`t.reshape(*x.shape)` / `t.view(x.shape)`: the tensor `x` whose shape `t` takes."""
    if len(call.args) != 1:
        return None
    arg = call.args[0]
    arg = arg.value if isinstance(arg, ast.Starred) else arg
    if isinstance(arg, ast.Attribute) and arg.attr == "shape":
        return arg.value
    return None


def _true(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def split_layout(
    value: ast.expr, layouts: Mapping[str, Layout], returned: Returned | None = None
) -> Layout | None:
    """`q, k, v = qkv.chunk(3, dim=-1)`: the layout of each part of a split along another axis
    than the sequence's (`unbind` drops that axis)."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return None
    method = value.func.attr
    inner = value_layout(value.func.value, layouts, returned)
    if inner is None or method not in _SPLITS:
        return None
    dim = dim_arg(value, 0 if method == "unbind" else 1)
    if dim is None or norm_dim(dim, inner.rank) == inner.seq:
        return None
    dim = norm_dim(dim, inner.rank)
    if method == "unbind":
        return Layout(inner.rank - 1, inner.seq - (dim < inner.seq))
    return inner
