"""Block inputs that hold one row per sample, not one per token: a conditioning vector the block
broadcasts over its tokens (`self.mod(c).unsqueeze(1)`, `c[:, None]`) and may hand back beside
them (`return x, c`). A loop that unpacks two values from such a block (`x, c = blk(x, c)`) carries
one token stream, not two: the second value is neither split nor gathered on the token axis."""

from __future__ import annotations

import ast

from ..astutil import int_literal, walk
from .axis_syntax import kept_axes


def per_sample_param(func: ast.FunctionDef, param: str) -> bool:
    """Every read of `param` in `func` is handed back bare in a `return`, or feeds an expression
    that gains its token axis at position 1 (`.unsqueeze(1)`, `[:, None]`) before anything else
    meets it; at least one such broadcast. Anything else (attention keys, a reshape, a read
    through another name) keeps it a stream."""
    parents: dict[int, ast.AST] = {}
    for node in walk(func):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    broadcast = False
    for node in walk(func):
        if not (isinstance(node, ast.Name) and node.id == param and isinstance(node.ctx, ast.Load)):
            continue
        if _handed_back(node, parents):
            continue
        if not _broadcast_over_tokens(node, parents):
            return False
        broadcast = True
    return broadcast


def _handed_back(node: ast.Name, parents: dict[int, ast.AST]) -> bool:
    parent = parents.get(id(node))
    if isinstance(parent, ast.Tuple):
        parent = parents.get(id(parent))
    return isinstance(parent, ast.Return)


def _broadcast_over_tokens(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Up from `node` through calls and attribute reads of one value (`self.mod(c)`,
    `.float()`, `.chunk(...)`): it meets `.unsqueeze(1)` or `[:, None]` first."""
    current = node
    for _ in range(8):
        parent = parents.get(id(current))
        if parent is None:
            return False
        if isinstance(parent, ast.Subscript) and parent.value is current:
            return _new_axis_at_1(parent.slice)
        if isinstance(parent, ast.Attribute) and parent.value is current:
            call = parents.get(id(parent))
            if not (isinstance(call, ast.Call) and call.func is parent):
                return False
            if parent.attr == "unsqueeze":
                return bool(call.args) and int_literal(call.args[0]) == 1
            current = call
            continue
        if isinstance(parent, ast.Call) and current in parent.args and len(parent.args) == 1:
            current = parent  # `self.mod(c)`: a module or function of that one value
            continue
        return False
    return False


def _new_axis_at_1(index: ast.expr) -> bool:
    """`[:, None]` / `[:, None, :]`: the first axis kept, a new one at position 1."""
    kept = kept_axes(index)
    return kept is not None and kept[:1] == [0] and 1 not in kept
