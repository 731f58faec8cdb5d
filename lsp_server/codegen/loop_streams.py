"""The streams a block loop carries, as the per-block step takes them (`block_loop`).

A step takes the streams the loop carries from one block to the next and returns them. Mostly
the block is handed them as they are (`x = block(x, c)`); a loop may also route them, handing
the block an expression of one (`routed = block(torch.gather(x, 1, idx), c)`) and writing its
output back into it (`x = x.scatter(1, idx, routed)`). Then the step takes the routed stream
`x` whole and runs the router, the gather, the block and the scatter itself: the body as it is,
once per block, which is the loop's own computation.

Also here: which names a body reads or binds, and in which order (`read_before_write`: a name
carried from the previous block's iteration).
"""

from __future__ import annotations

import ast

from .step_body import StepError


def stream_inputs(
    call: ast.Call, params: list[str], streams: int, body: list[ast.stmt]
) -> tuple[list[str], str | None]:
    """The names passed for the block's leading (stream) parameters, and the first one passed
    as an expression (`torch.gather(x, 1, idx)`, of exactly one name the loop carries: that
    name is the stream), as written; None when all are plain names."""
    by_keyword = {kw.arg: kw.value for kw in call.keywords if kw.arg}
    out: list[str] = []
    routed: str | None = None
    carried: set[str] | None = None
    for i in range(streams):
        value: ast.expr | None = None
        if i < len(call.args) and not isinstance(call.args[i], ast.Starred):
            value = call.args[i]
        elif i < len(params):
            value = by_keyword.get(params[i])
        if isinstance(value, ast.Name):
            out.append(value.id)
            continue
        if value is None:
            raise StepError("the streams passed to the block are not plain names")
        carried = carried_names(body) if carried is None else carried
        read = sorted(_names([value], ast.Load) & carried)
        if len(read) != 1:
            raise StepError(
                f"the streams passed to the block are not plain names (`{ast.unparse(value)}` "
                f"reads {', '.join(read) if read else 'none'} of the names the loop carries, "
                "not one stream)"
            )
        out.append(read[0])
        routed = routed or ast.unparse(value)
    return out, routed


def written_back(
    body: list[ast.stmt], call_stmt: ast.stmt, targets: list[str], inputs: list[str]
) -> list[str] | None:
    """`routed = block(gather(x, ...))` then `x = x.scatter(1, idx, routed)`: each name the call
    assigns, replaced by the stream written back from it (one statement rebinding one stream
    and reading the name); None when a name is written back nowhere or into several."""
    after = body[body.index(call_stmt) + 1 :]
    out: list[str] = []
    for target in targets:
        if target in inputs:
            out.append(target)
            continue
        into = {
            stmt.targets[0].id
            for stmt in after
            if isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id in inputs
            and target in _names([stmt.value], ast.Load)
        }
        if len(into) != 1:
            return None
        out.append(into.pop())
    return out if len(set(out)) == len(out) else None


def carried_names(body: list[ast.stmt]) -> set[str]:
    """The names the body binds and reads first (the previous block's value)."""
    return {n for n in assigned(body) & loads(body) if read_before_write(body, n)}


def _names(nodes: list[ast.stmt] | list[ast.AST] | list[ast.expr], ctx: type) -> set[str]:
    return set().union(*(_scoped(node, ctx) for node in nodes)) if nodes else set()


def _scoped(node: ast.AST, ctx: type) -> set[str]:
    """The names `node` loads or binds (`ctx`) in the scope it runs in: a function it defines
    binds its own name there and reads the names its body reads but does not bind (a closure
    such as `def wrap(args): out = {}; ...` keeps its `out` to itself)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        if ctx is ast.Store:
            return set() if isinstance(node, ast.Lambda) else {node.name}
        args = node.args
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        body = node.body if isinstance(node.body, list) else [node.body]
        return _names(body, ast.Load) - _names(body, ast.Store) - params
    found = {node.id} if isinstance(node, ast.Name) and isinstance(node.ctx, ctx) else set()
    for child in ast.iter_child_nodes(node):
        found |= _scoped(child, ctx)
    return found


def assigned(body: list[ast.stmt]) -> set[str]:
    return _names(body, ast.Store)


def loads(body: list[ast.stmt]) -> set[str]:
    return _names(body, ast.Load)


def read_before_write(body: list[ast.stmt], name: str) -> bool:
    """Whether the first statement (in source order, nested ones included) that mentions `name`
    reads it (the value of the previous block's iteration) rather than binding it."""
    for part in _in_order(body):
        if name in _names([part], ast.Load):
            return True
        if name in _names([part], ast.Store):
            return False
    return False


def _in_order(body: list[ast.stmt]) -> list[ast.AST]:
    """Simple statements and the headers of compound ones (tests, iterables), in source order."""
    out: list[ast.AST] = []
    for stmt in body:
        if isinstance(stmt, ast.If | ast.While):
            out.append(stmt.test)
            out += _in_order(stmt.body) + _in_order(stmt.orelse)
        elif isinstance(stmt, ast.For):
            out += [stmt.iter, stmt.target]
            out += _in_order(stmt.body) + _in_order(stmt.orelse)
        elif isinstance(stmt, ast.With):
            out += [item.context_expr for item in stmt.items]
            out += _in_order(stmt.body)
        elif isinstance(stmt, ast.Try):
            out += _in_order(stmt.body)
            for handler in stmt.handlers:
                out += _in_order(handler.body)
            out += _in_order(stmt.orelse) + _in_order(stmt.finalbody)
        else:
            out.append(stmt)
    return out
