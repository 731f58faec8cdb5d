"""A grid of positions forward flattens into one sequence axis before the blocks, as it
flattens the token stream it splits: the merged axis is the grid's sequence axis."""

from __future__ import annotations

import ast

from ..astutil import int_literal, self_attr
from .flow import ForwardFlow, ModuleCall
from .result import SplitInput


def flattened_grid(
    flow: ForwardFlow, group: list[ModuleCall], split_vars: list[str]
) -> tuple[SplitInput, str] | None:
    """A grid of positions (`(T, H, W, ...)`) that forward flattens into one sequence axis
    before the blocks (`rope = rope.flatten(0, 2)`), as it flattens the token stream it splits
    over as many grid axes (`x = x.flatten(1, 3)`): the merged axis is the sequence axis. The
    module's own output is not sequence-shaped, so the split happens where the blocks receive
    it."""
    (call,) = group
    if len(call.targets) != 1:
        return None
    var = call.targets[0]
    rope = _flatten_of(flow, var, call.line) or _flattened_call(flow, call)
    if rope is None:
        return None
    start, end, line = rope
    streams = [f for v in split_vars if (f := _flatten_of(flow, v, 0)) is not None]
    if not any(e - s == end - start for s, e, _ in streams):
        return None
    how = (
        f"a position grid flattened in forward (`{var}.flatten({start}, {end})`, line {line}) "
        f"as the split token stream is: sequence axis {start}, split where the blocks receive it"
    )
    return SplitInput(start, None, reason=how, line=line), how


def _flattened_call(flow: ForwardFlow, call: ModuleCall) -> tuple[int, int, int] | None:
    """`rope = self.<attr>(...).flatten(a, b)`: the call's own statement flattens it."""
    for stmt in flow.statements:
        if isinstance(stmt, ast.Assign) and stmt.lineno == call.line:
            value = stmt.value
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr == "flatten"
                and isinstance(value.func.value, ast.Call)
                and self_attr(value.func.value.func) == call.attr
            ):
                return _literal_span(value, stmt.lineno)
    return None


def _literal_span(call: ast.Call, line: int) -> tuple[int, int, int] | None:
    if len(call.args) != 2 or call.keywords:
        return None
    start, end = (int_literal(a) for a in call.args)
    if start is not None and end is not None and 0 <= start < end:
        return start, end, line
    return None


def _flatten_of(flow: ForwardFlow, var: str, after: int) -> tuple[int, int, int] | None:
    """`var = var.flatten(a, b)` (or `var = other.flatten(a, b)`) in forward after line `after`
    and before the first block loop, with literal `0 <= a < b`: (a, b, line)."""
    for stmt in flow.statements:
        if not (
            isinstance(stmt, ast.Assign)
            and after < stmt.lineno < flow.first_loop_line
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == var
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute)
            and stmt.value.func.attr == "flatten"
        ):
            continue
        span = _literal_span(stmt.value, stmt.lineno)
        if span is not None:
            return span
    return None
