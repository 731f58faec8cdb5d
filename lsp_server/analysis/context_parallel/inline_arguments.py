"""Block-call arguments written inline, read as locals forward assigns before the loop.

`layer(x, self.freqs_cis[: x.shape[1]], c)` and `kw = dict(freqs=self.freqs[: x.shape[1]])` hand
the blocks a value no local names. The readers of forward's locals (tables cut to a length,
position tensors, masks, root-split blockers) see only names, so such an argument is read as
`<param> = <expression>` assigned right before the loop and the call as passing `<param>`: the
hook plan keys by the block's parameter name anyway. Only expressions that read nothing the loop
sets (not the block or the index; a stream only for its shape) are named; the rest stay as
written.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import replace

from ..astutil import declared_params, names_assigned, names_read, walk, walk_local
from ..parallel_input import ParallelBlockList, ParallelContext
from .block_binding import passed_name

# what is named: a value computed inline (a slice, a call, arithmetic); names, constants,
# attributes and literal tuples/lists/dicts are read as written (their elements keep their names)
_COMPUTED = ast.Subscript | ast.Call | ast.BinOp | ast.UnaryOp | ast.IfExp
_AFTER_THE_LINE = 10_000


def with_named_arguments(ctx: ParallelContext) -> ParallelContext:
    """`ctx` with inline block-call arguments named (see the module docstring); the same `ctx`
    when there is nothing to name."""
    forward = ctx.forward
    if forward is None:
        return ctx
    used = {n.id for n in walk_local(forward) if isinstance(n, ast.Name)}
    used |= {a.arg for a in forward.args.args + forward.args.kwonlyargs}
    inserts: dict[int, list[ast.stmt]] = {}
    lists: list[ParallelBlockList] = []
    for block in ctx.block_lists:
        top = _top_statement(forward, block)
        if block.call is None or top is None:
            lists.append(block)
            continue
        loop_names = set().union(*(names_assigned(loop) for loop in block.loops))
        call, assigns = _named(ctx, block, block.call, loop_names, used, top)
        inserts.setdefault(top, []).extend(assigns)
        lists.append(replace(block, call=call) if assigns else block)
    if not any(inserts.values()):
        return ctx
    body: list[ast.stmt] = []
    for index, stmt in enumerate(forward.body):
        body += inserts.get(index, [])
        body.append(stmt)
    named = copy.copy(forward)
    named.body = body
    return replace(ctx, forward=named, block_lists=tuple(lists))


def _top_statement(forward: ast.FunctionDef, block: ParallelBlockList) -> int | None:
    """The index in forward's body of the statement that holds the list's first loop."""
    if not block.loops:
        return None
    loop = block.loops[0]
    for index, stmt in enumerate(forward.body):
        if stmt is loop or any(node is loop for node in walk_local(stmt)):
            return index
    return None


def _value_names(expr: ast.expr) -> set[str]:
    """Names `expr` reads the values of: a stream read only for its shape (`x.shape[1]`,
    `x.size(1)`) does not count, the blocks keep it."""
    shape_reads = {
        id(node.value)
        for node in walk(expr)
        if isinstance(node, ast.Attribute)
        and node.attr in ("shape", "size", "ndim", "device", "dtype")
        and isinstance(node.value, ast.Name)
    }
    return {
        n.id
        for n in walk(expr)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in shape_reads
    }


def _named(
    ctx: ParallelContext,
    block: ParallelBlockList,
    call: ast.Call,
    loop_names: set[str],
    used: set[str],
    top: int,
) -> tuple[ast.Call, list[ast.stmt]]:
    found = ctx.resolver.find_method(block.block, "forward")
    params = declared_params(found[0]) if found else []
    line = getattr(ctx.forward.body[top], "lineno", call.lineno) if ctx.forward else call.lineno
    assigns: list[ast.stmt] = []

    def name(param: str | None, expr: ast.expr) -> ast.expr:
        if param is None or not isinstance(expr, _COMPUTED) or not names_read(expr):
            return expr
        if isinstance(expr, ast.IfExp) and passed_name(expr) is not None:
            return expr  # `table if flag else None`: the local itself, or nothing
        if _value_names(expr) & loop_names:
            return expr
        local = param if param not in used else f"{param}_arg"
        while local in used:
            local += "_"
        used.add(local)
        assign = ast.Assign(targets=[ast.Name(local, ast.Store())], value=expr)
        # on the line before the loop, after whatever starts there (readers order statements
        # by line and column: `table = ...` written on that line must come first)
        assign.lineno = assign.end_lineno = max(1, line - 1)
        assign.col_offset = assign.end_col_offset = _AFTER_THE_LINE
        assign.targets[0].lineno = assign.lineno
        assign.targets[0].col_offset = _AFTER_THE_LINE
        assigns.append(assign)
        return ast.copy_location(ast.Name(local, ast.Load()), expr)

    args = [name(params[i] if i < len(params) else None, a) for i, a in enumerate(call.args)]
    keywords = [ast.keyword(k.arg, name(k.arg, k.value)) for k in call.keywords]
    new = ast.copy_location(ast.Call(func=call.func, args=args, keywords=keywords), call)
    return new, assigns
