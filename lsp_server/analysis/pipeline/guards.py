"""Three-valued evaluation of branch conditions on the default path of `__call__`.

Parameter defaults are known, except that an optional input defaulting to None is "unset" (`x is
None` on it is unknown: users often pass it); `self._x = ...` assignments and single-`return`
properties are evaluated; anything else is unknown. A guard whose value is known decides which
branch runs; the names it read are cited as evidence (where their default-path values come from).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..astutil import self_attr, short_text, walk
from ..model import Evidence
from .values import GIVEN, UNKNOWN, UNSET, Env, Value, fmt, join_value, truth

if TYPE_CHECKING:
    from .pipeline_class import ClassCtx, Member

_CMP = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_BIN = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}
_PURE_BUILTINS = {"float": float, "int": int, "bool": bool, "abs": abs, "min": min, "max": max}


@dataclass(frozen=True)
class Guard:
    """A branch condition on the path to a call: `status` is its default-path truth."""

    test: ast.expr
    negated: bool
    status: str  # "true", "maybe" or "false"

    def text(self) -> str:
        return f"not ({short_text(self.test)})" if self.negated else short_text(self.test)


_PURE = (
    ast.BoolOp,
    ast.Compare,
    ast.UnaryOp,
    ast.BinOp,
    ast.IfExp,
    ast.Name,
    ast.Attribute,
    ast.Constant,
    ast.expr_context,
    ast.boolop,
    ast.cmpop,
    ast.unaryop,
    ast.operator,
)


def _is_pure(node: ast.AST) -> bool:
    """An expression made of names, constants and operators only (its value follows from them)."""
    return all(isinstance(n, _PURE) for n in walk(node))


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


class GuardEvaluator:
    """Evaluates expressions of a pipeline class's methods to three-valued values."""

    def __init__(self, ctx: ClassCtx) -> None:
        self.ctx = ctx
        self._prop_depth = 0

    def _eval(self, node: ast.AST, env: Env) -> Value:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env.vars.get(node.id, UNKNOWN)
        if isinstance(node, ast.Attribute):
            attr = self_attr(node)
            if attr is None:
                return UNKNOWN
            if attr in env.selfv:
                return env.selfv[attr]
            prop = self.ctx.properties.get(attr)
            return self._eval_property(prop, env) if prop else UNKNOWN
        if isinstance(node, ast.UnaryOp):
            v = self._eval(node.operand, env)
            if isinstance(node.op, ast.Not):
                t = truth(v)
                return UNKNOWN if t is None else not t
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if isinstance(node.op, ast.USub):
                    return -v
                if isinstance(node.op, ast.UAdd):
                    return v
            return UNKNOWN
        if isinstance(node, ast.BoolOp):
            return self._eval_boolop(node, env)
        if isinstance(node, ast.Compare):
            return self._eval_compare(node, env)
        if isinstance(node, ast.BinOp):
            fn = _BIN.get(type(node.op))
            a, b = self._eval(node.left, env), self._eval(node.right, env)
            if fn is None or not all(isinstance(x, (int, float)) for x in (a, b)):
                return UNKNOWN
            try:
                return fn(a, b)
            except Exception:
                return UNKNOWN
        if isinstance(node, ast.IfExp):
            t = truth(self._eval(node.test, env))
            if t is True:
                return self._eval(node.body, env)
            if t is False:
                return self._eval(node.orelse, env)
            return join_value(self._eval(node.body, env), self._eval(node.orelse, env))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            fn = _PURE_BUILTINS.get(node.func.id)
            args = [self._eval(x, env) for x in node.args]
            if fn is None or not args or any(x is UNKNOWN or x is UNSET for x in args):
                return UNKNOWN
            try:
                return fn(*args)
            except Exception:
                return UNKNOWN
        return UNKNOWN

    def _eval_property(self, prop: Member, env: Env) -> Value:
        body = [s for s in prop.fn.body if not _is_docstring(s)]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
            return UNKNOWN
        if self._prop_depth > 4:
            return UNKNOWN
        self._prop_depth += 1
        try:
            return self._eval(body[0].value, Env(selfv=env.selfv))
        finally:
            self._prop_depth -= 1

    def _eval_boolop(self, node: ast.BoolOp, env: Env) -> Value:
        is_and = isinstance(node.op, ast.And)
        unknown = False
        last: Value = UNKNOWN
        for operand in node.values:
            v = self._eval(operand, env)
            t = truth(v)
            if t is None:
                unknown = True
                continue
            if t is not is_and:  # short-circuits: falsy under `and`, truthy under `or`
                return t if unknown else v
            last = v
        return UNKNOWN if unknown else last

    def _eval_compare(self, node: ast.Compare, env: Env) -> Value:
        left = self._eval(node.left, env)
        result: Value = True
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self._eval(right_node, env)
            fn = _CMP.get(type(op))
            given = any(x is GIVEN for x in (left, right))
            if given and isinstance(op, (ast.Is, ast.IsNot)) and None in (left, right):
                value: Value = isinstance(op, ast.IsNot)  # a given input is not None
            elif fn is None or given or any(x is UNKNOWN or x is UNSET for x in (left, right)):
                value = UNKNOWN
            else:
                try:
                    value = bool(fn(left, right))
                except Exception:
                    value = UNKNOWN
            if value is False:
                return False
            if value is UNKNOWN:
                result = UNKNOWN
            left = right
        return result

    def _refs(self, node: ast.AST, env: Env) -> frozenset[str]:
        """Self attributes an expression may evaluate to: `self.transformer`, its aliases."""
        attr = self_attr(node)
        if attr is not None:
            return frozenset({attr}) if attr not in self.ctx.methods else frozenset()
        if isinstance(node, ast.Name):
            return env.aliases.get(node.id, frozenset())
        if isinstance(node, ast.IfExp):
            t = truth(self._eval(node.test, env))
            if t is True:
                return self._refs(node.body, env)
            if t is False:
                return self._refs(node.orelse, env)
            return self._refs(node.body, env) | self._refs(node.orelse, env)
        if isinstance(node, ast.BoolOp):
            out: frozenset[str] = frozenset()
            for v in node.values:
                out |= self._refs(v, env)
            return out
        return frozenset()

    def _explain_guard(self, test: ast.expr, env: Env, notes: list[Evidence]) -> None:
        """Evidence (into `notes`) for where the names a decisive guard reads got their values."""
        seen = {(e.path, e.line) for e in notes}

        def add(msg: str, where: tuple[str, int] | None) -> bool:
            if where is None or where in seen or len(notes) >= 12:
                return False
            seen.add(where)
            notes.append(Evidence(msg, where[0], where[1]))
            return True

        def explain(expr: ast.AST, local: Env | None, depth: int) -> None:
            for node in walk(expr):
                if isinstance(node, ast.Name) and local is not None and node.id in local.origin:
                    explain_name(node.id, local, depth)
                    continue
                attr = self_attr(node)
                if attr is None:
                    continue
                if attr in env.selfv and ("self." + attr) in env.origin:
                    add(
                        f"`self.{attr}` is {fmt(env.selfv[attr])} {self.ctx.path_words}",
                        env.origin["self." + attr],
                    )
                prop = self.ctx.properties.get(attr)
                if prop is None or depth >= 2:
                    continue
                body = [st for st in prop.fn.body if not _is_docstring(st)]
                shown = short_text(body[0]) if body else "..."
                add(
                    f"property `{attr}`: `{shown}` -> {fmt(self._eval(node, env))}",
                    (str(prop.mod.path), prop.fn.lineno),
                )
                if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
                    explain(body[0].value, None, depth + 1)

        def explain_name(name: str, local: Env, depth: int) -> None:
            value = local.vars.get(name, UNKNOWN)
            defs = local.defs.get(name, ())
            where = local.origin[name]
            if not defs:
                told = self.ctx.call_args
                if told is not None and name in told:
                    add(f"parameter `{name}` is {fmt(value)} in the call arguments given", where)
                else:
                    add(f"parameter `{name}` defaults to {fmt(value)}", where)
                return
            if len(defs) > 1:
                add(f"`{name}` is {fmt(value)} {self.ctx.path_words} (set in branches)", where)
                return
            d = defs[0].value
            if isinstance(d, (ast.For, ast.AsyncFor, ast.AugAssign)):
                return  # a loop variable or an accumulator: unknown, nothing to show
            pure = _is_pure(d)
            if depth > 0 and value is UNKNOWN and not pure:
                return
            fresh = add(f"`{name} = {short_text(d)}` -> {fmt(value)} {self.ctx.path_words}", where)
            if fresh and pure and depth < 2:
                explain(d, local, depth + 1)

        explain(test, env, 0)
