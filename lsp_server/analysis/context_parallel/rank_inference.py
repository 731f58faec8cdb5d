"""The rank of the tensors a position module returns, read from their outermost reshape."""

from __future__ import annotations

import ast
from collections.abc import Callable

from ..astutil import (
    int_literal,
    registered_buffer,
    self_attr,
    walk_local,
)
from .axis_syntax import POINTWISE, shape_prefix

_RESHAPES = ("view", "reshape", "expand", "repeat")


def return_ranks(func: ast.FunctionDef, owner: ast.ClassDef | None) -> list[int | None]:
    """The rank of each value the function returns (None where no reshape gives it)."""
    shape = _Shapes(func, owner, 0)
    for node in walk_local(func):
        if isinstance(node, ast.Return) and node.value is not None:
            elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            return [shape.ndim(e, 0) for e in elts]
    return []


def _return_shape(
    func: ast.FunctionDef, owner: ast.ClassDef | None = None, depth: int = 0
) -> tuple[int | None, int]:
    """(dims of the first returned tensor, number of returned values) of a position module."""
    shape = _Shapes(func, owner, depth)
    for node in walk_local(func):
        if isinstance(node, ast.Return) and node.value is not None:
            elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            return shape.ndim(elts[0], 0), len(elts)
    return None, 0


class _Shapes:
    """Follows a returned value back to its outermost reshape: through local assignments, lists
    filled with `append` and concatenated, and helper methods of the same class."""

    def __init__(self, func: ast.FunctionDef, owner: ast.ClassDef | None, depth: int) -> None:
        self.owner = owner
        self.depth = depth
        self.assigns: dict[str, ast.expr] = {}
        self.appended: dict[str, ast.expr] = {}
        nodes = sorted(
            (n for n in walk_local(func) if isinstance(n, ast.Assign | ast.Expr)),
            key=lambda n: n.lineno,
        )
        for node in nodes:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.assigns[target.id] = node.value
            elif (
                isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "append"
                and isinstance(node.value.func.value, ast.Name)
                and node.value.args
            ):
                self.appended.setdefault(node.value.func.value.id, node.value.args[0])

    def ndim(self, expr: ast.expr, depth: int) -> int | None:
        if depth > 10:
            return None
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            attr = expr.func.attr
            if attr in _RESHAPES and expr.args and attr != "repeat":
                if len(expr.args) == 1 and isinstance(expr.args[0], ast.Tuple):
                    return len(expr.args[0].elts)
                if not any(isinstance(a, ast.Starred) for a in expr.args):
                    return len(expr.args)
                return None
            if attr == "unsqueeze":
                inner = self.ndim(expr.func.value, depth + 1)
                return inner + 1 if inner is not None else None
            if attr in ("flatten", "squeeze", "stack"):
                return None
            if attr in ("cat", "concat") and expr.args:
                first = expr.args[0]
                if isinstance(first, ast.List | ast.Tuple) and first.elts:
                    return self.ndim(first.elts[0], depth + 1)
                if isinstance(first, ast.Name) and first.id in self.appended:
                    return self.ndim(self.appended[first.id], depth + 1)
                return None
            method = self_attr(expr.func)
            if method and self.owner is not None and self.depth < 2:
                helper = next(
                    (
                        f
                        for f in self.owner.body
                        if isinstance(f, ast.FunctionDef) and f.name == method
                    ),
                    None,
                )
                if helper is not None:
                    return _return_shape(helper, self.owner, self.depth + 1)[0]
            return self.ndim(expr.func.value, depth + 1)  # .float(), .to(...), .contiguous()
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            value = self.assigns[expr.id]
            if value is not expr:
                return self.ndim(value, depth + 1)
        return None


_SAME_RANK = (*POINTWISE, "neg", "sqrt", "rsqrt", "abs")


class ExactRanks:
    """The exact rank of a local tensor expression where every step shows it: a table attribute
    of the class (a buffer `register_buffer("t", torch.outer(...))` or parameter built in
    `__init__`) indexed by a 1-D position vector, `stack` (+1), `unsqueeze` (+1), `cat` (the
    parts'), `flatten(a, b)`, element-wise ops and `view(*t.shape[:-k], a, b)` (k axes replaced
    by the sizes after them). Used to place negative axes (`unsqueeze(-4)`) that depend on it."""

    def __init__(
        self,
        assigns: dict[str, tuple[ast.expr, int | None]],
        owner: ast.ClassDef | None,
        is_vector: Callable[[ast.expr], bool],
    ) -> None:
        self.assigns = assigns
        self.owner = owner
        self.is_vector = is_vector

    def rank(self, expr: ast.expr, depth: int = 0) -> int | None:
        if depth > 16:
            return None
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            value, index = self.assigns[expr.id]
            return self.rank(value, depth + 1) if index is None else None
        if self.is_vector(expr):
            return 1
        if isinstance(expr, ast.Subscript):
            table = self_attr(expr.value)
            if table is not None and self.is_vector(expr.slice):
                return _attribute_rank(self.owner, table)  # rows picked: one axis for one
            return _unit_axes(self.rank(expr.value, depth + 1), expr.slice)
        if isinstance(expr, ast.BinOp):
            sides = [
                self.rank(s, depth + 1)
                for s in (expr.left, expr.right)
                if not _number(s) and not self.scalar(s)
            ]
            if len(sides) == 1 or None in sides:
                return sides[0] if len(sides) == 1 else None
            return max(r for r in sides if r is not None)  # broadcasting: the wider side's
        if isinstance(expr, ast.UnaryOp):
            return self.rank(expr.operand, depth + 1)
        if not isinstance(expr, ast.Call):
            return None
        return self._call_rank(expr, depth)

    def scalar(self, expr: ast.expr, depth: int = 0) -> bool:
        """A Python number by construction: a literal, arithmetic of numbers, a local or a
        `self` attribute computed from them or from the constructor's numeric parameters
        (`quarter = self.head_dim // 4` with `self.head_dim = dim // heads`, `dim: int`)."""
        if depth > 8:
            return False
        if _number(expr):
            return True
        if isinstance(expr, ast.BinOp):
            return self.scalar(expr.left, depth + 1) and self.scalar(expr.right, depth + 1)
        if isinstance(expr, ast.UnaryOp):
            return self.scalar(expr.operand, depth + 1)
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            value, index = self.assigns[expr.id]
            return index is None and self.scalar(value, depth + 1)
        attr = self_attr(expr)
        return attr is not None and _numeric_attribute(self.owner, attr)

    def _call_rank(self, expr: ast.Call, depth: int) -> int | None:
        func = expr.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        on_torch = isinstance(func, ast.Attribute) and _is_torch(func.value)
        value = func.value if isinstance(func, ast.Attribute) and not on_torch else None
        if name in ("stack", "cat", "concat") and expr.args:
            first = expr.args[0]
            if not (isinstance(first, ast.List | ast.Tuple) and first.elts):
                return None
            parts = _same([self.rank(e, depth + 1) for e in first.elts])
            return None if parts is None else parts + (name == "stack")
        if name in _SAME_RANK:
            inner = value if value is not None else (expr.args[0] if expr.args else None)
            return self.rank(inner, depth + 1) if inner is not None else None
        if value is None:
            return None
        inner_rank = self.rank(value, depth + 1)
        if name == "unsqueeze":
            return None if inner_rank is None else inner_rank + 1
        if name == "flatten":
            return _flattened(inner_rank, expr)
        if name in ("view", "reshape"):
            return _reshaped(inner_rank, expr)
        return None


def _unit_axes(inner: int | None, index: ast.expr) -> int | None:
    """`t[:, None]`: the rank plus the new unit axes, when the subscript only adds them (full
    slices for every axis of `t`)."""
    if inner is None:
        return None
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    new = sum(isinstance(p, ast.Constant) and p.value is None for p in parts)
    full = [
        p
        for p in parts
        if isinstance(p, ast.Slice) and p.lower is None and p.upper is None and p.step is None
    ]
    if not new or new + len(full) != len(parts) or len(full) > inner:
        return None
    return inner + new


def _reshaped(inner: int | None, call: ast.Call) -> int | None:
    """`view(a, b)` / `view((a, b))`: 2; `view(*t.shape[:-k], a, b)`: rank - k + 2."""
    args = list(call.args)
    if len(args) == 1 and isinstance(args[0], ast.Tuple | ast.List):
        args = list(args[0].elts)
    starred = [a for a in args if isinstance(a, ast.Starred)]
    if not starred:
        return len(args)
    first = args[0]
    if len(starred) != 1 or first is not starred[0] or inner is None:
        return None
    kept = shape_prefix(first.value, inner)
    return kept + len(args) - 1 if kept is not None else None


def _flattened(inner: int | None, call: ast.Call) -> int | None:
    if inner is None:
        return None
    if not call.args and not call.keywords:
        return 1
    ends = [int_literal(a) for a in call.args[:2]]
    if len(ends) == 1:
        ends.append(-1)
    if len(ends) != 2 or any(e is None for e in ends):
        return None
    start, end = (e if e >= 0 else inner + e for e in ends if e is not None)
    return inner - (end - start) if 0 <= start <= end < inner else None


def _numeric_attribute(owner: ast.ClassDef | None, attr: str) -> bool:
    """`self.<attr>` is bound in `__init__` to arithmetic of numbers and the constructor's
    numeric parameters (annotated `int` / `float`, or with a number as default)."""
    body = owner.body if owner is not None else []
    init = next((f for f in body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None:
        return False
    args = [*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs]
    defaults = dict(zip([a.arg for a in args[len(args) - len(init.args.defaults) :]],
                        init.args.defaults, strict=False))  # fmt: skip
    defaults.update(
        {a.arg: d for a, d in zip(init.args.kwonlyargs, init.args.kw_defaults, strict=True) if d}
    )
    numeric = {
        a.arg
        for a in args
        if (isinstance(a.annotation, ast.Name) and a.annotation.id in ("int", "float"))
        or (a.arg in defaults and _number(defaults[a.arg]))
    }

    def numeric_expr(node: ast.expr, depth: int) -> bool:
        if depth > 8:
            return False
        if _number(node) or (isinstance(node, ast.Name) and node.id in numeric):
            return True
        if isinstance(node, ast.BinOp):
            return numeric_expr(node.left, depth + 1) and numeric_expr(node.right, depth + 1)
        inner = self_attr(node)
        return (
            inner is not None
            and inner != attr
            and inner in bound
            and numeric_expr(bound[inner], depth + 1)
        )

    bound: dict[str, ast.expr] = {}
    for node in walk_local(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = self_attr(node.targets[0])
            if name is not None:
                bound.setdefault(name, node.value)
    return attr in bound and numeric_expr(bound[attr], 0)


def _attribute_rank(owner: ast.ClassDef | None, attr: str) -> int | None:
    """The rank of a tensor attribute built in `__init__` (a buffer or a parameter)."""
    body = owner.body if owner is not None else []
    init = next((f for f in body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None:
        return None
    locals_: dict[str, ast.expr] = {}
    for node in walk_local(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                locals_.setdefault(target.id, node.value)
            elif self_attr(target) == attr:
                return _built_rank(node.value, locals_, 0)
        buffer = registered_buffer(node)
        if buffer is not None and buffer[0] == attr:
            return _built_rank(buffer[1], locals_, 0)
    return None


def _built_rank(expr: ast.expr, locals_: dict[str, ast.expr], depth: int) -> int | None:
    """The rank of a tensor built in `__init__`: `outer` (2), `arange`/`linspace` (1), a factory
    with its sizes spelled out, `cat`/`stack` of such parts, `nn.Parameter(...)`, element-wise."""
    if depth > 10:
        return None
    if isinstance(expr, ast.Name) and expr.id in locals_:
        return _built_rank(locals_[expr.id], locals_, depth + 1)
    if isinstance(expr, ast.BinOp):
        operands = [s for s in (expr.left, expr.right) if not _number(s)]
        sides = [_built_rank(s, locals_, depth + 1) for s in operands]
        return sides[0] if len(sides) == 1 else _same(sides)
    if not isinstance(expr, ast.Call):
        return None
    func = expr.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name == "outer":
        return 2
    if name in ("arange", "linspace"):
        return 1
    if name in ("zeros", "ones", "empty", "randn", "rand"):
        sizes = expr.args
        if len(sizes) == 1 and isinstance(sizes[0], ast.Tuple | ast.List):
            sizes = sizes[0].elts
        return len(sizes) if sizes and not any(isinstance(s, ast.Starred) for s in sizes) else None
    if name in ("cat", "concat", "stack") and expr.args:
        first = expr.args[0]
        if isinstance(first, ast.List | ast.Tuple) and first.elts:
            parts = _same([_built_rank(e, locals_, depth + 1) for e in first.elts])
            return None if parts is None else parts + (name == "stack")
        return None
    if name == "Parameter" and expr.args:
        return _built_rank(expr.args[0], locals_, depth + 1)
    if name in _SAME_RANK:
        if isinstance(func, ast.Attribute) and not _is_torch(func.value):
            return _built_rank(func.value, locals_, depth + 1)
        return _built_rank(expr.args[0], locals_, depth + 1) if expr.args else None
    return None


def _same(ranks: list[int | None]) -> int | None:
    known = set(ranks)
    return ranks[0] if len(known) == 1 and ranks and ranks[0] is not None else None


def _number(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float)


def _is_torch(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "torch"
