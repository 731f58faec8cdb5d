"""How the transformer calls a block list: the block's parameters, the expressions bound to
them, the variables the call assigns and the inputs that guard its loop."""

from __future__ import annotations

import ast
from dataclasses import replace

from ..astutil import (
    declared_params,
    names_read,
    not_none_guards,
    walk,
    walk_local,
)
from ..delegating_forward import delegated_function
from ..model import Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from .flow import ForwardFlow


def block_params(ctx: ParallelContext, block: ParallelBlockList) -> list[str]:
    found = ctx.resolver.find_method(block.block, "forward")
    return declared_params(found[0]) if found else []


def unread_signature(ctx: ParallelContext, block: ParallelBlockList) -> Evidence:
    """Why nothing can be split where the stream enters the list: the block's parameters are
    not read (refuses CP; a plan splitting only the position tensors would not fit)."""
    found = ctx.resolver.find_method(block.block, "forward")
    why = "its source was not found"
    if found is not None:
        func, owner = found
        source = owner.source or ctx.source
        delegated = delegated_function(ctx.resolver, source, func) if source else None
        if delegated is not None:  # `return mix(*args, half=self.half, **kwargs)`
            why = (
                f"it hands `*{func.args.vararg.arg if func.args.vararg else 'args'}` on to "
                f"`{delegated[0].name}(...)`, whose attention is not read here"
            )
        elif not declared_params(func):
            why = "it takes only `*args` / `**kwargs`"
    return Evidence(
        f"the stream cannot be split where it enters `{block.attr}.0`: the parameters of "
        f"`{block.block.name}.forward` are not read ({why})",
        ctx.path,
        block.loops[0].lineno if block.loops else 1,
    )


def with_expanded_block_calls(ctx: ParallelContext) -> ParallelContext:
    """Block calls written `block(*block_args)`, where the loop builds `block_args` as a tuple
    literal, or `block(x, **kw)`, where forward builds `kw` as a dict literal or `dict(...)`,
    read as the call with those arguments."""
    found = ctx.resolver.find_method(ctx.transformer, "forward")
    forward = found[0] if found is not None else None
    lists = tuple(replace(b, call=_with_keywords(_expanded(b), forward)) for b in ctx.block_lists)
    return replace(ctx, block_lists=lists)


def _with_keywords(call: ast.Call | None, forward: ast.FunctionDef | None) -> ast.Call | None:
    """`**kw` of `call` replaced by the keywords of the dict forward last assigned to `kw`
    above the call (`kw = dict(freqs=freqs, c=c)`, `kw = {"freqs": freqs}`)."""
    if call is None or forward is None or not any(k.arg is None for k in call.keywords):
        return call
    dicts: dict[str, list[ast.keyword]] = {}
    for node in sorted(walk_local(forward), key=lambda n: getattr(n, "lineno", 0)):
        if not (isinstance(node, ast.Assign) and node.lineno < call.lineno):
            continue
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            items = _dict_items(node.value)
            if items is not None:
                dicts[node.targets[0].id] = items
    keywords: list[ast.keyword] = []
    for kw in call.keywords:
        name = name_of(kw.value) if kw.arg is None else None
        keywords += dicts.get(name or "", [kw])
    new = ast.Call(func=call.func, args=call.args, keywords=keywords)
    return ast.copy_location(new, call)


def _dict_items(value: ast.expr) -> list[ast.keyword] | None:
    plain = isinstance(value, ast.Call) and name_of(value.func) == "dict" and not value.args
    if plain and all(k.arg is not None for k in value.keywords):  # type: ignore[union-attr]
        return list(value.keywords)  # type: ignore[union-attr]
    if isinstance(value, ast.Dict) and all(
        isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys
    ):
        return [ast.keyword(k.value, v) for k, v in zip(value.keys, value.values, strict=True)]  # type: ignore[union-attr]
    return None


def _expanded(block: ParallelBlockList) -> ast.Call | None:
    call = block.call
    if call is None or not any(isinstance(a, ast.Starred) for a in call.args):
        return call
    tuples: dict[str, ast.Tuple] = {}
    for loop in block.loops:
        for node in walk(loop):
            if (
                isinstance(node, ast.Assign)
                and node.lineno < call.lineno
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Tuple | ast.List)
            ):
                tuples[node.targets[0].id] = node.value  # type: ignore[assignment]
    args: list[ast.expr] = []
    for arg in call.args:
        name = (
            arg.value.id
            if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name)
            else None
        )
        if name in tuples:
            args += tuples[name].elts
        else:
            args.append(arg)
    new = ast.Call(func=call.func, args=args, keywords=call.keywords)
    return ast.copy_location(new, call)


def bound_args(call: ast.Call, params: list[str]) -> dict[str, ast.expr]:
    """Block parameter -> the expression the transformer passes for it."""
    bound: dict[str, ast.expr] = {}
    for i, arg in enumerate(call.args):
        if i < len(params) and not isinstance(arg, ast.Starred):
            bound[params[i]] = arg
    for kw in call.keywords:
        if kw.arg:
            bound[kw.arg] = kw.value
    return bound


def name_of(expr: ast.expr | None) -> str | None:
    return expr.id if isinstance(expr, ast.Name) else None


# methods that hand back the same tokens in the same layout (a cast, a copy)
_SAME_TOKENS = frozenset(
    {"float", "half", "bfloat16", "double", "to", "type", "type_as", "contiguous", "clone"}
)


def passed_name(expr: ast.expr | None) -> str | None:
    """The variable a block argument hands over, seen through casts and copies that keep every
    token where it is (`blk(x.float(), c)`, `x.to(dtype)`, `x.contiguous()`) and through a
    choice between it and None (`rope if blk.use_rope else None`: the hook skips a None)."""
    if isinstance(expr, ast.IfExp):
        branches = [b for b in (expr.body, expr.orelse) if not _is_none(b)]
        expr = branches[0] if len(branches) == 1 else None
    while (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr in _SAME_TOKENS
    ):
        expr = expr.func.value
    return name_of(expr)


def _is_none(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is None


def is_double_stream(block: ParallelBlockList) -> bool:
    """The transformer unpacks two streams from the block (`e, h = block(h, e, ...)`)."""
    node = _call_assignment(block) if block.call is not None else None
    return (
        node is not None
        and isinstance(node.targets[0], ast.Tuple)
        and len(node.targets[0].elts) >= 2
    )


def block_list_keys(block: ParallelBlockList) -> tuple[str, str]:
    return f"{block.attr}.0", f"{block.attr}.*"


def names_passed_to_blocks(blocks: list[ParallelBlockList]) -> set[str]:
    out: set[str] = set()
    for b in blocks:
        if b.call is not None:
            for a in [*b.call.args, *(k.value for k in b.call.keywords)]:
                out |= names_read(a)
    return out


def guards_of(ctx: ParallelContext, block: ParallelBlockList, flow: ForwardFlow) -> set[str]:
    """Optional forward inputs that must be given for the list's loop to run."""
    out: set[str] = set()
    if ctx.forward is None:
        return out
    for node in walk_local(ctx.forward):
        if isinstance(node, ast.If) and any(
            child is loop for stmt in node.body for child in walk(stmt) for loop in block.loops
        ):
            out |= not_none_guards(node.test) & flow.optional
    return out


def is_block_call(node: ast.AST, block: ParallelBlockList) -> bool:
    """`node` is the list's block call as written. `block.call` may be a rewritten copy
    (arguments expanded or named, a runner read as the block's call): it keeps the position of
    the call as written."""
    call = block.call
    if call is None:
        return False
    if node is call:
        return True
    return isinstance(node, ast.Call) and (node.lineno, node.col_offset) == (
        call.lineno,
        call.col_offset,
    )


def _call_assignment(block: ParallelBlockList) -> ast.Assign | None:
    """The assignment that receives the block call (also through `a if c else b`)."""
    for loop in block.loops:
        for node in walk_local(loop):
            if isinstance(node, ast.Assign) and any(
                is_block_call(n, block) for n in walk(node.value)
            ):
                return node
    return None


def call_targets(block: ParallelBlockList) -> list[str]:
    node = _call_assignment(block)
    if node is None:
        return []
    return [n.id for n in walk(node.targets[0]) if isinstance(n, ast.Name)]


def encoder_input(
    params: list[str], bound: dict[str, ast.expr], double: bool, flow: ForwardFlow
) -> tuple[str | None, str | None]:
    """The block parameter and forward variable of the encoder (text) stream, if any."""
    if double and len(params) > 1:
        return params[1], name_of(bound.get(params[1]))
    for param, expr in bound.items():
        if params and param == params[0]:
            continue
        var = passed_name(expr)
        if var and any(
            p != flow.hidden and "hidden_states" in p for p in flow.derived.get(var, set())
        ):
            return param, var  # a second token sequence (text) the blocks attend to
    return None, None
