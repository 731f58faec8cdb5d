"""Expression evaluation of the interpreter over the abstract values (`values.py`): names,
attributes, arithmetic on known scalars (config values and defaults), three-valued comparisons and
truth tests (`is None` on tensors, modules and `None` constants), conditional expressions, tuples
and comprehensions. Calls, attributes, subscripts and operators on tensors are hooks implemented by
the subclasses (`calls.py`, `operators.py`).
"""

from __future__ import annotations

import ast
import operator
from typing import Any

from .frame import Frame
from .values import (
    BCAST,
    MODULATED,
    NORMED,
    UNKNOWN,
    WIDTH,
    Alt,
    Lazy,
    Mono,
    Obj,
    Ref,
    Scalar,
    Tensor,
    Tup,
    is_none,
    join,
    mono_combine,
    monomial,
)

_ARITH = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}

_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


class Expressions:
    """Evaluation of expressions; the hooks below are implemented by the subclasses."""

    def call(self, node: ast.Call, frame: Frame) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def get_attr(self, base: Any, attr: str, frame: Frame) -> Any:  # pragma: no cover
        raise NotImplementedError

    def global_name(self, name: str, frame: Frame) -> Any:  # pragma: no cover
        raise NotImplementedError

    def binop(self, a: Any, b: Any, op: ast.operator, frame: Frame, line: int) -> Any:
        raise NotImplementedError  # pragma: no cover

    def subscript(self, base: Any, index: ast.expr, frame: Frame) -> Any:  # pragma: no cover
        raise NotImplementedError

    def iterate(self, value: Any) -> list[Any] | None:  # pragma: no cover
        raise NotImplementedError

    def assign(self, target: ast.expr, value: Any, frame: Frame) -> None:  # pragma: no cover
        raise NotImplementedError

    def element_of(self, value: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def eval(self, node: ast.expr, frame: Frame) -> Any:
        method = getattr(self, "_e_" + type(node).__name__, None)
        if method is None:
            return Scalar()
        return method(node, frame)

    def _e_Constant(self, node: ast.Constant, frame: Frame) -> Any:
        return Scalar(node.value)

    def _e_Name(self, node: ast.Name, frame: Frame) -> Any:
        if node.id in frame.env:
            return frame.env[node.id]
        found = self.global_name(node.id, frame)
        return Scalar() if found is None else found

    def _e_Attribute(self, node: ast.Attribute, frame: Frame) -> Any:
        return self.get_attr(self.eval(node.value, frame), node.attr, frame)

    def _e_Subscript(self, node: ast.Subscript, frame: Frame) -> Any:
        return self.subscript(self.eval(node.value, frame), node.slice, frame)

    def _e_Call(self, node: ast.Call, frame: Frame) -> Any:
        return self.call(node, frame)

    def _e_BinOp(self, node: ast.BinOp, frame: Frame) -> Any:
        left = self.eval(node.left, frame)
        right = self.eval(node.right, frame)
        return self.binop(left, right, node.op, frame, node.lineno)

    def _e_UnaryOp(self, node: ast.UnaryOp, frame: Frame) -> Any:
        value = self.eval(node.operand, frame)
        if isinstance(node.op, ast.Not):
            truth, var = self.truth(value)
            return Scalar(UNKNOWN if truth is None else not truth, var)
        numeric = isinstance(value, Scalar) and isinstance(value.value, int | float)
        if numeric and isinstance(node.op, ast.USub):
            return Scalar(-value.value, value.var, value.deps, value.mono)
        if isinstance(value, Tensor | Scalar):
            if isinstance(value, Tensor):
                return value
            mono = value.mono if isinstance(node.op, ast.USub | ast.UAdd) else None
            return Scalar(UNKNOWN, value.var, value.deps, mono)
        return Scalar()

    def _e_BoolOp(self, node: ast.BoolOp, frame: Frame) -> Any:
        result = self.eval(node.values[0], frame)
        for expr in node.values[1:]:
            truth, var = self.truth(result)
            is_and = isinstance(node.op, ast.And)
            if truth is not None and not var:
                if truth != is_and:  # `False and x` / `True or x` short-circuit
                    return result
                result = self.eval(expr, frame)
            else:
                nxt = self.eval(expr, frame)
                if isinstance(result, Scalar) and isinstance(nxt, Scalar):
                    t2, v2 = self.truth(nxt)
                    if truth is not None and t2 is not None:
                        # Python's operands, not booleans: `dim_a or dim` is a size.
                        picked = nxt if truth == is_and else result
                        result = Scalar(picked.value, var or v2, result.deps | nxt.deps)
                        continue
                    result = Scalar(UNKNOWN, var or v2, result.deps | nxt.deps)
                else:
                    result = join(result, nxt)
        return result

    def _e_Compare(self, node: ast.Compare, frame: Frame) -> Any:
        left = self.eval(node.left, frame)
        out: Any = Scalar(True)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = self.eval(comp, frame)
            step = self.compare(left, op, right)
            out = step if out.value is True and not out.var else _and(out, step)
            left = right
        return out

    def compare(self, left: Any, op: ast.cmpop, right: Any) -> Scalar:
        if isinstance(op, ast.Is | ast.IsNot):
            if is_none(right) or is_none(left):
                other = left if is_none(right) else right
                result = _is_none(other)
                if result.known and isinstance(op, ast.IsNot):
                    return Scalar(not result.value, result.var)
                return result
            return Scalar()
        if isinstance(left, Scalar) and isinstance(right, Scalar):
            var = left.var or right.var
            deps = left.deps | right.deps
            if left.known and right.known:
                fn = _COMPARE.get(type(op))
                try:
                    if fn is not None:
                        return Scalar(bool(fn(left.value, right.value)), var, deps)
                    if isinstance(op, ast.In | ast.NotIn) and isinstance(right.value, str):
                        found = left.value in right.value
                        return Scalar(found if isinstance(op, ast.In) else not found, var, deps)
                except TypeError:
                    return Scalar(UNKNOWN, var, deps)
            return Scalar(UNKNOWN, var, deps)
        if (
            isinstance(op, ast.In | ast.NotIn)
            and isinstance(left, Scalar)
            and left.known
            and isinstance(right, Tup)
            and all(isinstance(i, Scalar) and i.known for i in right.items)
        ):
            found = any(i.value == left.value for i in right.items)
            var = left.var or any(i.var for i in right.items)
            return Scalar(found if isinstance(op, ast.In) else not found, var)
        return Scalar()

    def _e_IfExp(self, node: ast.IfExp, frame: Frame) -> Any:
        truth, var = self.truth(self.eval(node.test, frame))
        if truth is not None and not var:
            return self.eval(node.body if truth else node.orelse, frame)
        if truth is not None and frame.building is not None:
            return self.eval(node.body if truth else node.orelse, frame)
        return join(self.eval(node.body, frame), self.eval(node.orelse, frame))

    def _e_Tuple(self, node: ast.Tuple | ast.List, frame: Frame) -> Any:
        items: list[Any] = []
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                value = self.eval(elt.value, frame)
                expanded = self.iterate(value)
                items += expanded if expanded is not None else [self.element_of(value)]
            else:
                items.append(self.eval(elt, frame))
        return Tup(tuple(items))

    def _e_ListComp(self, node: ast.ListComp | ast.GeneratorExp, frame: Frame) -> Any:
        inner = frame.fork()
        for gen in node.generators:
            self.assign(gen.target, self.element_of(self.eval(gen.iter, inner)), inner)
        return Tup((self.eval(node.elt, inner),))

    def _e_DictComp(self, node: ast.DictComp, frame: Frame) -> Any:
        return Scalar()

    def _e_Starred(self, node: ast.Starred, frame: Frame) -> Any:
        return self.eval(node.value, frame)

    def _e_NamedExpr(self, node: ast.NamedExpr, frame: Frame) -> Any:
        value = self.eval(node.value, frame)
        self.assign(node.target, value, frame)
        return value

    def truth(self, value: Any) -> tuple[bool | None, bool]:
        """(truth value or None when unknown, whether it depends on a config default)."""
        if isinstance(value, Scalar):
            if not value.known:
                return None, value.var
            try:
                return bool(value.value), value.var
            except Exception:  # pragma: no cover - odd constants
                return None, value.var
        if isinstance(value, Tensor):
            return (None, False) if "maybe_none" in value.flags else (True, False)
        if isinstance(value, Tup):
            return bool(value.items), False
        if isinstance(value, Alt):
            results = {self.truth(o) for o in value.options}
            return results.pop() if len(results) == 1 else (None, False)
        return True, False

    _e_List = _e_Tuple

    _e_GeneratorExp = _e_ListComp

    _e_SetComp = _e_ListComp


def arith(a: Scalar, b: Scalar, op: ast.operator) -> Scalar:
    var, deps = a.var or b.var, a.deps | b.deps
    mono = _arith_mono(a, b, op)
    whole = WIDTH if WIDTH in (a.whole, b.whole) else ""  # `C // self.num_heads`
    fn = _ARITH.get(type(op))
    if fn is not None and a.known and b.known:
        try:
            return Scalar(fn(a.value, b.value), var, deps, mono, whole)
        except Exception:
            return Scalar(UNKNOWN, var, deps, mono, whole)
    return Scalar(UNKNOWN, var, deps, mono, whole)


def _arith_mono(a: Scalar, b: Scalar, op: ast.operator) -> Mono | None:
    """How `a <op> b` scales with module attributes (products and quotients; a sum only of like
    terms; None otherwise)."""
    ma, mb = monomial(a), monomial(b)
    if isinstance(op, ast.Mult):
        return mono_combine(ma, mb, 1)
    if isinstance(op, ast.Div | ast.FloorDiv):
        return mono_combine(ma, mb, -1)
    if isinstance(op, ast.Add | ast.Sub):
        if ma == mb:
            return ma
        if ma == () and a.known and a.value == 0:
            return mb
        if mb == () and b.known and b.value == 0:
            return ma
        return None
    if isinstance(op, ast.Pow) and b.known and isinstance(b.value, int) and ma is not None:
        return tuple((k, e * b.value) for k, e in ma if e * b.value)
    return () if ma == () and mb == () else None


def modulation_side(a: Tensor, b: Tensor, product: bool) -> Tensor | None:
    """Whether `a` modulates `b`: a projection broadcast over tokens, or scaling a norm's output."""
    if not a.srcs:
        return None
    if BCAST in a.flags and BCAST not in b.flags:
        return a
    if product and NORMED in b.flags and NORMED not in a.flags:
        return a
    if not product and MODULATED in b.flags and MODULATED not in a.flags:
        return a  # the shift added to a scaled normalized stream
    return None


def _is_none(value: Any) -> Scalar:
    if isinstance(value, Scalar):
        if value.known:
            return Scalar(value.value is None, value.var)
        return Scalar(UNKNOWN, value.var)
    if isinstance(value, Tensor):
        return Scalar(UNKNOWN) if "maybe_none" in value.flags else Scalar(False)
    if isinstance(value, Alt):
        results = [_is_none(o) for o in value.options]
        if all(r.known for r in results) and len({r.value for r in results}) == 1:
            return results[0]
        return Scalar()
    if isinstance(value, Lazy | Obj | Ref | Tup):
        return Scalar(False)
    return Scalar(False) if value is not None else Scalar(True)


def _and(a: Scalar, b: Scalar) -> Scalar:
    if a.known and b.known:
        return Scalar(bool(a.value) and bool(b.value), a.var or b.var)
    if (a.known and not a.value and not a.var) or (b.known and not b.value and not b.var):
        return Scalar(False)
    return Scalar(UNKNOWN, a.var or b.var)
