"""Module instances: building a module by running its `__init__` with the constructor arguments,
and looking up its sub-modules and attributes.

`self.x = Cls(...)` stores a `Lazy` constructor call; it is resolved and built when first used, so
only the sub-modules that `forward` reaches cost anything. Torch modules are leaves classified by
name (`nn.Linear`, norms, activations, containers); model-defined classes are built recursively
(diffusers `Attention` evaluates its `if added_kv_proj_dim is not None:` with the call's
arguments). A sub-module created under a condition that the arguments do not decide (or that only
another config would take) records that condition (`Node.cond`).
"""

from __future__ import annotations

import ast
from typing import Any

from ..resolver import Resolver
from ..sources import ClassRef
from .interp import Frame, Interp
from .trace import (
    ACTIVATION,
    DICT,
    LINEAR,
    LIST,
    MODULE,
    NORM,
    OPAQUE,
    PASS,
    SEQ,
    Node,
    Trace,
)
from .values import FRESH, UNKNOWN, Alt, Bound, Lazy, Obj, Ref, Scalar, Tup, is_none, join

_ACT_MODULES = frozenset(
    {"GELU", "SiLU", "ReLU", "Tanh", "Sigmoid", "Mish", "SELU", "ELU", "LeakyReLU", "Softplus",
     "GLU", "Hardswish", "Softmax", "ReLU6", "Hardsigmoid", "CELU", "LogSigmoid", "Softsign"}
)  # fmt: skip
_LINEARS = frozenset({"Linear", "LazyLinear", "NonDynamicallyQuantizableLinear"})
_CONTAINER_METHODS = frozenset({"append", "extend", "insert", "add_module"})


def torch_kind(last: str) -> str:
    if last in _LINEARS:
        return LINEAR
    if last == "ModuleList":
        return LIST
    if last == "Sequential":
        return SEQ
    if last == "ModuleDict":
        return DICT
    if "Norm" in last:
        return NORM
    if last in _ACT_MODULES:
        return ACTIVATION
    if last.startswith("Dropout") or last in ("Identity", "Flatten", "Unflatten"):
        return PASS
    return OPAQUE


def _arg(args: list, kwargs: dict, index: int, name: str) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else None


class ModuleBuilder(Interp):
    resolver: Resolver
    trace: Trace

    def __init__(self) -> None:
        super().__init__()
        self._module_class: dict[str, bool] = {}
        self._class_attrs: dict[tuple[str, str], Any] = {}

    # hooks implemented by calls.Calls
    def invoke(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def resolve_lazy(self, lazy: Lazy) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    # -- construction --

    def torch_module(self, ref: Ref, args: list, kwargs: dict, frame: Frame, line: int) -> Node:
        kind = torch_kind(ref.last)
        node = Node(kind, ref, frame.source, line, args, kwargs, built=True)
        if kind == LINEAR:
            node.in_features = _scalar(_arg(args, kwargs, 0, "in_features"))
            node.out_features = _scalar(_arg(args, kwargs, 1, "out_features"))
        elif kind == LIST:
            items = self.iterate(args[0]) if args else []
            for i, item in enumerate(items or []):
                node.children[str(i)] = item
        elif kind == SEQ:
            for i, item in enumerate(args):
                node.children[str(i)] = item
        return node

    def construct(self, ref: Any, args: list, kwargs: dict, frame: Frame, line: int) -> Any:
        if isinstance(ref, Ref) and ref.kind == "ext":
            if ref.qualname.startswith("torch.nn.") and ref.last[:1].isupper():
                if ref.last == "Parameter":
                    return FRESH
                return self.torch_module(ref, args, kwargs, frame, line)
            return Node(OPAQUE, ref, frame.source, line, built=True)
        if isinstance(ref, Ref) and ref.kind == "class":
            layer = self.torch_layer_of(ref.class_ref())
            if layer is not None:  # `class Linear(nn.Linear)` that only skips initialisation
                return self.torch_module(layer, args, kwargs, frame, line)
            if self.is_module_class(ref.class_ref()):
                return Node(MODULE, ref, ref.source, line, args, kwargs)
            obj = Obj(ref)
            found = self.resolver.find_method(ref.class_ref(), "__init__")
            if found is not None:
                func, owner = found
                self.invoke(func, owner, obj, args, kwargs, frame)
            return obj
        if isinstance(ref, Ref) and ref.kind == "func":
            return self.invoke(ref.node, _owner_of(ref), None, args, kwargs, frame)
        return Scalar()

    def materialize(self, value: Any) -> Any:
        if isinstance(value, Lazy):
            if value.built is None:
                value.built = Scalar()  # recursion guard
                value.built = self.resolve_lazy(value)
            return value.built
        if isinstance(value, Alt):
            return Alt(tuple(self.materialize(o) for o in value.options))
        return value

    def torch_layer_of(self, cls: ClassRef) -> Ref | None:
        """The torch layer a model-defined subclass computes as (`torch.nn.Linear` for `class
        Linear(nn.Linear)`) when no class before it in the MRO defines `__init__`, `forward` or
        `__call__`: same arguments, same computation. None otherwise."""
        for ancestor in self.resolver.iter_mro(cls):
            if ancestor.node is None:
                torch_layer = (
                    ancestor.qualname.startswith("torch.nn.") and ancestor.name[:1].isupper()
                )
                if not torch_layer or ancestor.name in ("Module", "ModuleList", "Sequential"):
                    return None
                return Ref("ext", f"torch.nn.{ancestor.name}")
            if any(
                isinstance(stmt, ast.FunctionDef)
                and stmt.name in ("__init__", "forward", "__call__")
                for stmt in ancestor.node.body
            ):
                return None
        return None

    def is_module_class(self, cls: ClassRef) -> bool:
        cached = self._module_class.get(cls.qualname)
        if cached is not None:
            return cached
        result = False
        for ancestor in self.resolver.iter_mro(cls):
            if ancestor is cls:
                continue
            if ancestor.name in ("Module", "ModelMixin") or (
                ancestor.node is None and ancestor.qualname.startswith("torch.nn")
            ):
                result = True
                break
        self._module_class[cls.qualname] = result
        return result

    def build(self, node: Node) -> None:
        if node.built:
            return
        node.built = True
        if node.kind != MODULE or node.cls is None:
            return
        found = self.resolver.find_method(node.cls.class_ref(), "__init__")
        if found is None:
            return
        func, owner = found
        saved = self.conds, self.shadow
        self.conds, self.shadow = [], 0
        try:
            self.invoke(func, owner, node, node.args, node.kwargs, None, building=node)
        finally:
            self.conds, self.shadow = saved

    # -- lookups --

    def child(self, node: Node, name: str) -> Any:
        raw = node.children.get(name)
        out: list[Any] = []
        for option in raw.options if isinstance(raw, Alt) else (raw,):
            own = option.cond if isinstance(option, Lazy) else None
            absent = option.absent if isinstance(option, Lazy) else False
            value = self.materialize(option)
            if isinstance(value, Node) and value.path is None:
                value.path = node.child_path(name)
                conds = [c for c in (node.cond, own or node.conds.get(name)) if c]
                value.cond = " and ".join(conds) or None
                value.default_absent = node.default_absent or absent or name in node.absent
            out.append(value)
        value = Alt(tuple(out)) if isinstance(raw, Alt) else out[0]
        node.children[name] = value
        return value

    def node_attr(self, node: Node, attr: str, frame: Frame) -> Any:
        self.build(node)
        if attr in node.children:
            return self.child(node, attr)
        if attr in node.attrs:
            value = node.attrs[attr]
            if isinstance(value, Scalar) and frame.building is None:
                key = (node.path or "", attr)
                return Scalar(value.value, value.var, value.deps | {key}, ((key, 1),))
            return value
        if attr == "processor" and node.processor is not None:
            return self.materialize(node.processor)
        if node.kind == LINEAR:
            if attr == "out_features" and node.out_features is not None:
                return node.out_features
            if attr == "in_features" and node.in_features is not None:
                return node.in_features
            return FRESH
        if node.kind == MODULE and node.cls is not None:
            found = self.class_attr(node.cls.class_ref(), attr, node)
            if found is not None:
                return found
        if attr in ("weight", "bias"):
            return FRESH
        return Scalar()

    def class_attr(self, cls: ClassRef, attr: str, receiver: Any) -> Any:
        key = (cls.qualname, attr)
        if key not in self._class_attrs:
            self._class_attrs[key] = self._find_class_attr(cls, attr)
        found = self._class_attrs[key]
        if isinstance(found, tuple):
            func, owner, static = found
            if static or receiver is None:
                return Ref("func", f"{owner.qualname}.{attr}", func, owner.source)
            return Bound(func, owner.source, owner, receiver)  # type: ignore[arg-type]
        return found

    def _find_class_attr(self, cls: ClassRef, attr: str) -> Any:
        for ancestor in self.resolver.iter_mro(cls):
            if ancestor.node is None or ancestor.source is None:
                continue
            for stmt in ancestor.node.body:
                if isinstance(stmt, ast.ClassDef) and stmt.name == attr:  # `ops.Linear`
                    return Ref("class", f"{ancestor.qualname}.{attr}", stmt, ancestor.source)
                if isinstance(stmt, ast.FunctionDef) and stmt.name == attr:
                    static = any(
                        isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
                        for d in stmt.decorator_list
                    )
                    return (stmt, ancestor, static)
                targets = (
                    stmt.targets
                    if isinstance(stmt, ast.Assign)
                    else [stmt.target]
                    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None
                    else []
                )
                if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
                    value = stmt.value  # type: ignore[union-attr]
                    return self.eval(value, Frame({}, ancestor.source))  # type: ignore[arg-type]
        return None

    def has_linear(self, node: Node, depth: int = 0) -> bool:
        self.build(node)
        for name in list(node.children):
            value = self.child(node, name)
            for option in value.options if isinstance(value, Alt) else (value,):
                if isinstance(option, Node) and (
                    option.kind == LINEAR
                    or (
                        depth < 2
                        and option.kind in (MODULE, SEQ, LIST)
                        and self.has_linear(option, depth + 1)
                    )
                ):
                    return True
        return False

    # -- mutation while building --

    def attach(self, frame: Frame, attr: str, value: Any) -> None:
        node: Node = frame.building
        modules = [o for o in (value.options if isinstance(value, Alt) else (value,))]
        if any(isinstance(o, Node | Lazy) for o in modules):
            if self.shadow and attr in node.children:
                return
            existed = attr in node.children and attr not in node.conds
            maybe_none = isinstance(value, Alt) and any(is_none(o) for o in value.options)
            if maybe_none and not self.conds and not existed:
                # `Attention(...) if cross else None`: a module only some instances have
                rendered = f"{attr} is not None (in {node.name}.__init__)"
                for option in modules:
                    if isinstance(option, Lazy) and option.cond is None:
                        option.cond = rendered
                node.conds[attr] = rendered
            elif self.conds and not existed:
                rendered = self.render_conds(node)
                for option in modules:
                    if isinstance(option, Lazy) and option.cond is None:
                        option.cond, option.absent = rendered, bool(self.shadow)
                if attr in node.children:  # the other branch built another module
                    value = join(node.children[attr], value)
                else:
                    node.conds[attr] = rendered
                    if self.shadow:
                        node.absent.add(attr)
            node.children[attr] = value
            node.attrs.pop(attr, None)
            if attr == "processor":
                node.processor = value
            return
        if isinstance(value, Obj) and attr == "processor":
            node.processor = value
            return
        if self.shadow and (attr in node.attrs or attr in node.children):
            return
        if attr in node.children and is_none(value):
            if self.conds:
                return
            del node.children[attr]
        if isinstance(value, Scalar):
            value = Scalar(value.value, value.var) if value.deps else value
        old = node.attrs.get(attr)
        node.attrs[attr] = value if old is None or not self.conds else _join_scalar(old, value)

    def render_conds(self, node: Node) -> str:
        parts = []
        for test, negated in self.conds:
            text = ast.unparse(test)
            parts.append(f"not ({text})" if negated else text)
        where = node.name
        return f"{' and '.join(parts)} (in {where}.__init__)"

    def container_call(self, node: Node, method: str, args: list) -> Any:
        if method == "append" and args:
            node.children[str(len(node.children))] = args[0]
        elif method == "extend" and args:
            for item in self.iterate(args[0]) or []:
                node.children[str(len(node.children))] = item
        elif method == "insert" and len(args) > 1:
            node.children[str(len(node.children))] = args[1]
        elif method == "add_module" and len(args) > 1:
            name = args[0].value if isinstance(args[0], Scalar) else None
            if isinstance(name, str):
                node.children[name] = args[1]
        return Scalar(None)

    def iterate(self, value: Any) -> list[Any] | None:
        value = self.materialize(value)
        if isinstance(value, Node):
            self.build(value)
            if value.kind in (LIST, SEQ, DICT):
                return [self.child(value, name) for name in list(value.children)]
            return None
        if isinstance(value, Tup):
            return list(value.items)
        if isinstance(value, Scalar) and isinstance(value.value, list | tuple):
            return [Scalar(v, value.var) for v in value.value]
        return None


def _scalar(value: Any) -> Scalar | None:
    return value if isinstance(value, Scalar) else None


def _join_scalar(old: Any, new: Any) -> Any:
    if isinstance(old, Scalar) and isinstance(new, Scalar):
        if old.known and new.known and old.value == new.value:
            return Scalar(old.value, old.var or new.var)
        return Scalar(UNKNOWN, True)
    return new


def _owner_of(ref: Ref) -> ClassRef:
    return ClassRef(ref.last, ref.qualname, None, ref.source)
