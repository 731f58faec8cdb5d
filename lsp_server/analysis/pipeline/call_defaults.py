"""Default values of a pipeline's `__call__` parameters as JSON values, read statically:
literals, module / class constants (also through relative imports), unary minus, + - * / // % on
numbers, tuples, lists and dicts (`ConstantEvaluator`); `NO_VALUE` when a default is none of
those."""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from ..sources import module_path
from .pipeline_class import Loader, Module

# A default that does not evaluate to a JSON value (distinct from a default of None).
NO_VALUE = object()

_BINOPS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


class ConstantEvaluator:
    """Evaluates a default expression to a JSON value: literals, module / class constants (also
    through relative imports), unary minus, + - * / // % on numbers, tuples, lists, dicts."""

    def __init__(self, loader: Loader, mod: Module, owner: ast.ClassDef | None) -> None:
        self.loader = loader
        self.mod = mod
        self.owner = owner

    def evaluate(self, node: ast.expr) -> Any:
        try:
            value = self._eval(node, self.mod, self.owner, 0)
        except (ArithmeticError, TypeError, ValueError, RecursionError):
            return NO_VALUE
        return value if value is NO_VALUE or _is_json(value) else NO_VALUE

    def _eval(self, node: ast.expr, mod: Module, owner: ast.ClassDef | None, depth: int) -> Any:
        if depth > 6:
            return NO_VALUE
        if isinstance(node, ast.Constant):
            return node.value if not isinstance(node.value, bytes | complex) else NO_VALUE
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            v = self._eval(node.operand, mod, owner, depth + 1)
            if isinstance(v, int | float) and not isinstance(v, bool):
                return -v if isinstance(node.op, ast.USub) else v
            return NO_VALUE
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left = self._eval(node.left, mod, owner, depth + 1)
            right = self._eval(node.right, mod, owner, depth + 1)
            numbers = all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right)
            )
            if not numbers:
                return NO_VALUE
            return _BINOPS[type(node.op)](left, right)
        if isinstance(node, ast.Tuple | ast.List):
            items = [self._eval(e, mod, owner, depth + 1) for e in node.elts]
            return NO_VALUE if any(v is NO_VALUE for v in items) else items
        if isinstance(node, ast.Dict):
            out: dict[str, Any] = {}
            for k, v in zip(node.keys, node.values, strict=True):
                if k is None:
                    return NO_VALUE
                key = self._eval(k, mod, owner, depth + 1)
                value = self._eval(v, mod, owner, depth + 1)
                if not isinstance(key, str) or value is NO_VALUE:
                    return NO_VALUE
                out[key] = value
            return out
        if isinstance(node, ast.Name):
            return self._name(node.id, mod, owner, depth)
        return NO_VALUE

    def _name(self, name: str, mod: Module, owner: ast.ClassDef | None, depth: int) -> Any:
        if owner is not None:  # class-body names are visible to the defaults of its methods
            for stmt in owner.body:
                value = _assigned(stmt, name)
                if value is not None:
                    return self._eval(value, mod, None, depth + 1)
        stmt = mod.source.top_level.get(name)
        if stmt is not None:
            value = _assigned(stmt, name)
            return self._eval(value, mod, None, depth + 1) if value is not None else NO_VALUE
        imp = mod.source.imports.get(name)
        if imp is not None and imp[1] and imp[2]:
            target = module_path(imp[0], imp[1], mod.path)
            other = self.loader.load(target) if target is not None else None
            if other is not None:
                return self._name(imp[2], other, None, depth + 1)
        return NO_VALUE


def _assigned(stmt: ast.stmt, name: str) -> ast.expr | None:
    if isinstance(stmt, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == name for t in stmt.targets
    ):
        return stmt.value
    if (
        isinstance(stmt, ast.AnnAssign)
        and isinstance(stmt.target, ast.Name)
        and stmt.target.id == name
    ):
        return stmt.value
    return None


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False
