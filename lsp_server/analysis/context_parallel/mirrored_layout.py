"""A position table laid out by the very ops that lay out the token stream.

Forward often builds a table whose axes it does not show (a grid from a module whose output is not
read) and then turns it into one row per token with the ops it turns the latent into tokens with:
`rope = rope.flatten(2).transpose(1, 2)` beside `x = x.flatten(2).transpose(1, 2)`, or one
function for both (`x, rope = fractal_flatten(x, rope, shape)`, each of its statements applied to
both). The model pairs row i with token i that way, so the table's sequence axis is the stream's
(the axis the stream is split on). Later rebindings must keep it: element-wise conversions and
joins along that axis (`cat([history, rope], dim=1)`).
"""

from __future__ import annotations

import ast
import copy

from ..astutil import int_literal, names_read, walk
from ..parallel_input import ParallelContext
from .axis_syntax import CONVERSIONS
from .flow import ForwardFlow
from .forward_statements import assigned_names


def mirrored_axis(
    ctx: ParallelContext, flow: ForwardFlow, var: str, stream: str, axis: int
) -> str | None:
    """How `var` gets the stream's sequence axis `axis` (a description), or None."""
    if ctx.forward is None or var == stream:
        return None
    assigns = sorted(
        (
            node
            for node in walk(ctx.forward)
            if isinstance(node, ast.Assign) and node.lineno < flow.first_loop_line
        ),
        key=lambda n: n.lineno,
    )
    for index, node in enumerate(assigns):
        how = _mirror(ctx, node, assigns, var, stream)
        if how is None:
            continue
        later = [a for a in assigns[index + 1 :] if var in assigned_names(a)]
        if all(_keeps_axis(a.value, var, axis) for a in later):
            return how
        return None
    return None


def _mirror(
    ctx: ParallelContext, node: ast.Assign, assigns: list[ast.Assign], var: str, stream: str
) -> str | None:
    """`var = <ops on var>` with `stream = <the same ops on stream>` in forward, or `stream, var
    = f(stream, var, ...)` with `f` applying each of its statements to both."""
    targets = assigned_names(node)
    if targets == [var] and var in names_read(node.value) and _relayouts(node.value):
        text = _renamed(node.value, var, stream)
        if any(
            assigned_names(other) == [stream] and ast.unparse(other.value) == text
            for other in assigns
        ):
            return f"laid out as the token stream is (`{ast.unparse(node.value)}`)"
        return None
    if set(targets) != {var, stream} or not isinstance(node.value, ast.Call):
        return None
    call = node.value
    if not isinstance(call.func, ast.Name):
        return None
    func = (ctx.transformer.source or ctx.source).top_level.get(call.func.id)
    if not isinstance(func, ast.FunctionDef):
        return None
    names = [a.arg for a in func.args.posonlyargs + func.args.args]
    bound = {
        arg.id: names[i]
        for i, arg in enumerate(call.args)
        if i < len(names) and isinstance(arg, ast.Name)
    }
    if stream not in bound or var not in bound:
        return None
    x, t = bound[stream], bound[var]
    if not _same_ops(func, x, t, targets.index(stream), targets.index(var)):
        return None
    return f"laid out by `{call.func.id}` as the token stream is"


def _same_ops(func: ast.FunctionDef, x: str, t: str, x_out: int, t_out: int) -> bool:
    """Every statement of `func` rebinding `t` has its twin rebinding `x` (the same text, `t`
    read as `x`), at least one of them a relayout, and `func` returns both where the call's
    targets take them."""
    stmts = [n for n in walk(func) if isinstance(n, ast.Assign)]
    ts = [n for n in stmts if assigned_names(n) == [t]]
    xs = {ast.unparse(n.value) for n in stmts if assigned_names(n) == [x]}
    if not ts or not any(_relayouts(n.value) for n in ts):
        return False
    if any(_renamed(n.value, t, x) not in xs for n in ts):
        return False
    returns = [n for n in walk(func) if isinstance(n, ast.Return) and n.value is not None]
    for ret in returns:
        if not isinstance(ret.value, ast.Tuple):
            return False
        elts = ret.value.elts
        if not (
            max(x_out, t_out) < len(elts)
            and isinstance(elts[x_out], ast.Name)
            and elts[x_out].id == x
            and isinstance(elts[t_out], ast.Name)
            and elts[t_out].id == t
        ):
            return False
    return bool(returns)


def _relayouts(expr: ast.expr) -> bool:
    """Some op in `expr` moves or merges axes (the one that makes the token axis)."""
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in ("flatten", "transpose", "permute", "reshape", "view", "movedim")
        for n in walk(expr)
    )


def _renamed(expr: ast.expr, old: str, new: str) -> str:
    class _Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            return ast.Name(new, node.ctx) if node.id == old else node

    return ast.unparse(_Rename().visit(copy.deepcopy(expr)))


def _keeps_axis(value: ast.expr, var: str, axis: int) -> bool:
    """A later rebinding that keeps the axis: a conversion of `var`, or a join of `var` with
    other rows along it."""
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in CONVERSIONS
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == var
    ):
        return True
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in ("cat", "concat")
        and value.args
        and isinstance(value.args[0], ast.List | ast.Tuple)
        and any(isinstance(e, ast.Name) and e.id == var for e in value.args[0].elts)
    ):
        dim = next((k.value for k in value.keywords if k.arg == "dim"), None)
        if dim is None and len(value.args) > 1:
            dim = value.args[1]
        return int_literal(dim) == axis
    return False
