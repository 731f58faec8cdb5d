"""Call semantics of the interpreter: modules (`self.attn(x)` runs `Attention.forward`, which runs
its processor's `__call__` with `attn` bound to the module), Linear layers (recorded with the tensor
that reaches them), functions of the analyzed sources (inlined), attention kernels, torch/einops
vocabulary (`ops.py`), builtins, and binary operators on tensors (products of two projections are
gating nonlinearities; a broadcast projection applied to a normalized stream is a modulation).
"""

from __future__ import annotations

import ast
from typing import Any

from ..resolver import Resolver
from ..sources import ClassRef
from .interp import MAX_DEPTH, Frame
from .modules import _CONTAINER_METHODS
from .operators import Operators, _Deferred, _Lambda, _Super
from .ops import MATMULS, TensorOps, is_attention_name
from .resolve import Names
from .trace import (
    ACTIVATION,
    COUNT,
    DICT,
    LINEAR,
    LIST,
    MODULE,
    NORM,
    OPAQUE,
    PASS,
    SEQ,
    AttnCall,
    Event,
    Node,
    SizeUse,
    Trace,
)
from .values import (
    ACT,
    ATTN,
    BCAST,
    FRESH,
    HEADS,
    NORMED,
    RAW,
    ROWOUT,
    Alt,
    Bound,
    Lazy,
    Obj,
    Ref,
    Scalar,
    Tensor,
    Tup,
    as_tensor,
    join,
    monomial,
    tensors_in,
    union,
)

_UNSAFE_ROOTS = ("flash_attn", "triton", "apex", "liger_kernel", "xformers")
# Tensor helpers imported from a module larger than this are applied as elementwise unions instead
# of being inlined (parsing a large utility module costs more than the helper tells).
LARGE_HELPER_FILE = 60_000


class Calls(Operators):
    def __init__(self, resolver: Resolver, names: Names, trace: Trace) -> None:
        super().__init__()
        self.resolver = resolver
        self.names = names
        self.trace = trace
        self.ops = TensorOps(trace)
        self.active: set[int] = set()
        self.init_depth = 0  # > 0 while a module's __init__ runs (constructor calls stay lazy)

    # -- names --

    def import_names(self, stmt: ast.Import | ast.ImportFrom, frame: Frame) -> dict[str, Any]:
        return self.names.import_local(frame.source, stmt)

    def resolve_lazy(self, lazy: Lazy) -> Any:
        frame = Frame({}, lazy.source)
        ref = lazy.ref if lazy.ref is not None else self.names.lookup(lazy.source, lazy.name)
        return self.construct(ref, lazy.args, lazy.kwargs, frame, lazy.line)

    # -- calls --

    def call(self, node: ast.Call, frame: Frame) -> Any:
        func = node.func
        name = ""
        if isinstance(func, ast.Attribute):
            name = func.attr
            base = self.eval(func.value, frame)
            args, kwargs = self.eval_args(node, frame)
            if isinstance(base, Tensor):
                return self.tensor_method(name, base, args, kwargs, node, frame)
            if isinstance(base, Tup) and name in ("append", "extend", "insert"):
                if isinstance(func.value, ast.Name) and args:
                    added = self.iterate(args[0]) if name == "extend" else [args[-1]]
                    frame.env[func.value.id] = Tup(base.items + tuple(added or ()))
                return Scalar(None)
            base = self.materialize(base) if isinstance(base, Lazy) else base
            if (
                isinstance(base, Node)
                and base.kind in (LIST, SEQ, DICT)
                and name in _CONTAINER_METHODS
            ):
                return self.container_call(base, name, args)
            if isinstance(base, Node) and name == "set_processor" and args:
                self.build(base)
                base.processor = self.materialize(args[0])
                if isinstance(base.processor, Node):
                    base.children["processor"] = base.processor
                return Scalar(None)
            fn = self.get_attr(base, name, frame)
        else:
            if isinstance(func, ast.Name):
                name = func.id
            fn = self.eval(func, frame)
            args, kwargs = self.eval_args(node, frame)
        return self.apply(fn, name, args, kwargs, node, frame)

    def eval_args(self, node: ast.Call, frame: Frame) -> tuple[list, dict]:
        args: list = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                value = self.eval(arg.value, frame)
                items = self.iterate(value)
                if items is not None:
                    args += items
            else:
                args.append(self.eval(arg, frame))
        kwargs = {kw.arg: self.eval(kw.value, frame) for kw in node.keywords if kw.arg}
        return args, kwargs

    def apply(
        self, fn: Any, name: str, args: list, kwargs: dict, node: ast.Call, frame: Frame
    ) -> Any:
        where = (str(frame.source.path), node.lineno)
        if isinstance(fn, Alt):
            out: Any = None
            for option in fn.options:
                out = join(out, self.apply(option, name, args, kwargs, node, frame))
            return out
        if isinstance(fn, Lazy):
            fn = self.materialize(fn)
        if isinstance(fn, Node):
            return self.call_module(fn, args, kwargs, node, frame)
        if isinstance(fn, Obj):
            found = self.resolver.find_method(fn.cls.class_ref(), "__call__")
            if found is None:
                return union(args)
            return self.invoke(found[0], found[1], fn, args, kwargs, frame)
        if isinstance(fn, Bound):
            return self.call_function(
                fn.func, fn.owner, fn.receiver, name, args, kwargs, frame, where
            )
        if isinstance(fn, _Super):
            return Scalar(None)
        if isinstance(fn, _Lambda):
            inner = fn.frame.fork()
            for param, value in zip(fn.node.args.args, args, strict=False):
                inner.env[param.arg] = value
            return self.eval(fn.node.body, inner)
        if isinstance(fn, _Deferred):
            if frame.building is not None or self.init_depth:
                return Lazy(fn.source, fn.name, args, kwargs, node.lineno)
            if is_attention_name(name) and self._attention_args(args, kwargs):
                return self.attention(name, args, kwargs, frame, where)
            values = [*args, *kwargs.values()]
            if not any(tensors_in(v) or isinstance(v, Node | Obj | Lazy) for v in values):
                return Scalar()  # a helper of scalars cannot change the data flow
            target = self.names.defining_file_size(fn.source, fn.name)
            if target is not None and target > LARGE_HELPER_FILE:
                return union(values)  # a helper of a large library module: not inlined
            return self.apply(self.undefer(fn), name, args, kwargs, node, frame)
        if isinstance(fn, Ref):
            if fn.kind == "class":
                if frame.building is not None or self.init_depth:
                    return Lazy(frame.source, fn.last, args, kwargs, node.lineno, ref=fn)
                return self.construct(fn, args, kwargs, frame, node.lineno)
            if fn.kind == "func" and isinstance(fn.node, ast.FunctionDef):
                owner = ClassRef(fn.last, fn.qualname, None, fn.source)
                return self.call_function(fn.node, owner, None, name, args, kwargs, frame, where)
            if fn.kind == "builtin":
                return self.builtin(fn.qualname, args, kwargs, frame)
            if fn.kind == "ext":
                return self.external(fn, args, kwargs, node, frame)
        return union([*args, *kwargs.values()]) if tensors_in(Tup(tuple(args))) else Scalar()

    def call_function(
        self,
        func: ast.FunctionDef,
        owner: ClassRef,
        receiver: Any,
        name: str,
        args: list,
        kwargs: dict,
        frame: Frame,
        where: tuple[str, int],
    ) -> Any:
        before = len(self.trace.attn_calls)
        building = frame.building if receiver is not None and receiver is frame.building else None
        result = self.invoke(func, owner, receiver, args, kwargs, frame, building=building)
        recorded = len(self.trace.attn_calls) != before
        if not recorded and is_attention_name(name) and self._attention_args(args, kwargs):
            return self.attention(name, args, kwargs, frame, where)
        return result

    def invoke(
        self,
        func: ast.FunctionDef,
        owner: ClassRef,
        receiver: Any,
        args: list,
        kwargs: dict,
        caller: Frame | None,
        building: Node | None = None,
    ) -> Any:
        key = id(func)
        if self.depth > MAX_DEPTH or key in self.active or owner.source is None:
            return union([*args, *kwargs.values()])
        source = owner.source
        self.trace.sources.setdefault(str(source.path), source)
        env: dict[str, Any] = dict(self.closures.get(key, {}))  # read at the call: late binding
        spec = func.args
        params = [a.arg for a in spec.posonlyargs + spec.args]
        positional = list(args)
        if receiver is not None and params:
            env[params[0]] = receiver
            params = params[1:]
        for param, value in zip(params, positional, strict=False):
            env[param] = value
        extra = positional[len(params) :]
        if spec.vararg is not None:
            env[spec.vararg.arg] = Tup(tuple(extra))
        kwonly = [a.arg for a in spec.kwonlyargs]
        for key_name, value in kwargs.items():
            if key_name in params or key_name in kwonly:
                env[key_name] = value
        if spec.kwarg is not None:
            env[spec.kwarg.arg] = Scalar()
        defaults = dict(
            zip(params[len(params) - len(spec.defaults) :], spec.defaults, strict=False)
        )
        defaults.update(
            {a.arg: d for a, d in zip(spec.kwonlyargs, spec.kw_defaults, strict=True) if d}
        )
        empty = Frame({}, source)
        for param in [*params, *kwonly]:
            if param not in env:
                default = defaults.get(param)
                env[param] = self.eval(default, empty) if default is not None else Scalar()
        first_node = next((a for a in positional if isinstance(a, Node)), None)
        owner_node = receiver if isinstance(receiver, Node) else first_node
        if owner_node is None and caller is not None:
            owner_node = caller.owner
        inner = Frame(env, source, receiver, owner_node, building, owner)
        self.active.add(key)
        self.depth += 1
        self.init_depth += building is not None
        try:
            self.run_block(func.body, inner)
        finally:
            self.depth -= 1
            self.init_depth -= building is not None
            self.active.discard(key)
        result: Any = None
        for value in inner.returns:
            result = join(result, value)
        return Scalar(None) if result is None else result

    def call_module(
        self, node: Node, args: list, kwargs: dict, call: ast.Call, frame: Frame
    ) -> Any:
        self.build(node)
        first = args[0] if args else next(iter(kwargs.values()), Scalar())
        t = as_tensor(first) if tensors_in(first) else union([*args, *kwargs.values()])
        where = (str(frame.source.path), call.lineno)
        kind = node.kind
        if kind == MODULE and "Norm" in node.name and not self.has_linear(node):
            kind = NORM
        if kind == LINEAR:
            self.trace.linear_call(node, t, *where)
            flags = t.flags & {BCAST}
            if any(via != RAW for _, via in t.srcs):
                flags |= {ROWOUT}
            return Tensor(frozenset({(node.path or "", RAW)}), flags)
        if kind == SEQ:
            value: Any = first
            for child in self.iterate(node) or []:
                value = self.apply(child, "", [value], {}, call, frame)
            return value
        if kind == NORM:
            self.ops.norm(t, where, node.path or node.name)
            return t.with_flags((NORMED,))
        if kind == ACTIVATION:
            return t.with_via(ACT).with_flags((), (NORMED,))
        if kind == PASS:
            return first
        if kind == OPAQUE:
            if node.cls is not None and node.cls.qualname.split(".")[0] in _UNSAFE_ROOTS:
                self.trace.unsafe.append(Event(frozenset(), *where, node.cls.qualname))
            return FRESH
        if kind == MODULE and node.cls is not None:
            found = self.resolver.find_method(node.cls.class_ref(), "forward")
            if found is not None:
                return self.invoke(found[0], found[1], node, args, kwargs, frame)
        return union([*args, *kwargs.values()])

    # -- attention and externals --

    def _attention_args(self, args: list, kwargs: dict) -> bool:
        q, k, v = _qkv(args, kwargs)
        return sum(1 for t in (q, k, v) if t.srcs) >= 2

    def attention(
        self, name: str, args: list, kwargs: dict, frame: Frame, where: tuple[str, int]
    ) -> Tensor:
        q, k, v = _qkv(args, kwargs)
        owner = frame.owner if isinstance(frame.owner, Node) else None
        gqa = kwargs.get("enable_gqa")
        self.trace.attn_calls.append(
            AttnCall(owner, q, k, v, name, *where, gqa if isinstance(gqa, Scalar) else None)
        )
        self._head_count_args(name, q, args, kwargs, where)
        out = union([q, k, v]).with_via(ATTN)
        return out.with_flags((HEADS,) if HEADS in q.flags else (), (BCAST, NORMED))

    def _head_count_args(
        self, name: str, q: Tensor, args: list, kwargs: dict, where: tuple[str, int]
    ) -> None:
        """A head count passed to the attention call (`heads=attn.heads`) must be the local one
        when the projections are column-sharded: a COUNT size of the query's projections."""
        named = [(None, a) for a in args] + list(kwargs.items())
        for key, value in named:
            if not isinstance(value, Scalar):
                continue
            if not any("head" in attr.lower() for _, attr in value.deps):
                continue
            text = f"{name}(..., {key}=...)" if key else f"{name}(...)"
            size = SizeUse(COUNT, value.deps, monomial(value))
            self.ops.shape(q, (size,), "attention", where, text=text)

    def external(self, ref: Ref, args: list, kwargs: dict, node: ast.Call, frame: Frame) -> Any:
        where = (str(frame.source.path), node.lineno)
        qual, last = ref.qualname, ref.last
        if qual.startswith("torch.nn.") and last[:1].isupper() and ".functional." not in qual:
            return self.construct(ref, args, kwargs, frame, node.lineno)
        root = qual.split(".")[0]
        if is_attention_name(last) and self._attention_args(args, kwargs):
            return self.attention(last, args, kwargs, frame, where)
        if root in _UNSAFE_ROOTS:
            self.trace.unsafe.append(Event(frozenset(), *where, qual))
        operands = [as_tensor(a) for a in args if tensors_in(a)]
        if last in MATMULS and len(operands) >= 2:
            return self.matmul(operands[-2], operands[-1], frame, node.lineno)
        if last == "Parameter":
            return FRESH
        result = self.ops.function(last, args, kwargs, where, node)
        if result is not None:
            return result
        return union([*args, *kwargs.values()]) if tensors_in(Tup(tuple(args))) else Scalar()

    def tensor_method(
        self, name: str, t: Tensor, args: list, kwargs: dict, node: ast.Call, frame: Frame
    ) -> Any:
        where = (str(frame.source.path), node.lineno)
        if name in MATMULS and args and tensors_in(args[0]):
            return self.matmul(t, as_tensor(args[0]), frame, node.lineno)
        result = self.ops.method(name, t, args, kwargs, where, node)
        if result is not None:
            return result
        other = args[0] if args else Scalar()
        op: ast.operator = ast.Mult() if name in ("mul", "multiply", "div") else ast.Add()
        return self.binop(t, other, op, frame, node.lineno)

    # -- builtins --

    # -- attributes, subscripts, operators --


def _qkv(args: list, kwargs: dict) -> tuple[Tensor, Tensor, Tensor]:
    def pick(index: int, *names: str) -> Tensor:
        for name in names:
            if tensors_in(kwargs.get(name)):
                return as_tensor(kwargs[name])
        if len(args) > index and tensors_in(args[index]):
            return as_tensor(args[index])
        return FRESH

    return pick(0, "query", "q"), pick(1, "key", "k"), pick(2, "value", "v")


__all__ = ["ACTIVATION", "OPAQUE", "Calls"]
