"""Constant arguments of a call and the `if` branches they decide (`use_real=False`,
`sequence_dim == 1`), for readers that follow a call into a function.
"""

from __future__ import annotations

import ast

UNKNOWN = object()


def constant(expr: ast.expr) -> object:
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = constant(expr.operand)
        return -inner if isinstance(inner, int | float) else UNKNOWN
    return UNKNOWN


def defaults(func: ast.FunctionDef) -> dict[str, object]:
    positional = func.args.posonlyargs + func.args.args
    out: dict[str, object] = {}
    for arg, default in zip(
        positional[len(positional) - len(func.args.defaults) :], func.args.defaults, strict=True
    ):
        value = constant(default)
        if value is not UNKNOWN:
            out[arg.arg] = value
    for arg, default in zip(func.args.kwonlyargs, func.args.kw_defaults, strict=True):
        if default is not None:
            value = constant(default)
            if value is not UNKNOWN:
                out[arg.arg] = value
    return out


def truth(test: ast.expr, constants: dict[str, object]) -> bool | None:
    """The value of an `if` test over constant arguments; None when not known."""
    if isinstance(test, ast.Name):
        value = constants.get(test.id, UNKNOWN)
        return None if value is UNKNOWN else bool(value)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = truth(test.operand, constants)
        return None if inner is None else not inner
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq | ast.NotEq | ast.Is | ast.IsNot)
    ):
        left = _value(test.left, constants)
        right = _value(test.comparators[0], constants)
        if left is UNKNOWN or right is UNKNOWN:
            return None
        same = left == right
        return same if isinstance(test.ops[0], ast.Eq | ast.Is) else not same
    return None


def _value(expr: ast.expr, constants: dict[str, object]) -> object:
    if isinstance(expr, ast.Name):
        return constants.get(expr.id, UNKNOWN)
    return constant(expr)
