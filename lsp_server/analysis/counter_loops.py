"""Counter loops: a `while` that runs a block list by index exactly as a positional `for` does.

    i = 0                                  for i in range(len(self.blocks)):
    while i < len(self.blocks):     ==         x = self.blocks[i](x, c)
        x = self.blocks[i](x, c)
        i += 1

The `while` is read as `for <counter> in range(<bound>)` only when that is provable from its text
(`counter_loop`): the counter is set to 0 by the last statement that writes it before the loop
(in the same body), the condition is `<counter> < <bound>`, the body ends by adding 1 to the
counter and writes it nowhere else, no `break` / `continue` of the loop and no `else:`, the bound
is a length or a size (`len(...)`, a name, `self.<a>`, `self.config.<a>`, an int) that the body
does not assign, and the counter is not read after the loop (a `for` leaves it one lower; under
caching, with one wrapper in the list, it would be 1). Anything else is a sentence saying why,
which the "no block list" error names with the loop's line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from .astutil import body_holding, first_use_after, int_literal, self_attr, walk, walk_local

# what a counter loop is, for messages
COUNTER_SHAPE = (
    "`i = 0` then `while i < len(self.<list>)` (or `i < <size>`) with `i += 1` ending the body"
)


@dataclass(frozen=True)
class CounterLoop:
    """A provable counter loop: its counter, its bound and the statement that steps it."""

    loop: ast.While
    index: str
    bound: ast.expr
    step: ast.stmt

    def as_for(self) -> ast.For:
        """The equivalent `for <index> in range(<bound>): <body without the step>` (for reading
        the loop header's lists; the `while` itself stays the loop of the site)."""
        header = ast.Call(ast.Name("range", ast.Load()), [self.bound], [])
        body = [s for s in self.loop.body if s is not self.step] or [ast.Pass()]
        node = ast.For(ast.Name(self.index, ast.Store()), header, body, [])
        ast.copy_location(node, self.loop)
        return ast.fix_missing_locations(node)


def counter_loop(loop: ast.While, method: ast.FunctionDef) -> CounterLoop | str:
    """`loop` (a `while` of `method`) as a counter loop, or why it is not one (a clause)."""
    test = loop.test
    if not (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Lt)
        and isinstance(test.left, ast.Name)
    ):
        return f"its condition `{ast.unparse(test)}` is not `<counter> < <bound>`"
    index, bound = test.left.id, test.comparators[0]
    if loop.orelse:
        return "it has an `else:` branch"
    step = loop.body[-1]
    if not _adds_one(step, index):
        return f"its body does not end by adding 1 to `{index}` (`{_short(step)}`)"
    why = (
        _other_writes(loop, step, index)
        or _own_jumps(loop)
        or _unstable_bound(loop, bound)
        or _initialised(loop, method, index)
        or _read_after(loop, method, index)
    )
    return why or CounterLoop(loop, index, bound, step)


def _adds_one(stmt: ast.stmt, index: str) -> bool:
    """`i += 1` or `i = i + 1` / `i = 1 + i`."""
    if isinstance(stmt, ast.AugAssign):
        return (
            isinstance(stmt.target, ast.Name)
            and stmt.target.id == index
            and isinstance(stmt.op, ast.Add)
            and _is_one(stmt.value)
        )
    if not (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and stmt.targets[0].id == index
        and isinstance(stmt.value, ast.BinOp)
        and isinstance(stmt.value.op, ast.Add)
    ):
        return False
    left, right = stmt.value.left, stmt.value.right
    return (_is_name(left, index) and _is_one(right)) or (_is_one(left) and _is_name(right, index))


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_one(node: ast.expr) -> bool:
    return int_literal(node) == 1 and not isinstance(getattr(node, "value", None), bool)


def _other_writes(loop: ast.While, step: ast.stmt, index: str) -> str | None:
    """A write of the counter in the body besides the step (nested functions too)."""
    for stmt in loop.body:
        if stmt is step:
            continue
        for node in walk(stmt):
            if (
                isinstance(node, ast.Name)
                and node.id == index
                and not isinstance(node.ctx, ast.Load)
            ):
                return f"`{index}` is also written at line {node.lineno}"
            if isinstance(node, ast.Nonlocal | ast.Global) and index in node.names:
                return f"`{index}` is declared {type(node).__name__.lower()} at line {node.lineno}"
    return None


def _own_jumps(loop: ast.While) -> str | None:
    """A `break` or `continue` of the loop itself (not of a loop or function inside it)."""
    todo: list[ast.AST] = list(loop.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.Break | ast.Continue):
            word = "break" if isinstance(node, ast.Break) else "continue"
            return f"it has a `{word}` (line {node.lineno})"
        if isinstance(node, ast.For | ast.AsyncFor | ast.While | ast.FunctionDef | ast.Lambda):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return None


def _unstable_bound(loop: ast.While, bound: ast.expr) -> str | None:
    """A bound that is not a length or a size, or one the body assigns (a `while` reads it at
    every test, `range` once)."""
    inner = bound.args[0] if _is_len(bound) else bound  # type: ignore[attr-defined]
    if not (_is_size(inner) or (inner is bound and int_literal(bound) is not None)):
        return f"its bound `{ast.unparse(bound)}` is not a length or a size"
    text = ast.unparse(inner)
    for stmt in loop.body:
        for node in walk(stmt):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            if any(ast.unparse(t) == text for t in targets):
                return (
                    f"its bound `{ast.unparse(bound)}` is assigned in the body (line {node.lineno})"
                )
    return None


def _is_len(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "len"
        and len(node.args) == 1
        and not node.keywords
    )


def _is_size(node: ast.expr) -> bool:
    """A name or an attribute chain on a name (`depth`, `self.depth`, `self.config.depth`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _initialised(loop: ast.While, method: ast.FunctionDef, index: str) -> str | None:
    """The last statement before the loop (in the body holding it) that writes the counter sets
    it to 0."""
    body = body_holding(walk_local(method), loop)
    if body is None:
        return f"`{index}` is not set to 0 before it"
    position = next(k for k, stmt in enumerate(body) if stmt is loop)
    for stmt in reversed(body[:position]):
        if not any(
            isinstance(n, ast.Name) and n.id == index and not isinstance(n.ctx, ast.Load)
            for n in walk(stmt)
        ):
            continue
        value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
        single = isinstance(stmt, ast.AnnAssign) or (
            isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
        )
        if single and value is not None and int_literal(value) == 0:
            return None
        return f"`{index}` is set by `{_short(stmt)}` (line {stmt.lineno}) before it, not to 0"
    return f"`{index}` is not set to 0 just before it"


def _read_after(loop: ast.While, method: ast.FunctionDef, index: str) -> str | None:
    """The counter read after the loop before anything sets it again (on one line the reads
    come first: `i = i + 1` reads `i`)."""
    use = first_use_after(method, index, loop.end_lineno or loop.lineno)
    if use is not None and isinstance(use.ctx, ast.Load):
        return (
            f"`{index}` is read after the loop (line {use.lineno}): a `for` would leave it "
            "one lower, and under caching (one wrapper in the list) it would be 1"
        )
    return None


def _short(stmt: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(stmt).split("\n")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def unread_while(funcs: Iterable[ast.FunctionDef], attr: str) -> str:
    """The first `while` of `funcs` that indexes `self.<attr>[...]` but is not a counter loop:
    the loop, its line and why, for the "no block list" error ("" when there is none)."""
    for func in funcs:
        for node in walk_local(func):
            if not isinstance(node, ast.While) or not any(
                isinstance(n, ast.Subscript) and self_attr(n.value) == attr
                for n in walk_local(node)
            ):
                continue
            why = counter_loop(node, func)
            if isinstance(why, str):
                return (
                    f"`while {ast.unparse(node.test)}:` (line {node.lineno}) runs it but is not "
                    f"read as a loop over the list: {why}; a `while` is read as `for i in "
                    f"range(...)` only as {COUNTER_SHAPE}, with no `break` or `continue` and no "
                    "other write of `i`"
                )
    return ""
