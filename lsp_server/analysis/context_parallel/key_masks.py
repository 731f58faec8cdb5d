"""Masks known by what the code does with them, whatever their names: a block parameter that
reaches an attention call's mask argument (`attn_mask=`, `attention_mask=`, `key_padding_mask=`),
in the block's forward or one call down, in the forward of a module the block built
(`self.attn(h, valid)` where `Attn.forward(self, x, valid)` passes `attn_mask=valid[:, None]`).

The mask readers of the CP plan also take a name with `mask` in it; these are the masks a name
does not reveal (`valid`, `keep`, `padding`)."""

from __future__ import annotations

import ast

from ..astutil import call_name, self_attr, walk_local
from ..parallel_input import ParallelContext
from ..sources import ClassRef
from .block_binding import bound_args, name_of

MASK_KEYWORDS = ("attn_mask", "attention_mask", "key_padding_mask", "mask")
_RESHAPES = (
    "bool",
    "to",
    "float",
    "half",
    "unsqueeze",
    "view",
    "reshape",
    "type_as",
    "logical_not",
)


def key_mask_names(ctx: ParallelContext) -> frozenset[str]:
    """Block parameters of the cached lists that reach an attention mask argument, and the
    forward names bound to them at the block calls (computed once per context)."""
    cached = ctx.__dict__.get("_key_mask_names")
    if isinstance(cached, frozenset):
        return cached
    names: set[str] = set()
    for block in ctx.cached_lists:
        found = ctx.resolver.find_method(block.block, "forward")
        if found is None:
            continue
        params = _mask_params(ctx, block.block, found[0], depth=0)
        names |= params
        if block.call is not None:
            for param, expr in bound_args(block.call, _params(found[0])).items():
                var = name_of(expr)
                if param in params and var:
                    names.add(var)
    out = frozenset(names)
    ctx.__dict__["_key_mask_names"] = out
    return out


def is_key_mask(ctx: ParallelContext, name: str) -> bool:
    """A mask by its name (`*mask*`) or by what the blocks do with it."""
    return "mask" in name.lower() or name in key_mask_names(ctx)


def _params(func: ast.FunctionDef) -> list[str]:
    args = func.args
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs][1:]


def _mask_params(
    ctx: ParallelContext, owner: ClassRef, func: ast.FunctionDef, depth: int
) -> set[str]:
    """Parameters of `func` (a method of `owner`) that reach a mask argument of a call in it,
    or, one level down, of the forward of a module `owner` built."""
    params = set(_params(func))
    out: set[str] = set()
    modules = _built_modules(ctx, owner) if depth == 0 else {}
    for node in walk_local(func):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg in MASK_KEYWORDS:
                name = _masked_name(kw.value)
                if name in params:
                    out.add(name)
        attr = self_attr(node.func) if isinstance(node.func, ast.Attribute) else None
        cls = modules.get(attr or "")
        if cls is None:
            continue
        inner = ctx.resolver.find_method(cls, "forward")
        if inner is None:
            continue
        inner_masks = _mask_params(ctx, cls, inner[0], depth + 1)
        for inner_param, expr in bound_args(node, _params(inner[0])).items():
            name = _masked_name(expr)
            if inner_param in inner_masks and name in params:
                out.add(name)
    return out


def _built_modules(ctx: ParallelContext, owner: ClassRef) -> dict[str, ClassRef]:
    """`self.<attr> = Cls(...)` in `owner.__init__` (or a base's) -> the resolved class."""
    out: dict[str, ClassRef] = {}
    # the bases' `__init__` first: a more derived one rebuilding an attribute replaces it
    for func, cls in reversed(ctx.resolver.init_methods(owner)):
        source = cls.source or ctx.source
        for node in walk_local(func):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                attr = next((self_attr(t) for t in node.targets if self_attr(t)), None)
                if attr:
                    resolved = ctx.resolver.resolve_class(source, call_name(node.value))
                    if resolved.node is not None:
                        out[attr] = resolved
                    else:
                        out.pop(attr, None)
    return out


def _masked_name(expr: ast.expr) -> str | None:
    """The one name an argument reshapes or converts (`m`, `m[:, None, None, :]`, `~m.bool()`,
    `m.to(x.dtype)`), or None when it mixes in other data."""
    while True:
        if isinstance(expr, ast.Name):
            return expr.id
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Invert | ast.Not):
            expr = expr.operand
        elif isinstance(expr, ast.Subscript):
            expr = expr.value
        elif (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and expr.func.attr in _RESHAPES
        ):
            expr = expr.func.value
        else:
            return None
