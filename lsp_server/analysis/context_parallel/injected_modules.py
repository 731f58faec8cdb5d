"""Modules a block is handed by whoever builds it: `self.attn = attn` or `self.attn =
attn_cls(dim, heads)` in the block's `__init__`, the parameter bound where the transformer builds
the block (`Block(dim, ChunkedAttention(dim, heads))`, `Block(dim, attn_cls=MyAttention)`,
`partial(MyAttention, ...)`) or else by the parameter's default. Third-party code often injects
its attention this way (timm's `attn_layer=`); read as if the block built the module itself,
with the file that names the class."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..astutil import call_name, declared_params, self_attr, walk_local
from ..model import Evidence
from ..parallel_input import ParallelContext
from ..sources import ClassRef, SourceFile
from .called_functions import bound_arguments


@dataclass(frozen=True)
class Injected:
    """One module a block may hold: `assign` is `self.<attr> = Cls(...)` as if the block built it
    (Cls named as `source` names it)."""

    attr: str
    assign: ast.Assign
    source: SourceFile


@dataclass
class InjectedModules:
    modules: list[Injected]
    # attributes set from a parameter no construction site or default binds to a class
    unresolved: list[Evidence]


def injected_modules(ctx: ParallelContext, block: ClassRef) -> InjectedModules:
    out = InjectedModules([], [])
    seen: set[str] = set()
    for func, owner in ctx.resolver.init_methods(block):
        params = declared_params(func)
        for node in walk_local(func):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            attr = self_attr(node.targets[0])
            param, args = _from_parameter(node.value, params)
            if attr is None or param is None or attr in seen:
                continue
            seen.add(attr)
            bound = _bound(ctx, block, func, param) or _default(func, param, owner)
            # `attn=None` handed in: nothing is built there
            bound = [
                (e, s) for e, s in bound if not (isinstance(e, ast.Constant) and e.value is None)
            ]
            made = [_as_built(node, attr, expr, args, src) for expr, src in bound]
            out.modules += [m for m in made if m is not None]
            # `self.flag = flag` is almost always a setting: only a class called here
            # (`attn_cls(dim)`) is known to build a module, and said when unresolved
            if args is not None and (not bound or None in made):
                where = str((owner.source or ctx.source).path)
                out.unresolved.append(
                    Evidence(
                        f"`self.{attr}` of {block.name} is handed in as `{param}`, and no "
                        "construction of the block names the class it gets",
                        where,
                        node.lineno,
                    )
                )
    return out


def _from_parameter(
    value: ast.expr, params: list[str]
) -> tuple[str | None, tuple[list[ast.expr], list[ast.keyword]] | None]:
    """(parameter, call arguments): `attn` -> (attn, None); `attn_cls(dim)` -> (attn_cls, ...)."""
    if isinstance(value, ast.Name) and value.id in params:
        return value.id, None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in params:
        return value.func.id, (value.args, value.keywords)
    return None, None


def _bound(
    ctx: ParallelContext, block: ClassRef, init: ast.FunctionDef, param: str
) -> list[tuple[ast.expr, SourceFile]]:
    """What the transformer's constructors pass for `param` where they build `block`."""
    out: list[tuple[ast.expr, SourceFile]] = []
    for func, owner in ctx.resolver.init_methods(ctx.transformer):
        source = owner.source or ctx.source
        for node in walk_local(func):
            if not isinstance(node, ast.Call) or not _builds(ctx, source, node, block):
                continue
            for name, arg in bound_arguments(node, init):
                if name == param:
                    out.append((_through_local(func, arg), source))
    return out


def _through_local(func: ast.FunctionDef, arg: ast.expr) -> ast.expr:
    """`grouped` -> `partial(GroupedAttention, kv_heads=2)` when `func` assigns that name once."""
    if not isinstance(arg, ast.Name):
        return arg
    values = [
        node.value
        for node in walk_local(func)
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id == arg.id
    ]
    return values[0] if len(values) == 1 else arg


def _builds(ctx: ParallelContext, source: SourceFile, call: ast.Call, block: ClassRef) -> bool:
    if isinstance(call.func, ast.Name | ast.Attribute):
        found = ctx.resolver.resolve_class(source, call_name(call))
        return found.node is not None and found.node is block.node
    return False


def _default(
    func: ast.FunctionDef, param: str, owner: ClassRef
) -> list[tuple[ast.expr, SourceFile]]:
    args = func.args
    positional = args.posonlyargs + args.args
    named = [a.arg for a in positional[len(positional) - len(args.defaults) :]]
    defaults = dict(zip(named, args.defaults, strict=True))
    kw = zip(args.kwonlyargs, args.kw_defaults, strict=True)
    defaults |= {a.arg: d for a, d in kw if d is not None}
    value = defaults.get(param)
    if value is None or owner.source is None:
        return []
    if isinstance(value, ast.Constant):
        return []  # `attn=None`: nothing built by default
    return [(value, owner.source)]


def _as_built(
    node: ast.Assign,
    attr: str,
    expr: ast.expr,
    args: tuple[list[ast.expr], list[ast.keyword]] | None,
    source: SourceFile,
) -> Injected | None:
    """`self.<attr> = Cls(...)` for what was handed in: an instance's construction, or a class
    (or `partial(Cls, ...)`) called with the block's own arguments."""
    if args is None:
        if not isinstance(expr, ast.Call):
            return None
        value: ast.expr = expr
    else:
        cls = _class_of(expr)
        if cls is None:
            return None
        value = ast.Call(func=cls, args=list(args[0]), keywords=list(args[1]))
    if isinstance(value, ast.Call) and _is_partial(value) and value.args:
        value = ast.Call(func=value.args[0], args=[], keywords=[])
    made = ast.Assign(targets=node.targets, value=value)
    return Injected(attr, ast.copy_location(made, node), source)


def _is_none(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is None


def _class_of(expr: ast.expr) -> ast.expr | None:
    if isinstance(expr, ast.Name | ast.Attribute):
        return expr
    if isinstance(expr, ast.Call) and _is_partial(expr) and expr.args:
        return expr.args[0]
    return None


def _is_partial(call: ast.Call) -> bool:
    return call_name(call).rsplit(".", 1)[-1] == "partial"
