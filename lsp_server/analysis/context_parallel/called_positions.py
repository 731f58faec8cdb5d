"""Position tables forward gets from a call handed a length it read on the stream: a function of
the file, one it imports, or a method of the model (`cos, sin = make_angles(x.shape[1], d)`,
`self._angles(n)` with `n = x.size(1)`, `get_1d_rotary_pos_embed(d, x.shape[1])`).

The call is followed into the function it runs (`called_functions.callee`, with the argument
bound to its parameter): the function builds positions from that length when a value it returns
depends on it through positions counted up to it (`arange`, `linspace`, `range`) or a cut to it
(`t[:n]`, `t.narrow(0, 0, n)`), through its locals, loops and the functions it calls in turn. A
length only checked or used as a size that is not a position (`zeros(n, d)`) does not make one,
nor do positions compared into a mask (`distance <= w`: the mask readers' work).
Under a root split that length is this rank's, and every rank would count its tokens from 0."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from ..astutil import callee_name, names_read, short_text, walk
from ..parallel_input import ParallelContext
from .called_functions import Caller, bound_arguments, callee, calls_in, module_caller, statements
from .flow import ForwardFlow, before_the_blocks, data_names, length_sources
from .forward_statements import assigned_names

_COUNTS = ("arange", "linspace", "logspace", "range")
_SCALAR_CALLS = ("int", "float", "round", "max", "min", "abs", "ceil", "floor", "sqrt")
_FILLS = ("append", "extend", "insert")
_MAX_DEPTH = 3


@dataclass(frozen=True)
class PositionCall:
    """`targets = ...call(...)...` before the blocks, where the function the call runs builds
    positions from the arguments it is handed in `built` (with how it builds them)."""

    targets: tuple[str, ...]
    call: str  # the call's text
    function: str
    built: tuple[tuple[ast.expr, str], ...]
    line: int


@dataclass(frozen=True)
class LengthTable:
    """A position call handed the length of `stream`."""

    targets: tuple[str, ...]
    call: str
    stream: str
    how: str
    line: int


def length_tables(ctx: ParallelContext, flow: ForwardFlow, streams: set[str]) -> list[LengthTable]:
    """The calls before the blocks handed a length read on one of `streams` that build
    positions from it, in source order."""
    out: list[LengthTable] = []
    for found in position_calls(ctx, flow):
        for arg, how in found.built:
            stream = _stream_length(flow, arg, streams)
            if stream is not None:
                out.append(LengthTable(found.targets, found.call, stream, how, found.line))
                break
    return out


def position_calls(ctx: ParallelContext, flow: ForwardFlow) -> list[PositionCall]:
    """The calls forward makes before the blocks to a function (of the file, imported) or a
    method of the model that builds positions from an argument (the first such call of each
    statement); read once per context."""
    cached = ctx.__dict__.get("_position_calls")
    if isinstance(cached, tuple) and cached[0] is flow:
        return cached[1]
    out: list[PositionCall] = []
    memo: _Memo = {}
    caller = module_caller(ctx, ctx.transformer, ctx.forward) if ctx.forward else None
    for stmt in before_the_blocks(flow) if caller is not None else ():
        if not isinstance(stmt, ast.Assign):
            continue
        for call in calls_in(stmt.value):
            found = callee(ctx, caller, call) if caller is not None else None
            if found is None:
                continue
            built = tuple(
                (arg, how)
                for param, arg in bound_arguments(call, found.func)
                if (how := _positions_from(ctx, found, param, 0, memo))
            )
            if built:
                targets = tuple(assigned_names(stmt))
                text = short_text(call)
                out.append(PositionCall(targets, text, found.func.name, built, stmt.lineno))
                break
    ctx.__dict__["_position_calls"] = (flow, out)
    return out


def _stream_length(flow: ForwardFlow, arg: ast.expr, streams: set[str]) -> str | None:
    """The stream whose length `arg` reads (`x.shape[1]`, `x.size(1)`, a local measured so);
    None for a batch size (`x.shape[0]`) or anything else."""
    if _reads_batch(arg):
        return None
    found = sorted(length_sources(flow, arg) & streams)
    return found[0] if found else None


def _reads_batch(arg: ast.expr) -> bool:
    index: ast.expr | None = None
    if isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Attribute):
        index = arg.slice if arg.value.attr == "shape" else None
    elif isinstance(arg, ast.Call) and callee_name(arg) == "size" and arg.args:
        index = arg.args[0]
    return isinstance(index, ast.Constant) and index.value == 0


# (function node id, parameter) -> how it builds positions from it; one per `position_calls`
# run (the trees it reads stay alive meanwhile)
_Memo = dict[tuple[int, str], "str | None"]


def _positions_from(
    ctx: ParallelContext, caller: Caller, param: str, depth: int, memo: _Memo
) -> str | None:
    """How a value `caller` returns depends on its `param` (a length) through positions; None
    when none does. Each function and parameter is read once (`memo`)."""
    key = (id(caller.func), param)
    if key not in memo:
        memo[key] = None  # while it is read: a recursive call shows nothing
        memo[key] = _read_positions_from(ctx, caller, param, depth, memo)
    return memo[key]


def _read_positions_from(
    ctx: ParallelContext, caller: Caller, param: str, depth: int, memo: _Memo
) -> str | None:
    # each binding with every name its value reads: a value reading neither a length nor a
    # name already made from one cannot hold positions built from the length
    flows = [(targets, value, names_read(value)) for targets, value in _flows(caller.func)]
    lengths = {param}
    grown = True
    while grown:  # lengths combined arithmetically stay lengths (`n - 1`, `max(n, 1)`)
        grown = False
        for targets, value, names in flows:
            if targets <= lengths or not names & lengths:
                continue
            if data_names(value) & lengths and _scalar(value):
                lengths |= targets
                grown = True
    made: dict[str, str] = {}
    grown = True
    while grown:
        grown = False
        for targets, value, names in flows:
            if targets <= set(made) or not names & (lengths | set(made)):
                continue
            how = _made(ctx, caller, value, lengths, made, depth, memo)
            for name in targets - set(made):
                if how:
                    made[name] = how
                    grown = True
    for stmt in statements(caller.func):
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            how = _made(ctx, caller, stmt.value, lengths, made, depth, memo)
            if how:
                return how
    return None


def _flows(func: ast.FunctionDef) -> Iterator[tuple[set[str], ast.expr]]:
    """(names bound, the value they get) for each binding in `func`: assignments, loop targets
    (from their iterable), and lists filled in place (`parts.append(v)`)."""
    for stmt in statements(func):
        if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign) and stmt.value:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = {n.id for t in targets for n in walk(t) if isinstance(n, ast.Name)}
            yield names, stmt.value
        elif isinstance(stmt, ast.For):
            yield {n.id for n in walk(stmt.target) if isinstance(n, ast.Name)}, stmt.iter
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            func_ = call.func
            if (
                isinstance(func_, ast.Attribute)
                and func_.attr in _FILLS
                and isinstance(func_.value, ast.Name)
            ):
                for arg in call.args:
                    yield {func_.value.id}, arg


def _scalar(value: ast.expr) -> bool:
    """Arithmetic on numbers: no call but `int(...)`, `max(...)`, `math.ceil(...)`."""
    return all(not isinstance(n, ast.Call) or callee_name(n) in _SCALAR_CALLS for n in walk(value))


def _made(
    ctx: ParallelContext,
    caller: Caller,
    value: ast.expr,
    lengths: set[str],
    made: dict[str, str],
    depth: int,
    memo: _Memo,
) -> str | None:
    """How `value` holds positions built from a length: a count or a cut in it, a local already
    made so, or a function it calls that builds positions from the length it is handed. Positions
    compared (`distance <= w`, `i < n`) make a mask, not a table: left to the mask readers."""
    name = caller.func.name
    if any(isinstance(n, ast.Compare) for n in walk(value)):
        return None
    read = sorted(data_names(value) & set(made))  # not `pos.device`: metadata
    if read:
        return made[read[0]]
    for node in walk(value):
        if isinstance(node, ast.Call) and callee_name(node) in _COUNTS and _reads(node, lengths):
            return f"`{name}` counts positions up to its length (`{short_text(node)}`)"
        if isinstance(node, ast.Call) and callee_name(node) == "narrow" and _reads(node, lengths):
            return f"`{name}` cuts a table to its length (`{short_text(node)}`)"
        if isinstance(node, ast.Subscript) and _cut(node, lengths):
            return f"`{name}` cuts a table to its length (`{short_text(node)}`)"
        if isinstance(node, ast.Call) and depth < _MAX_DEPTH and _reads(node, lengths):
            inner = callee(ctx, caller, node)
            if inner is None:
                continue
            for param, arg in bound_arguments(node, inner.func):
                if data_names(arg) & lengths:
                    how = _positions_from(ctx, inner, param, depth + 1, memo)
                    if how:
                        return f"{how}, called by `{name}`"
    return None


def _reads(call: ast.Call, lengths: set[str]) -> bool:
    args = [*call.args, *(k.value for k in call.keywords)]
    return any(data_names(a) & lengths for a in args)


def _cut(node: ast.Subscript, lengths: set[str]) -> bool:
    """`t[:n]`, `t[:, :n]`, `t[n0:n]`: a slice whose bound reads a length."""
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return any(
        isinstance(p, ast.Slice)
        and any(b is not None and data_names(b) & lengths for b in (p.lower, p.upper))
        for p in parts
    )
