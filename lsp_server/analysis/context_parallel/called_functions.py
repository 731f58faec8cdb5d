"""The functions a module's code calls that the analysis can read, with the call's arguments
bound to their parameters: a function of the file or one it imports (`Resolver.find_function`),
a method of the module's own class (`self._mask(q, k)`) or of the attention module a processor
is handed (`attn._mask(q, k)`). Attention kernels are left out: what they do across ranks is the
context-parallel backend's work."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from ..astutil import declared_params, per_node, walk, walk_local
from ..parallel_input import ParallelContext
from ..sources import ClassRef, SourceFile
from .attention_facts import ATTENTION_KERNELS


@dataclass(frozen=True)
class Caller:
    """A function being read: the file that defines it and the classes whose methods its
    receivers name (`self`; a processor's attention module, `attn`)."""

    func: ast.FunctionDef
    source: SourceFile
    receivers: Mapping[str, ClassRef] = field(default_factory=dict)


def module_caller(ctx: ParallelContext, cls: ClassRef, func: ast.FunctionDef) -> Caller | None:
    """`func`, a method of `cls` (or of the base that defines it), as a Caller."""
    found = ctx.resolver.find_method(cls, func.name)
    source = found[1].source if found is not None and found[0] is func else cls.source
    return Caller(func, source, {"self": cls}) if source is not None else None


def processor_caller(
    processor: ClassRef, func: ast.FunctionDef, module: ClassRef | None
) -> Caller | None:
    """A processor's `__call__(self, attn, ...)`: `attn.<method>` is one of `module`'s."""
    if processor.source is None:
        return None
    receivers = {"self": processor}
    params = declared_params(func)
    if module is not None and module.node is not None and params:
        receivers[params[0]] = module
    return Caller(func, processor.source, receivers)


def callee(ctx: ParallelContext, caller: Caller, call: ast.Call) -> Caller | None:
    """The function `call` runs, when its source is read; None for anything else (a module
    attribute, a torch function, an attention kernel)."""
    func = call.func
    if isinstance(func, ast.Name):
        if func.id in ATTENTION_KERNELS:
            return None
        located = ctx.resolver.find_function(caller.source, func.id)
        return Caller(located[0], located[1]) if located is not None else None
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    cls = caller.receivers.get(func.value.id)
    if cls is None or func.attr in ATTENTION_KERNELS:
        return None
    found = ctx.resolver.find_method(cls, func.attr)
    if found is None or found[1].source is None:
        return None
    return Caller(found[0], found[1].source, {"self": cls})


def bound_arguments(call: ast.Call, func: ast.FunctionDef) -> list[tuple[str, ast.expr]]:
    """(parameter, argument) for each argument of `call` that `func` names (positional ones up
    to the first `*args`, then keywords)."""
    params = declared_params(func)
    bound: list[tuple[str, ast.expr]] = []
    for param, arg in zip(params, call.args, strict=False):
        if isinstance(arg, ast.Starred):
            break
        bound.append((param, arg))
    bound += [(k.arg, k.value) for k in call.keywords if k.arg in params]
    return bound


def calls_in(node: ast.AST) -> Iterator[ast.Call]:
    """The calls in an expression, outer ones first."""
    return (n for n in walk(node) if isinstance(n, ast.Call))


_KINDS = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.Return, ast.Expr)


def statements(func: ast.FunctionDef) -> list[ast.stmt]:
    """Assignments, loops (their iterable), returns and bare expressions of `func`, in source
    order."""
    return list(_statements(func))


@per_node
def _statements(func: ast.FunctionDef) -> tuple[ast.stmt, ...]:
    found = (n for n in walk_local(func) if isinstance(n, _KINDS))
    return tuple(sorted(found, key=lambda n: (n.lineno, n.col_offset)))


def statement_value(stmt: ast.stmt) -> ast.expr | None:
    if isinstance(stmt, ast.For):
        return stmt.iter
    value = getattr(stmt, "value", None)
    return value if isinstance(value, ast.expr) else None
