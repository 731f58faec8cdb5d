"""Runs the interpreter over a transformer: its `__init__` (with config.json values or the
defaults) gives each block list's constructor call; each block's `__init__` and `forward` are then
run with the arguments the transformer's loop passes, and the recorded flow is classified.

Blocks with the same class and constructor arguments are run once per analysis.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from ..astutil import param_defaults
from ..parallel_input import ParallelBlockList, ParallelContext
from .calls import Calls
from .interp import Frame
from .resolve import Names
from .roles import Roles, classify
from .trace import LIST, MODULE, Node, Trace
from .values import FRESH, MAYBE_NONE, UNKNOWN, Alt, Obj, Ref, Scalar, Tensor, options


@dataclass
class BlockFlow:
    attr: str
    block: Node | None
    trace: Trace
    roles: Roles
    error: str | None = None
    cached: bool = True
    cond: str | None = None  # the list exists only under this condition
    absent: bool = False  # the list exists only with other config values than the defaults


def run_blocks(ctx: ParallelContext) -> list[BlockFlow]:
    names = Names()
    machine = Calls(ctx.resolver, names, Trace())
    root: Node | None = None
    error: str | None = None
    try:
        root = _root(ctx, machine)
    except (RecursionError, Exception) as exc:
        error = f"{type(exc).__name__}: {exc}"
    done: dict[tuple, BlockFlow] = {}
    out: list[BlockFlow] = []
    for block_list in ctx.block_lists:
        node = _block_node(machine, root, block_list) if root is not None else None
        if node is None:
            node = _bare_node(block_list)
        key = (block_list.block.qualname, _signature(node))
        cond = root.conds.get(block_list.attr) if root is not None else None
        absent = root is not None and block_list.attr in root.absent
        if key in done:
            prior = done[key]
            flow = BlockFlow(block_list.attr, prior.block, prior.trace, prior.roles, prior.error)
            flow.cached, flow.cond, flow.absent = block_list.cached, cond, absent
            out.append(flow)
            continue
        trace = Trace()
        machine.trace = machine.ops.trace = trace
        flow_error = error
        try:
            _run_forward(machine, block_list, node)
        except (RecursionError, Exception) as exc:
            flow_error = f"{type(exc).__name__}: {exc}"
        flow = BlockFlow(block_list.attr, node, trace, classify(trace), flow_error)
        flow.cached, flow.cond, flow.absent = block_list.cached, cond, absent
        done[key] = flow
        out.append(flow)
    return out


def _root(ctx: ParallelContext, machine: Calls) -> Node | None:
    cls = ctx.transformer
    if cls.node is None or cls.source is None:
        return None
    ref = Ref("class", cls.qualname, cls.node, cls.source)
    root = Node(MODULE, ref, cls.source, cls.node.lineno, built=True, path="<root>")
    found = ctx.resolver.find_method(cls, "__init__")
    if found is None:
        return root
    init, owner = found
    kwargs = _init_arguments(machine, init, owner.source or cls.source, ctx.config)
    root.attrs["config"] = Obj(Ref("ext", "config"), dict(kwargs))
    machine.invoke(init, owner, root, [], kwargs, None, building=root)
    return root


def _init_arguments(
    machine: Calls, init: ast.FunctionDef, source: Any, config: dict | None
) -> dict:
    """Constructor arguments: config.json values, else the defaults (marked as config-variable)."""
    defaults = param_defaults(init)
    spec = init.args
    params = [a.arg for a in spec.posonlyargs + spec.args + spec.kwonlyargs][0:]
    if params and params[0] == "self":
        params = params[1:]
    frame = Frame({}, source)
    out: dict[str, Any] = {}
    for name in params:
        if config is not None and name in config:
            out[name] = _from_json(config[name])
            continue
        default = defaults.get(name)
        if default is None:
            out[name] = Scalar(UNKNOWN, True)
            continue
        value = machine.eval(default, frame)
        out[name] = Scalar(value.value, True) if isinstance(value, Scalar) else value
    return out


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        from .values import Tup

        return Tup(tuple(_from_json(v) for v in value))
    return Scalar(value)


def _block_node(machine: Calls, root: Node, block_list: ParallelBlockList) -> Node | None:
    container = root.children.get(block_list.attr)
    container = machine.materialize(container)
    if not isinstance(container, Node) or container.kind != LIST:
        return None
    fallback: Node | None = None
    chosen: Node | None = None
    for raw in container.children.values():
        for option in options(machine.materialize(raw)):
            if isinstance(option, Node) and option.kind == MODULE and option.cls is not None:
                if option.cls.last == block_list.block.name:
                    chosen = option
                    break
                fallback = fallback or option
        if chosen is not None:
            break
    chosen = chosen or fallback
    if chosen is not None:
        if chosen.path:
            _repath(chosen, chosen.path + ".", set())
        chosen.path, chosen.cond = "", None
    return chosen


def _repath(node: Node, prefix: str, seen: set[int]) -> None:
    """Paths of the submodules `__init__` reached through the list (`for block in self.blocks:
    block.attn...` in a weight initializer) before this block became the plan's root: relative
    to the block, as those materialized later are."""
    if id(node) in seen:
        return
    seen.add(id(node))
    for raw in node.children.values():
        for child in raw.options if isinstance(raw, Alt) else (raw,):
            if not isinstance(child, Node):
                continue
            if child.path and child.path.startswith(prefix):
                child.path = child.path[len(prefix) :]
            _repath(child, prefix, seen)


def _bare_node(block_list: ParallelBlockList) -> Node:
    cls = block_list.block
    ref = Ref("class", cls.qualname, cls.node, cls.source)
    return Node(MODULE, ref, cls.source, cls.node.lineno if cls.node else 0, path="")


def _signature(node: Node) -> tuple:
    parts: list[Any] = [node.cls.qualname if node.cls else None]
    for value in [*node.args, *sorted(node.kwargs.items())]:
        item = value[1] if isinstance(value, tuple) else value
        name = value[0] if isinstance(value, tuple) else None
        if isinstance(item, Scalar):
            try:
                hash(item.value)
                parts.append((name, item.value, item.var))
            except TypeError:
                parts.append((name, "?"))
        else:
            parts.append((name, type(item).__name__, id(item) if isinstance(item, Node) else 0))
    return tuple(parts)


def _run_forward(machine: Calls, block_list: ParallelBlockList, node: Node) -> None:
    if node.cls is None or node.cls.node is None:
        return
    found = machine.resolver.find_method(node.cls.class_ref(), "forward")
    if found is None:
        return
    func, owner = found
    kwargs = _forward_arguments(machine, func, owner.source, block_list.call)
    machine.build(node)
    machine.invoke(func, owner, node, [], kwargs, None)


def _forward_arguments(
    machine: Calls, func: ast.FunctionDef, source: Any, call: ast.Call | None
) -> dict:
    """Tensors for the parameters the loop passes; defaults for the others."""
    spec = func.args
    params = [a.arg for a in spec.posonlyargs + spec.args]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    params += [a.arg for a in spec.kwonlyargs]
    defaults = param_defaults(func)
    frame = Frame({}, source)
    passed: set[str] = set()
    literal: dict[str, Any] = {}
    star = call is None
    if call is not None:
        positional = [a for a in call.args if not isinstance(a, ast.Starred)]
        star = len(positional) != len(call.args) or any(k.arg is None for k in call.keywords)
        for name, arg in zip(params, positional, strict=False):
            passed.add(name)
            if isinstance(arg, ast.Constant):
                literal[name] = Scalar(arg.value)
        for kw in call.keywords:
            if kw.arg:
                passed.add(kw.arg)
                if isinstance(kw.value, ast.Constant):
                    literal[kw.arg] = Scalar(kw.value.value)
    out: dict[str, Any] = {}
    for name in params:
        default = defaults.get(name)
        if name in literal:
            out[name] = literal[name]
        elif name in passed or (default is None and name not in defaults):
            out[name] = FRESH
        elif star and isinstance(default, ast.Constant) and default.value is None:
            out[name] = Tensor(flags=frozenset({MAYBE_NONE}))
        else:
            out[name] = machine.eval(default, frame) if default is not None else FRESH
    return out
