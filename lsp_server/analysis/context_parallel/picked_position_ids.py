"""Forward inputs that pick the rows of a position table for the tokens: `cos.index_select(0,
position_ids)`, where `cos` comes from a call that builds positions (`make_angles(self.max_len,
d)`: `called_positions`) and the picked rows reach the blocks or the stream. `index_select`
takes a 1-D index, one id per picked row: one per token. The table is built at a length no
rank's tokens decide, so under a root split the ids are split with the tokens and every rank
picks its own tokens' rows."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..astutil import callee_name, short_text, walk
from ..parallel_input import ParallelContext
from .block_binding import names_passed_to_blocks
from .called_positions import position_calls
from .flow import ForwardFlow, before_the_blocks, data_names
from .forward_statements import assigned_names
from .root_split_drift import reached_before_the_blocks

_SAME_IDS = ("long", "int", "to", "clone", "contiguous")


@dataclass(frozen=True)
class PickedIds:
    param: str
    pick: str  # the `index_select` that picks the rows
    function: str  # the function that builds the table
    line: int


def picked_position_ids(ctx: ParallelContext, flow: ForwardFlow) -> list[PickedIds]:
    """The forward parameters that pick rows of a position table reaching the blocks or the
    stream, each once, in source order."""
    calls = position_calls(ctx, flow)
    tables = {t: c.function for c in calls for t in reached_before_the_blocks(flow, set(c.targets))}
    streams = {v for v, srcs in flow.derived.items() if flow.hidden in srcs} | {flow.hidden}
    receivers = names_passed_to_blocks(list(ctx.cached_lists)) | streams
    out: dict[str, PickedIds] = {}
    for stmt in before_the_blocks(flow):
        if not isinstance(stmt, ast.Assign):
            continue
        reached = reached_before_the_blocks(flow, set(assigned_names(stmt)))
        for node in walk(stmt.value):
            pick = _rows_picked(node)
            if pick is None:
                continue
            table, index = pick
            param = _param_of(index, flow)
            built = sorted(data_names(table) & set(tables))
            if param and built and param not in out and reached & receivers:
                out[param] = PickedIds(param, short_text(node), tables[built[0]], stmt.lineno)
    return list(out.values())


def _rows_picked(node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    """(table, index) of `t.index_select(0, i)` or `torch.index_select(t, 0, i)`."""
    if not (isinstance(node, ast.Call) and callee_name(node) == "index_select"):
        return None
    func = node.func
    args = list(node.args)
    if isinstance(func, ast.Attribute) and not (
        isinstance(func.value, ast.Name) and func.value.id == "torch"
    ):
        args = [func.value, *args]
    keywords = {k.arg: k.value for k in node.keywords if k.arg}
    table = args[0] if args else keywords.get("input")
    dim = args[1] if len(args) > 1 else keywords.get("dim")
    index = args[2] if len(args) > 2 else keywords.get("index")
    rows = isinstance(dim, ast.Constant) and dim.value == 0
    return (table, index) if rows and table is not None and index is not None else None


def _param_of(index: ast.expr, flow: ForwardFlow) -> str | None:
    """The forward parameter `index` is, as it is or converted (`ids.long()`, `ids.to(dev)`)."""
    while (
        isinstance(index, ast.Call)
        and isinstance(index.func, ast.Attribute)
        and index.func.attr in _SAME_IDS
    ):
        index = index.func.value
    if isinstance(index, ast.Name) and index.id in flow.params and index.id != flow.hidden:
        return index.id
    return None
