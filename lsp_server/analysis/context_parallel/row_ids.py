"""Per-token row ids: a parameter of a module's `forward` that picks one row of a table per token
(`scale.index_select(0, adaln_indices)`, `table[ids]`), where the picked rows meet the module's
token stream in element-wise math without a new axis (`norm(x) * (1 + picked)`): they line up
with the tokens, so the ids hold one entry per token. Packed multi-modal models select AdaLN
rows per token so (one row per modality and noise level). Under context parallelism the ids
must be split with the tokens; a module taking them after the gather needs them whole."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..astutil import declared_params, walk, walk_local
from .flow import data_names

_SAME_ROWS = ("to", "float", "half", "bfloat16", "type_as", "contiguous")


@dataclass(frozen=True)
class RowIds:
    param: str
    line: int
    by_index_select: bool  # 1-D ids for sure (`index_select(0, ids)`); `t[ids]` could be (B, S)
    text: str


def row_id_params(func: ast.FunctionDef) -> dict[str, RowIds]:
    """param -> how it picks per-token rows, for the parameters of `func` (the first one, the
    token stream, excluded)."""
    params = declared_params(func)
    if not params:
        return {}
    stream = params[0]
    candidates = set(params[1:]) | {a.arg for a in func.args.kwonlyargs}
    statements = sorted(
        (n for n in walk_local(func) if isinstance(n, ast.stmt) and n is not func),
        key=lambda n: n.lineno,
    )
    derived = {stream}
    picked: dict[str, tuple[str, bool]] = {}  # local -> (ids param, by index_select)
    for stmt in statements:
        if isinstance(stmt, ast.Assign):
            names = {n.id for t in stmt.targets for n in walk(t) if isinstance(n, ast.Name)}
            if data_names(stmt.value) & derived:
                derived |= names
            pick = _unwrapped_pick(stmt.value, candidates, picked)
            if pick is not None and len(stmt.targets) == 1:
                target = stmt.targets[0]
                if isinstance(target, ast.Name):
                    picked[target.id] = pick
    out: dict[str, RowIds] = {}
    for node in walk_local(func):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult)):
            continue
        for side, other in ((node.left, node.right), (node.right, node.left)):
            pick = _unwrapped_pick(side, candidates, picked)
            if pick is None or not data_names(other) & derived:
                continue
            param, by_index_select = pick
            if param not in out or node.lineno < out[param].line:
                out[param] = RowIds(param, node.lineno, by_index_select, ast.unparse(node)[:90])
    return out


def _unwrapped_pick(
    expr: ast.expr, candidates: set[str], picked: dict[str, tuple[str, bool]]
) -> tuple[str, bool] | None:
    """The ids parameter whose picked rows `expr` is, through element-wise math with numbers and
    dtype casts but no new axis."""
    if isinstance(expr, ast.Name):
        return picked.get(expr.id)
    if isinstance(expr, ast.BinOp):
        for side, other in ((expr.left, expr.right), (expr.right, expr.left)):
            if isinstance(other, ast.Constant):
                return _unwrapped_pick(side, candidates, picked)
        return None
    if isinstance(expr, ast.UnaryOp):
        return _unwrapped_pick(expr.operand, candidates, picked)
    if isinstance(expr, ast.Subscript):
        ids = expr.slice
        if isinstance(ids, ast.Name) and ids.id in candidates:
            return ids.id, False
        return None
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)):
        return None
    name = expr.func.attr
    if name == "index_select" and len(expr.args) == 2:
        dim, ids = expr.args
        if (
            isinstance(dim, ast.Constant)
            and dim.value == 0
            and isinstance(ids, ast.Name)
            and ids.id in candidates
        ):
            return ids.id, True
        return None
    if name in _SAME_ROWS:
        return _unwrapped_pick(expr.func.value, candidates, picked)
    return None
