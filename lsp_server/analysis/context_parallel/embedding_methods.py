"""Forward's input handed to one of the transformer's own methods before the blocks
(`x, c = self.embed(latents, timestep)`): a root split cuts what the method receives, so the
method must keep every token to itself. Its body is read (with the methods and functions it calls,
a few levels down): an op needing the whole sequence on what it received (a patchify reshape, a
plain function such as `patchify(x)`, a module that is not token-local) blocks the root split."""

from __future__ import annotations

import ast

from ..astutil import last_part, self_attr, walk_local
from ..model import Evidence
from ..parallel_input import ParallelContext
from .called_functions import Caller, bound_arguments, callee, module_caller
from .flow import ForwardFlow, data_names, is_sequence_global

_TOKEN_LOCAL = ("Linear", "LayerNorm", "RMSNorm", "GroupNorm", "Identity", "Dropout")
_DEPTH = 3


def method_embedding(
    ctx: ParallelContext, flow: ForwardFlow, stmt: ast.stmt, used: set[str]
) -> Evidence | None:
    """Why a call of the transformer's own method in `stmt`, taking the tracked input `used`,
    would be cut wrong by a root split; None when every such method keeps tokens apart."""
    if ctx.forward is None:
        return None
    caller = module_caller(ctx, ctx.transformer, ctx.forward)
    if caller is None:
        return None
    for call in _method_calls(stmt, used, flow):
        attr = self_attr(call.func) or "?"
        found = callee(ctx, caller, call)
        if found is None:
            continue  # not a method of the class (a module built outside `__init__`)
        why = _sequence_work(ctx, flow, found, call, used, _DEPTH)
        if why:
            return Evidence(
                f"`self.{attr}(...)` receives forward's `{sorted(used)[0]}` before the blocks and "
                f"{why}: a root split would cut its input, not the token sequence",
                ctx.path,
                stmt.lineno,
            )
    return None


def _method_calls(stmt: ast.stmt, used: set[str], flow: ForwardFlow) -> list[ast.Call]:
    """`self.<method>(...)` calls of `stmt` (not modules) taking a tracked value."""
    out = []
    for node in walk_local(stmt):
        if not isinstance(node, ast.Call):
            continue
        attr = self_attr(node.func)
        if attr is None or attr in flow.constructors:
            continue
        args = [*node.args, *(k.value for k in node.keywords)]
        if any(data_names(a) & used for a in args):
            out.append(node)
    return out


def _sequence_work(
    ctx: ParallelContext,
    flow: ForwardFlow,
    found: Caller,
    call: ast.Call,
    used: set[str],
    depth: int,
) -> str | None:
    """What in `found` (called by `call`) needs the whole sequence of the values it received."""
    tracked = {param for param, arg in bound_arguments(call, found.func) if data_names(arg) & used}
    if not tracked:
        return None
    for stmt in found.func.body:
        value = _value(stmt)
        if value is None or not data_names(value) & tracked:
            continue
        op = is_sequence_global(value, tracked)
        if op is not None:
            return f"applies `{op}` to it (line {stmt.lineno})"
        module = _module_applied(value, tracked, flow)
        if module is not None:
            return f"runs `self.{module[0]}` ({module[1]}) on it (line {stmt.lineno})"
        for inner in _inner_calls(value, tracked):
            nested = callee(ctx, found, inner)
            if nested is None:
                continue
            if depth <= 1:
                return f"calls `{ast.unparse(inner.func)}`, read no deeper (line {stmt.lineno})"
            why = _sequence_work(ctx, flow, nested, inner, tracked, depth - 1)
            if why:
                return why
        if isinstance(stmt, ast.Assign):
            tracked |= {n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return None


def _value(stmt: ast.stmt) -> ast.expr | None:
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)):
        return stmt.value
    return None


def _module_applied(
    value: ast.expr, tracked: set[str], flow: ForwardFlow
) -> tuple[str, str] | None:
    for node in walk_local(value):
        if not isinstance(node, ast.Call):
            continue
        attr = self_attr(node.func)
        ctor = flow.constructors.get(attr or "")
        if not ctor or not any(data_names(a) & tracked for a in node.args):
            continue
        if not last_part(ctor).endswith(_TOKEN_LOCAL):
            return attr or "?", last_part(ctor)
    return None


def _inner_calls(value: ast.expr, tracked: set[str]) -> list[ast.Call]:
    return [
        node
        for node in walk_local(value)
        if isinstance(node, ast.Call)
        and any(data_names(a) & tracked for a in [*node.args, *(k.value for k in node.keywords)])
    ]
