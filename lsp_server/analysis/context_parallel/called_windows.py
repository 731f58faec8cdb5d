"""Windows cut, and reductions over the tokens made, in the functions a module calls with its
tokens.

A processor that hands its queries and keys to a function building a block-sparse mask
(`nabla_block_mask(q.transpose(1, 2), k.transpose(1, 2), ...)`, which does `B, h, S, D =
q.shape` and `q.reshape(B, h, S // 64, 64, D).mean(-2)`) has its blocks cut from each rank's
own slice under a token split, as if it cut them itself (`token_windows`); a block whose helper
returns a mean over the tokens reduces over each rank's own (`token_reductions`). Calls are
followed into functions of the file, imported functions and methods (`called_functions`), a
few levels down, each function once per set of layouts it is handed. The layout of each value
handed is followed from the module's stream, `(B, S, C)`, through layout ops and the functions
that made it (`value_layouts`), so a length unpacked from a head-split `(B, H, S, D)` tensor is
read at index 2.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..astutil import callee_name, short_text, walk
from ..parallel_input import ParallelContext
from .called_functions import (
    Caller,
    bound_arguments,
    callee,
    calls_in,
    statement_value,
    statements,
)
from .query_layout import Layout
from .token_reductions import SHIFTS, names
from .token_windows import TokenSeen, window_text, windows_in
from .value_layouts import NOT_A_FUNCTION, ValueLayouts

MAX_DEPTH = 3
_STREAM = Layout(3, 1)  # what a module's first input (a processor's `hidden_states`) holds
Step = tuple[Caller, ast.Call]  # a function read, and the call that runs it


@dataclass(frozen=True)
class CallChain:
    """Calls from a module down to the function that does the work on its tokens, and that
    work (a window cut, a reduction)."""

    steps: tuple[Step, ...]
    hit: ast.Call
    windows: bool  # a window cut; else a reduction (or a shift) over the tokens

    def message(self, top: Caller) -> str:
        chain = ", which hands them to ".join(
            f"`{callee_name(call)}` (line {call.lineno})" for _, call in self.steps
        )
        last = self.steps[-1][0]
        where = f"line {self.hit.lineno}"
        if last.source.path != top.source.path:
            where += f" of {last.source.path.name}"
        return f"hands the tokens it sees to {chain}, which {self._what(where)}"

    def _what(self, where: str) -> str:
        if self.windows:
            return f"cuts them into groups {window_text(self.hit, f', {where}')}"
        if callee_name(self.hit) in SHIFTS:
            return (
                f"pairs each token with its neighbours (`{short_text(self.hit)}`, {where}): "
                "under a token split the tokens at each rank's edge would meet this rank's own"
            )
        return (
            f"reduces over them (`{short_text(self.hit)}`, {where}): under a token split "
            "each rank would reduce over its own tokens"
        )


def called_windows(
    ctx: ParallelContext, caller: Caller | None, stream: str | None
) -> tuple[int, str] | None:
    """The first call of `caller` handing values made from `stream` to a function that cuts
    their tokens into windows (there or further down): (the call's line, message)."""
    if caller is None or stream is None:
        return None
    found = _Windows(ctx).find(caller, {stream: _STREAM}, 0)
    return (found.steps[0][1].lineno, found.message(caller)) if found else None


class _Windows:
    def __init__(self, ctx: ParallelContext) -> None:
        self.ctx = ctx
        self.seen: set[tuple[object, ...]] = set()
        self.returns: dict[tuple[object, ...], Layout | None] = {}

    def find(
        self, caller: Caller, handed: dict[str, Layout | None], depth: int
    ) -> CallChain | None:
        tracked = set(handed)
        layouts = {name: layout for name, layout in handed.items() if layout is not None}
        values = _Values(self, caller, depth, layouts)
        for stmt in statements(caller.func):
            value = statement_value(stmt)
            if value is None:
                continue
            _comprehensions(value, tracked, layouts)
            for call in calls_in(value):
                found = self._into(caller, call, tracked, values, depth)
                if found is not None:
                    return found
            _bind(stmt, value, tracked, values)
        return None

    def _into(
        self,
        caller: Caller,
        call: ast.Call,
        tracked: set[str],
        values: ValueLayouts,
        depth: int,
    ) -> CallChain | None:
        """`call`, when it hands tracked values to a function read: that function's windows."""
        if not any(names(arg) & tracked for arg in [*call.args, *(k.value for k in call.keywords)]):
            return None
        inner = callee(self.ctx, caller, call)
        if inner is None:
            return None
        handed = {
            param: values.layout(arg)
            for param, arg in bound_arguments(call, inner.func)
            if names(arg) & tracked
        }
        key = (id(inner.func), tuple(sorted(handed.items(), key=str)))
        if not handed or key in self.seen:
            return None
        self.seen.add(key)
        known = {name: layout for name, layout in handed.items() if layout is not None}
        hit = windows_in(inner.func, TokenSeen(tracked=set(handed), layouts=known))
        if hit is not None:
            return CallChain(((inner, call),), hit, windows=True)
        deeper = self.find(inner, handed, depth + 1) if depth + 1 < MAX_DEPTH else None
        return CallChain(((inner, call), *deeper.steps), deeper.hit, True) if deeper else None

    def return_layout(
        self, caller: Caller, call: ast.Call, outer: dict[str, Layout], depth: int
    ) -> Layout | None:
        """The layout of what a called function returns, from the layouts it is handed."""
        inner = callee(self.ctx, caller, call) if depth < MAX_DEPTH else None
        if inner is None:
            return None
        here = _Values(self, caller, depth + 1, outer)
        layouts: dict[str, Layout] = {}
        for param, arg in bound_arguments(call, inner.func):
            layout = here.layout(arg)
            if layout is not None:
                layouts[param] = layout
        key = (id(inner.func), tuple(sorted(layouts.items())))
        if not layouts or key in self.returns:
            return self.returns.get(key)
        self.returns[key] = None  # a recursive function reads as unknown
        values = _Values(self, inner, depth + 1, layouts)
        tracked = set(layouts)
        for stmt in statements(inner.func):
            value = statement_value(stmt)
            if isinstance(stmt, ast.Return) and value is not None:
                self.returns[key] = values.layout(value)
                break
            if value is not None:
                _bind(stmt, value, tracked, values)
        return self.returns[key]


class _Values(ValueLayouts):
    """Layouts in a function the windows reading follows: a function it calls by name (of the
    file or imported) returns the layout `_Windows.return_layout` reads from what it hands."""

    def __init__(
        self, windows: _Windows, caller: Caller, depth: int, layouts: dict[str, Layout]
    ) -> None:
        super().__init__(layouts)
        self.windows = windows
        self.caller = caller
        self.depth = depth

    def called(self, call: ast.Call) -> object:
        if not isinstance(call.func, ast.Name):
            return NOT_A_FUNCTION
        return self.windows.return_layout(self.caller, call, self.layouts, self.depth)


def _comprehensions(value: ast.expr, tracked: set[str], layouts: dict[str, Layout]) -> None:
    """`(f(t) for t in (q, k))`: the target stands for each tracked value, with their layout
    when they share one."""
    for node in walk(value):
        if not (isinstance(node, ast.comprehension) and names(node.iter) & tracked):
            continue
        tracked |= names(node.target)
        parts = node.iter.elts if isinstance(node.iter, ast.Tuple | ast.List) else []
        found = {ValueLayouts(layouts).layout(p) for p in parts}
        layout = found.pop() if len(found) == 1 else None
        if layout is not None and isinstance(node.target, ast.Name):
            layouts[node.target.id] = layout


def _bind(
    stmt: ast.stmt,
    value: ast.expr,
    tracked: set[str],
    values: ValueLayouts,
) -> None:
    """The names `stmt` binds: tracked when made from tracked values (a plain assignment from
    other values drops them), with the layout read."""
    layouts = values.layouts
    target = _target(stmt)
    if target is None:
        return
    bound = names(target)
    if not names(value) & tracked:
        if isinstance(stmt, ast.Assign):
            tracked -= bound
            for name in bound:
                layouts.pop(name, None)
        return
    tracked |= bound
    if isinstance(stmt, ast.AugAssign):  # `x += f(q)`: element-wise, `x` keeps its layout
        return
    read: dict[str, Layout | None] = {}
    if isinstance(stmt, ast.Assign | ast.AnnAssign):
        read = values.unpacked(target, value)
    for name in bound:
        layouts.pop(name, None)
        layout = read.get(name)
        if layout is not None:
            layouts[name] = layout


def _target(stmt: ast.stmt) -> ast.expr | None:
    if isinstance(stmt, ast.Assign):
        return stmt.targets[0] if len(stmt.targets) == 1 else None
    if isinstance(stmt, ast.AnnAssign | ast.AugAssign | ast.For):
        return stmt.target
    return None


def layout_values(ctx: ParallelContext, caller: Caller, layouts: dict[str, Layout]) -> ValueLayouts:
    """A reader of the layouts in `caller` that follows the functions it calls by name."""
    return _Values(_Windows(ctx), caller, 0, layouts)
