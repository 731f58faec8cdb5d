"""Conditions under which a pipeline's `__call__` (or a `check_inputs`-style method it calls with
its parameters) raises: `if <condition>: raise ...` on the call's parameters, with the parameter
values that skip a check when its condition is just a boolean parameter (`avoid`)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from ..astutil import short_text, walk_local
from .pipeline_class import ClassCtx, Func, Module

MAX_CHECKS = 24


@dataclass(frozen=True)
class CallCheck:
    """`if <condition>: raise ...` on the call's parameters (in `__call__` or a checker)."""

    params: tuple[str, ...]
    condition: str
    message: str | None
    path: str
    line: int
    method: str
    avoid: dict[str, Any] | None = None  # parameter values that skip the check

    def to_json(self) -> dict[str, Any]:
        return {
            "params": list(self.params),
            "condition": self.condition,
            "message": self.message,
            "method": self.method,
            "avoid": self.avoid,
            "path": self.path,
            "line": self.line,
        }


def find_checks(
    ctx: ClassCtx, mod: Module, fn: Func, names: set[str], switches: set[str]
) -> list[CallCheck]:
    """The checks of `__call__` (`fn`) on its parameters `names`, and of the checker methods it
    calls with them; `switches` are its boolean parameters (a check one of them skips: `avoid`)."""
    out: list[CallCheck] = []
    _scan(fn, {n: n for n in names}, switches, str(mod.path), "__call__", out)
    # `self.check_inputs(prompt, height, ...)`-style checkers, arguments bound to their parameters
    for node in walk_local(fn):
        if len(out) >= MAX_CHECKS:
            break
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
        ):
            continue
        method = node.func.attr
        if not method.startswith(("check", "validate", "_check", "_validate")):
            continue
        member = ctx.methods.get(method)
        if member is None:
            continue
        binding = _bind(member.fn, node, names)
        if binding:
            _scan(member.fn, binding, switches, str(member.mod.path), method, out)
    return out[:MAX_CHECKS]


def _bind(fn: Func, call: ast.Call, names: set[str]) -> dict[str, str]:
    """Checker parameter -> call parameter, for arguments that are a call parameter unchanged."""
    a = fn.args
    positional = [p.arg for p in [*a.posonlyargs, *a.args]][1:]  # without self
    out: dict[str, str] = {}
    for param, arg in zip(positional, call.args, strict=False):
        if isinstance(arg, ast.Name) and arg.id in names:
            out[param] = arg.id
    accepted = set(positional) | {p.arg for p in a.kwonlyargs}
    for kw in call.keywords:
        value = kw.value
        if kw.arg and kw.arg in accepted and isinstance(value, ast.Name) and value.id in names:
            out[kw.arg] = value.id
    return out


def _scan(
    fn: Func,
    binding: dict[str, str],
    switches: set[str],
    path: str,
    method: str,
    out: list[CallCheck],
) -> None:
    """`if` statements of `fn` whose condition reads a bound parameter and whose body raises."""
    for node in walk_local(fn):
        if len(out) >= MAX_CHECKS:
            return
        if not isinstance(node, ast.If):
            continue
        read = [n.id for n in walk_local(node.test) if isinstance(n, ast.Name)]
        params = tuple(dict.fromkeys(binding[n] for n in read if n in binding))
        if not params:
            continue
        raised = _first_raise(node.body)
        if raised is None:
            continue
        avoid: dict[str, Any] | None = None
        test = node.test
        if isinstance(test, ast.Name) and binding.get(test.id) in switches:
            avoid = {binding[test.id]: False}
        elif (
            isinstance(test, ast.UnaryOp)
            and isinstance(test.op, ast.Not)
            and isinstance(test.operand, ast.Name)
            and binding.get(test.operand.id) in switches
        ):
            avoid = {binding[test.operand.id]: True}
        if any(c.line == node.lineno and c.path == path for c in out):
            continue
        out.append(
            CallCheck(
                params=params,
                condition=short_text(test, 120),
                message=_raise_message(raised),
                path=path,
                line=node.lineno,
                method=method,
                avoid=avoid,
            )
        )


def _first_raise(body: list[ast.stmt]) -> ast.Raise | None:
    for stmt in body:
        for node in walk_local(stmt):
            if isinstance(node, ast.Raise):
                return node
    return None


def _raise_message(node: ast.Raise) -> str | None:
    exc = node.exc
    if not isinstance(exc, ast.Call) or not exc.args:
        return short_text(exc, 120) if exc is not None else None
    first = exc.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        text = first.value
    elif isinstance(first, ast.JoinedStr):
        parts = []
        for v in first.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                parts.append(v.value)
            elif isinstance(v, ast.FormattedValue):
                parts.append("{" + short_text(v.value, 40) + "}")
        text = "".join(parts)
    else:
        text = short_text(first, 120)
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:197] + "..."
