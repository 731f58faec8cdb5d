"""Three-valued abstract values and the environment `__call__` is interpreted in.

A value is a Python constant, `UNKNOWN` (cannot be known statically), `UNSET` (an optional
`__call__` input defaulting to None: None by default, but users often pass it, so `x is None` on it
is unknown) or `GIVEN` (an input the caller says it passes, a tensor or a file: not None, and
nothing else known about it). An `Env` maps local variables and `self` attributes to values,
call-target aliases and the definitions (data flow) they came from; environments of alternative
branches are joined.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar


class _Unknown:
    """A value that cannot be known statically."""

    def __repr__(self) -> str:
        return "unknown"


class _Unset:
    """An optional `__call__` input defaulting to None: None by default, but users often pass it."""

    def __repr__(self) -> str:
        return "unset optional input"


class _Given:
    """An input the caller passes whose value is not a constant (a tensor, an image): not None."""

    def __repr__(self) -> str:
        return "given"


UNKNOWN = _Unknown()
UNSET = _Unset()
GIVEN = _Given()
Value = object  # a Python constant, UNKNOWN, UNSET or GIVEN
_V = TypeVar("_V")


def truth(v: Value) -> bool | None:
    if v is UNKNOWN or v is UNSET or v is GIVEN:
        return None
    try:
        return bool(v)
    except Exception:
        return None


def same(a: Value, b: Value) -> bool:
    return type(a) is type(b) and (a is b or a == b)


def fmt(v: Value) -> str:
    if v is UNSET:
        return "None (an optional input callers may pass: unknown)"
    if v is GIVEN:
        return "given (not None)"
    return repr(v)


def join_value(a: Value, b: Value) -> Value:
    if same(a, b):
        return a
    # "if x is None: x = 5.0" - the default path takes the filled-in value
    if a is UNSET and b is not UNKNOWN and b is not None:
        return b
    if b is UNSET and a is not UNKNOWN and a is not None:
        return a
    return UNKNOWN


def const_default(node: ast.expr | None, unset_none: bool) -> Value:
    """The value of a parameter default: constants (and negated numbers) only."""
    if node is None:
        return UNKNOWN
    if isinstance(node, ast.Constant):
        if node.value is None:
            return UNSET if unset_none else None
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
    ):
        return -node.operand.value
    return UNKNOWN


@dataclass(frozen=True, eq=False)
class Def:
    """One assignment of a variable, with the definitions its right-hand side read (data flow)."""

    value: ast.AST
    line: int
    path: str
    deps: tuple[tuple[str, tuple[Def, ...]], ...]


@dataclass
class Env:
    vars: dict[str, Value] = field(default_factory=dict)
    selfv: dict[str, Value] = field(default_factory=dict)
    aliases: dict[str, frozenset[str]] = field(default_factory=dict)
    defs: dict[str, tuple[Def, ...]] = field(default_factory=dict)
    origin: dict[str, tuple[str, int]] = field(default_factory=dict)

    def copy(self) -> Env:
        return Env(
            dict(self.vars),
            dict(self.selfv),
            dict(self.aliases),
            dict(self.defs),
            dict(self.origin),
        )

    def assign_from(self, other: Env) -> None:
        self.vars, self.selfv, self.aliases = other.vars, other.selfv, other.aliases
        self.defs, self.origin = other.defs, other.origin


def _join_map(a: dict[str, _V], b: dict[str, _V], join: Callable[[_V, _V], _V]) -> dict[str, _V]:
    out = dict(a)
    for k, v in b.items():
        out[k] = join(a[k], v) if k in a else v
    return out


def join(envs: Sequence[Env]) -> Env:
    """The environment after any of `envs` (alternative branches)."""
    out = envs[0].copy()
    for e in envs[1:]:
        out.vars = _join_map(out.vars, e.vars, join_value)
        out.selfv = _join_map(out.selfv, e.selfv, join_value)
        out.aliases = _join_map(out.aliases, e.aliases, frozenset.union)
        out.defs = _join_map(out.defs, e.defs, lambda x, y: tuple(dict.fromkeys(x + y)))
        out.origin = _join_map(out.origin, e.origin, lambda x, _y: x)
    return out
