"""The rank of the tensors a position module returns, read from their outermost reshape."""

from __future__ import annotations

import ast

from ..astutil import (
    self_attr,
    walk_local,
)

_RESHAPES = ("view", "reshape", "expand", "repeat")


def return_ranks(func: ast.FunctionDef, owner: ast.ClassDef | None) -> list[int | None]:
    """The rank of each value the function returns (None where no reshape gives it)."""
    shape = _Shapes(func, owner, 0)
    for node in walk_local(func):
        if isinstance(node, ast.Return) and node.value is not None:
            elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            return [shape.ndim(e, 0) for e in elts]
    return []


def _return_shape(
    func: ast.FunctionDef, owner: ast.ClassDef | None = None, depth: int = 0
) -> tuple[int | None, int]:
    """(dims of the first returned tensor, number of returned values) of a position module."""
    shape = _Shapes(func, owner, depth)
    for node in walk_local(func):
        if isinstance(node, ast.Return) and node.value is not None:
            elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            return shape.ndim(elts[0], 0), len(elts)
    return None, 0


class _Shapes:
    """Follows a returned value back to its outermost reshape: through local assignments, lists
    filled with `append` and concatenated, and helper methods of the same class."""

    def __init__(self, func: ast.FunctionDef, owner: ast.ClassDef | None, depth: int) -> None:
        self.owner = owner
        self.depth = depth
        self.assigns: dict[str, ast.expr] = {}
        self.appended: dict[str, ast.expr] = {}
        nodes = sorted(
            (n for n in walk_local(func) if isinstance(n, ast.Assign | ast.Expr)),
            key=lambda n: n.lineno,
        )
        for node in nodes:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.assigns[target.id] = node.value
            elif (
                isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "append"
                and isinstance(node.value.func.value, ast.Name)
                and node.value.args
            ):
                self.appended.setdefault(node.value.func.value.id, node.value.args[0])

    def ndim(self, expr: ast.expr, depth: int) -> int | None:
        if depth > 10:
            return None
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            attr = expr.func.attr
            if attr in _RESHAPES and expr.args and attr != "repeat":
                if len(expr.args) == 1 and isinstance(expr.args[0], ast.Tuple):
                    return len(expr.args[0].elts)
                if not any(isinstance(a, ast.Starred) for a in expr.args):
                    return len(expr.args)
                return None
            if attr == "unsqueeze":
                inner = self.ndim(expr.func.value, depth + 1)
                return inner + 1 if inner is not None else None
            if attr in ("flatten", "squeeze", "stack"):
                return None
            if attr in ("cat", "concat") and expr.args:
                first = expr.args[0]
                if isinstance(first, ast.List | ast.Tuple) and first.elts:
                    return self.ndim(first.elts[0], depth + 1)
                if isinstance(first, ast.Name) and first.id in self.appended:
                    return self.ndim(self.appended[first.id], depth + 1)
                return None
            method = self_attr(expr.func)
            if method and self.owner is not None and self.depth < 2:
                helper = next(
                    (
                        f
                        for f in self.owner.body
                        if isinstance(f, ast.FunctionDef) and f.name == method
                    ),
                    None,
                )
                if helper is not None:
                    return _return_shape(helper, self.owner, self.depth + 1)[0]
            return self.ndim(expr.func.value, depth + 1)  # .float(), .to(...), .contiguous()
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            value = self.assigns[expr.id]
            if value is not expr:
                return self.ndim(value, depth + 1)
        return None
