"""Indexed loops over a block list read as `enumerate` loops, for per-block steps (`block_loop`).

    for i in range(len(self.blocks)):              for i, block in enumerate(self.blocks):
        x = self.blocks[i](x, c * g[i])      ->        x = block(x, c * g[i])

    i = 0
    while i < len(self.blocks):              ->    (the same, the counter's `+= 1` dropped)
        x = self.blocks[i](x, c * g[i])
        i += 1

Only where the two are the same loop: `range(len(self.<list>))` (a size bound was already
rewritten to the list's length by the forward copy's `loop_bound` fix), a `while` the analysis
proves a counter loop (`analysis.counter_loops`), the body indexing the list only as
`self.<list>[<index>]` and not assigning the index. The new loop keeps the old one's position,
so the step transformation replaces the old loop's lines.
"""

from __future__ import annotations

import ast


def as_enumerate(func: ast.FunctionDef, attr: str, block_name: str) -> ast.FunctionDef:
    """`func` with its indexed loops over `self.<attr>` written as `enumerate` loops binding
    `block_name` (in place); the loops that are not provably the same are left as they are, and
    all of them when a `for` already iterates the list itself (that loop is the one to step)."""
    if any(isinstance(n, ast.For) and _iterates(n.iter, attr) for n in ast.walk(func)):
        return func
    for node in list(ast.walk(func)):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            for k, stmt in enumerate(stmts):
                if isinstance(stmt, ast.For | ast.While):
                    found = _indexed(stmt, func, attr)
                    if found is not None:
                        stmts[k] = _enumerate_loop(stmt, found[0], found[1], attr, block_name)
    return func


def _indexed(
    loop: ast.For | ast.While, func: ast.FunctionDef, attr: str
) -> tuple[str, list[ast.stmt]] | None:
    """(index, body of one iteration) of an indexed loop over the whole `self.<attr>`."""
    if isinstance(loop, ast.For):
        it = loop.iter
        if not (
            isinstance(loop.target, ast.Name)
            and isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name)
            and it.func.id == "range"
            and len(it.args) == 1
            and _is_len_of(it.args[0], attr)
            and not loop.orelse
        ):
            return None
        index, body = loop.target.id, loop.body
    else:
        from ..analysis.counter_loops import counter_loop

        counter = counter_loop(loop, func)
        if isinstance(counter, str) or not _is_len_of(counter.bound, attr):
            return None
        index = counter.index
        body = [s for s in loop.body if s is not counter.step]
    return (index, body) if _only_indexed(body, attr, index) else None


def _iterates(it: ast.expr, attr: str) -> bool:
    """`self.<attr>` in a loop's iterable other than as `len(self.<attr>)`."""
    lengths = {id(n.args[0]) for n in ast.walk(it) if _is_len_of(n, attr)}
    return any(_is_list(n, attr) and id(n) not in lengths for n in ast.walk(it))


def _is_len_of(node: ast.AST, attr: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "len"
        and len(node.args) == 1
        and _is_list(node.args[0], attr)
    )


def _is_list(node: ast.expr, attr: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _only_indexed(body: list[ast.stmt], attr: str, index: str) -> bool:
    """The body reads `self.<attr>[<index>]` (at least once) and the list no other way that
    picks a block (`self.<attr>[i + 1]`), and does not assign the index."""
    picks = [
        n
        for stmt in body
        for n in ast.walk(stmt)
        if isinstance(n, ast.Subscript) and _is_list(n.value, attr)
    ]
    assigned = any(
        isinstance(n, ast.Name) and n.id == index and not isinstance(n.ctx, ast.Load)
        for stmt in body
        for n in ast.walk(stmt)
    )
    return (
        bool(picks)
        and all(isinstance(p.slice, ast.Name) and p.slice.id == index for p in picks)
        and not assigned
    )


class _Pick(ast.NodeTransformer):
    """`self.<attr>[<index>]` -> `<block>`."""

    def __init__(self, attr: str, index: str, block: str) -> None:
        self.attr, self.index, self.block = attr, index, block

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if (
            _is_list(node.value, self.attr)
            and isinstance(node.slice, ast.Name)
            and node.slice.id == self.index
        ):
            return ast.copy_location(ast.Name(self.block, ast.Load()), node)
        return node


def _enumerate_loop(
    loop: ast.For | ast.While, index: str, body: list[ast.stmt], attr: str, block: str
) -> ast.For:
    pick = _Pick(attr, index, block)
    target = ast.Tuple([ast.Name(index, ast.Store()), ast.Name(block, ast.Store())], ast.Store())
    blocks = ast.Attribute(ast.Name("self", ast.Load()), attr, ast.Load())
    new = ast.For(
        target=target,
        iter=ast.Call(ast.Name("enumerate", ast.Load()), [blocks], []),
        body=[pick.visit(stmt) for stmt in body],
        orelse=[],
    )
    ast.copy_location(new, loop)
    return ast.fix_missing_locations(new)
