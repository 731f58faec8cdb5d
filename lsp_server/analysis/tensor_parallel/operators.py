"""Operators of the interpreter: attribute lookup (modules, processors, classes, `super()`),
subscripts (container children, tuple items, `[:, None]` broadcasts, halves of packed projections,
module-level dict literals), builtins (`len`, `getattr`, `zip`, `map`, ...), and binary operators on
tensors: the product of two projections is a gating nonlinearity; a projection broadcast over
tokens, scaling a normalized stream or a replicated row-projection output is a modulation; an
unprojected attention output added to a stream ends its sharded region.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from ..sources import ClassRef
from .expressions import arith, modulation_side
from .frame import Frame
from .modules import ModuleBuilder
from .ops import REDUCED
from .resolve import EXTERNAL_ROOTS
from .trace import MODULE, AttnCall, Event, Node
from .values import (
    ACT,
    ATTN,
    BCAST,
    HEADS,
    MODULATED,
    NORMED,
    RAW,
    ROWOUT,
    SCORES,
    SHAPE,
    UNKNOWN,
    WIDTH,
    Alt,
    Bound,
    DictLit,
    Lazy,
    Obj,
    Ref,
    Scalar,
    Tensor,
    Tup,
    join,
    monomial,
    tensors_in,
    union,
    unsharded_shape,
)


@dataclass(frozen=True)
class _Deferred:
    """An imported name not read yet (the file is parsed only if the call needs it)."""

    name: str
    source: Any


@dataclass(frozen=True)
class _Super:
    cls: ClassRef
    receiver: Any


@dataclass(frozen=True)
class _Lambda:
    node: ast.Lambda
    frame: Frame


class Operators(ModuleBuilder):
    """Attributes, subscripts, builtins and operators; `calls.Calls` adds call dispatch."""

    def apply(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def global_name(self, name: str, frame: Frame) -> Any:
        if name in frame.source.top_level:
            return self.names.lookup(frame.source, name)
        imp = frame.source.imports.get(name)
        if imp is not None and not imp[1] and imp[0].split(".")[0] in EXTERNAL_ROOTS:
            return Ref("ext", self.names.qualified(frame.source, name))
        if imp is not None:
            return _Deferred(name, frame.source)
        return self.names.lookup(frame.source, name)

    def undefer(self, value: Any) -> Any:
        if isinstance(value, _Deferred):
            found = self.names.lookup(value.source, value.name)
            return Scalar() if found is None else found
        return value

    def builtin(self, name: str, args: list, kwargs: dict, frame: Frame) -> Any:
        first = args[0] if args else Scalar()
        if name == "super":
            if frame.cls is not None:
                return _Super(frame.cls, frame.receiver)
            return Scalar()
        if name in ("getattr", "hasattr") and len(args) > 1:
            return self._builtin_getattr(name, args, frame)
        if name == "len":
            items = self.iterate(first)
            return Scalar(len(items)) if items is not None else Scalar()
        if name in ("int", "float", "bool", "str", "abs", "round") and isinstance(first, Scalar):
            return _builtin_conversion(name, first)
        if name in ("min", "max") and args and all(isinstance(a, Scalar) for a in args):
            return _builtin_min_max(name, args)
        if name in ("tuple", "list", "sorted", "reversed") and args:
            items = self.iterate(first)
            return Tup(tuple(items)) if items is not None else first
        if name == "enumerate":
            items = self.iterate(first)
            if items is None:
                return Scalar()
            return Tup(tuple(Tup((Scalar(i), item)) for i, item in enumerate(items)))
        if name == "zip":
            return self._builtin_zip(args)
        if name == "map" and len(args) > 1:
            items = self.iterate(args[1])
            if items is None:
                return Scalar()
            dummy = ast.Call(func=ast.Name("f"), args=[], keywords=[], lineno=0)
            return Tup(tuple(self.apply(first, "", [i], {}, dummy, frame) for i in items))
        if name == "sum":
            return self._builtin_sum(first)
        return Scalar()

    def _builtin_getattr(self, name: str, args: list, frame: Frame) -> Any:
        """`getattr(obj, "attr"[, default])` / `hasattr(obj, "attr")` with a known name."""
        first = args[0]
        attr = args[1].value if isinstance(args[1], Scalar) else None
        if not isinstance(attr, str):
            return Scalar()
        found = self.lookup_attr(first, attr, frame)
        if name == "hasattr":
            return Scalar(found is not None)
        if found is None:
            return args[2] if len(args) > 2 else Scalar()
        return found

    def _builtin_zip(self, args: list) -> Any:
        columns = [self.iterate(a) for a in args]
        known = [len(c) for c in columns if c is not None]
        count = min(known) if known else 1
        rows = []
        for i in range(count):
            rows.append(
                Tup(
                    tuple(
                        c[i] if c is not None else self.element_of(a)
                        for c, a in zip(columns, args, strict=True)
                    )
                )
            )
        return Tup(tuple(rows))

    def _builtin_sum(self, first: Any) -> Any:
        items = self.iterate(first)
        if items is None or any(isinstance(i, Tensor) for i in items):
            return union(items or [first]) if tensors_in(first) or items else Scalar()
        total = Scalar(0)
        for item in items:
            total = arith(total, item if isinstance(item, Scalar) else Scalar(), ast.Add())
        return total

    def _e_Lambda(self, node: ast.Lambda, frame: Frame) -> Any:
        return _Lambda(node, frame)

    def get_attr(self, base: Any, attr: str, frame: Frame) -> Any:
        found = self.lookup_attr(base, attr, frame)
        return Scalar() if found is None else found

    def lookup_attr(self, base: Any, attr: str, frame: Frame) -> Any:
        if isinstance(base, _Deferred):
            base = self.undefer(base)
        if isinstance(base, Lazy):
            base = self.materialize(base)
        if isinstance(base, Alt):
            out: Any = None
            for option in base.options:
                value = self.lookup_attr(option, attr, frame)
                if value is not None:
                    out = join(out, value)
            return out
        if isinstance(base, Node):
            self.build(base)
            if attr not in base.children and attr not in base.attrs and base.kind == MODULE:
                value = self.node_attr(base, attr, frame)
                return (
                    None
                    if isinstance(value, Scalar) and not value.known and not value.deps
                    else value
                )
            return self.node_attr(base, attr, frame)
        if isinstance(base, Obj):
            if attr in base.attrs:
                return base.attrs[attr]
            return self.class_attr(base.cls.class_ref(), attr, base)
        if isinstance(base, _Super):
            for ancestor in self.resolver.iter_mro(base.cls):
                if ancestor is base.cls or ancestor.qualname == base.cls.qualname:
                    continue
                if ancestor.node is None:
                    return _Super(base.cls, base.receiver)  # torch base: a no-op
                for stmt in ancestor.node.body:
                    if isinstance(stmt, ast.FunctionDef) and stmt.name == attr:
                        return Bound(stmt, ancestor.source, ancestor, base.receiver)  # type: ignore[arg-type]
            return _Super(base.cls, base.receiver)
        if isinstance(base, Ref):
            if base.kind == "class":
                if attr == "apply" and _is_autograd_function(base):
                    self.trace.unsafe.append(
                        Event(frozenset(), str(frame.source.path), 0, f"{base.qualname}.apply")
                    )
                    return Ref("ext", f"{base.qualname}.apply")
                return self.class_attr(base.class_ref(), attr, None)
            return self.names.member(base, attr)
        if isinstance(base, Tensor):
            if attr in ("T", "mT", "real", "imag", "data"):
                return base
            return unsharded_shape(base) if attr == "shape" else Scalar()
        if isinstance(base, Scalar):
            return Scalar(UNKNOWN, base.var, base.deps)
        return None

    def subscript(self, base: Any, index: ast.expr, frame: Frame) -> Any:
        key = self.eval(index, frame) if not isinstance(index, ast.Slice | ast.Tuple) else None
        if isinstance(base, Lazy):
            base = self.materialize(base)
        if isinstance(base, Node):
            self.build(base)
            if isinstance(key, Scalar) and key.known:
                names = list(base.children)
                k = key.value
                if isinstance(k, int) and names and -len(names) <= k < len(names):
                    return self.child(base, names[k])
                if isinstance(k, str) and k in base.children:
                    return self.child(base, k)
            return Scalar()
        if isinstance(base, Tup):
            if (
                isinstance(key, Scalar)
                and isinstance(key.value, int)
                and -len(base.items) <= key.value < len(base.items)
            ):
                return base.items[key.value]
            if isinstance(index, ast.Slice):
                return base
            return self.element_of(base)
        if isinstance(base, Tensor):
            parts = index.elts if isinstance(index, ast.Tuple) else [index]
            if any(isinstance(p, ast.Constant) and p.value is None for p in parts):
                return base.with_flags((BCAST,), (NORMED,))
            last = parts[-1]
            if (
                base.srcs
                and len(parts) > 1
                and isinstance(parts[0], ast.Constant)
                and parts[0].value is Ellipsis
                and isinstance(last, ast.Slice)
                and last.step is None
                and (last.lower is None) != (last.upper is None)
            ):  # x[..., :half] / x[..., half:]: halves of a packed projection
                self.trace.chunks.append(
                    Event(frozenset(base.linears()), str(frame.source.path), index.lineno, "2")
                )
            return base.with_flags((), (NORMED,))
        if isinstance(base, Alt):
            out: Any = None
            for option in base.options:
                out = join(out, self.subscript(option, index, frame))
            return out
        if isinstance(base, DictLit):
            context = Frame({}, base.source)
            picked: Any = None
            for k, expr in zip(base.node.keys, base.node.values, strict=True):
                exact = isinstance(k, ast.Constant) and isinstance(key, Scalar) and key.known
                if exact and k.value == key.value:  # type: ignore[union-attr]
                    return self.eval(expr, context)
                if not (isinstance(key, Scalar) and key.known):
                    picked = join(picked, self.eval(expr, context))
            return Scalar() if picked is None else picked
        if isinstance(base, Scalar):
            if isinstance(key, Scalar) and base.known and key.known:
                try:
                    return Scalar(base.value[key.value], base.var, base.deps)
                except Exception:
                    pass
            return Scalar(UNKNOWN, base.var, base.deps, whole=_shape_item(base, key, index))
        return Scalar()

    def matmul(self, a: Tensor, b: Tensor, frame: Frame, line: int) -> Tensor:
        """`q @ k.T` gives attention scores; `scores @ v` completes a hand-written attention."""
        heads = (HEADS,) if HEADS in a.flags | b.flags else ()
        if not (a.srcs and b.srcs):
            return (a if a.srcs else b).with_flags((), (NORMED, BCAST))
        if SCORES in a.flags or SCORES in b.flags:
            scores, value = (a, b) if SCORES in a.flags else (b, a)
            owner = frame.owner if isinstance(frame.owner, Node) else None
            call = AttnCall(owner, scores, scores, value, "matmul", str(frame.source.path), line)
            self.trace.attn_calls.append(call)
            return Tensor(a.srcs | b.srcs, frozenset(heads)).with_via(ATTN)
        return Tensor(a.srcs | b.srcs, frozenset((SCORES, *heads))).with_via(ACT)

    def binop(self, a: Any, b: Any, op: ast.operator, frame: Frame, line: int) -> Any:
        if isinstance(a, Alt) or isinstance(b, Alt):
            out: Any = None
            for x in a.options if isinstance(a, Alt) else (a,):
                for y in b.options if isinstance(b, Alt) else (b,):
                    out = join(out, self.binop(x, y, op, frame, line))
            return out
        if isinstance(a, Tensor) and isinstance(b, Tensor):
            return self.tensor_binop(a, b, op, frame, line)
        if isinstance(a, Tensor):
            return a.with_flags((), (NORMED,))
        if isinstance(b, Tensor):
            return b.with_flags((), (NORMED,))
        if isinstance(a, Scalar) and isinstance(b, Scalar):
            return arith(a, b, op)
        if isinstance(a, Tup) and isinstance(b, Tup) and isinstance(op, ast.Add):
            return Tup(a.items + b.items)
        if isinstance(a, Tup) and isinstance(b, Scalar) and isinstance(b.value, int):
            return Tup(a.items * max(0, min(b.value, 16)))
        return Scalar()

    def tensor_binop(
        self, a: Tensor, b: Tensor, op: ast.operator, frame: Frame, line: int
    ) -> Tensor:
        if isinstance(op, ast.MatMult):
            return self.matmul(a, b, frame, line)
        product = isinstance(op, ast.Mult | ast.Div)
        if product and (REDUCED in a.flags or REDUCED in b.flags):
            main = b if REDUCED in a.flags else a
            return main.with_flags((NORMED,), (REDUCED,))
        mod = modulation_side(a, b, product) or modulation_side(b, a, product)
        if (
            product
            and mod is None
            and a.srcs
            and b.srcs
            and (ROWOUT in a.flags) != (ROWOUT in b.flags)
        ):
            mod = b if ROWOUT in a.flags else a  # scales a replicated (row-projected) output
        other = b if mod is a else a
        if mod is not None and other.srcs and all(v != RAW for _, v in other.srcs):
            mod = None  # a per-head gate of a sharded attention output: sharded with it
        if mod is not None:
            for path in mod.linears():
                self.trace.modulations.setdefault(
                    path, Event(frozenset({path}), str(frame.source.path), line)
                )
            return other.with_flags((MODULATED,) if product else (), (NORMED,))
        if a.srcs and b.srcs:
            flags = a.flags | b.flags
            if not (BCAST in a.flags and BCAST in b.flags):
                flags -= {BCAST}
        elif a.srcs or b.srcs:
            flags = a.flags if a.srcs else b.flags
        else:
            flags = a.flags & b.flags  # a broadcast constant does not make the stream broadcast
        srcs = a.srcs | b.srcs
        if not product and bool(a.srcs) != bool(b.srcs):
            side = a if a.srcs else b
            if HEADS not in side.flags:
                # An unprojected attention output added to a stream ends its sharded region.
                srcs = frozenset(s for s in side.srcs if s[1] != ATTN)
        merged = Tensor(srcs, flags - {NORMED})
        if product and a.srcs and b.srcs:
            return merged.with_via(ACT)
        return merged


def _is_autograd_function(ref: Ref) -> bool:
    node = ref.node
    if not isinstance(node, ast.ClassDef):
        return False
    return any("Function" in ast.unparse(b) for b in node.bases)


def _builtin_conversion(name: str, first: Scalar) -> Scalar:
    """`int` / `float` / `bool` / `str` / `abs` / `round` of a scalar."""
    mono = first.mono if name in ("int", "float", "abs", "round") else None
    if first.known:
        try:
            fn = {"int": int, "float": float, "bool": bool, "str": str}.get(name)
            value = fn(first.value) if fn else first.value
            return Scalar(value, first.var, first.deps, mono)
        except Exception:
            return Scalar(UNKNOWN, first.var, first.deps, mono)
    return Scalar(UNKNOWN, first.var, first.deps, mono)


def _builtin_min_max(name: str, args: list) -> Scalar:
    """`min` / `max` of scalars (a monomial kept only when both sides share it)."""
    out = args[0]
    for other in args[1:]:
        m1, m2 = monomial(out), monomial(other)
        mono = m1 if m1 == m2 else None
        if out.known and other.known:
            try:
                value = (
                    min(out.value, other.value) if name == "min" else max(out.value, other.value)
                )
            except TypeError:
                value = UNKNOWN
            out = Scalar(value, out.var or other.var, out.deps | other.deps, mono)
        else:
            out = Scalar(UNKNOWN, out.var or other.var, out.deps | other.deps, mono)
    return out


def _shape_item(base: Scalar, key: Any, index: ast.expr) -> str:
    """`x.shape[-1]` of an unsharded tensor is its WIDTH, `x.shape[1:]` still ends with it;
    other items (batch, sequence) and slices that drop the last size are plain sizes."""
    if base.whole != SHAPE:
        return ""
    if isinstance(key, Scalar) and key.value == -1:
        return WIDTH
    if isinstance(index, ast.Slice) and index.upper is None and index.step is None:
        return SHAPE
    return ""
