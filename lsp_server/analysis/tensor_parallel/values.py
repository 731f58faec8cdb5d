"""Abstract values of the tensor-parallel interpreter and how two of them are joined.

The interpreter (`interp.py`) runs a block's `__init__` and `forward` over these values instead of
real ones:

* `Scalar` - a Python value from a literal, a default or config.json (`value` is `UNKNOWN` when it
  cannot be computed); `var` marks values that depend on a config default (another checkpoint may
  use another value) and `deps` the module attributes (`(node path, attr)`) it was computed from;
  `mono` is how it scales with those attributes when it is a product/quotient of them
  (`attn.inner_dim // attn.heads` -> `{inner_dim: 1, heads: -1}`; see `monomial`), which tells
  what dividing some of them by the TP size does to a reshape size;
* `Tensor` - an activation: `srcs` are the Linear layers whose outputs it is computed from since
  the last Linear on each path, each with how it got here (`RAW`, through an activation or a
  product of two projections `ACT`, through an attention call `ATTN`); `flags` are shape facts
  (`HEADS`: the last dim was split into heads, `BCAST`: a new axis was inserted, `NORMED`: output
  of a normalization, `ROWOUT`: output of a projection fed by a sharded tensor (replicated),
  `MODULATED`: a normalized stream scaled by a modulation, `MAYBE_NONE`); `Scalar.whole` marks
  sizes read from an unsharded tensor's shape (`SHAPE`, `WIDTH`: its last size);
* `Tup` - a tuple or list; `Alt` - one of several values (branches that could not be decided);
* `Ref` - a class, function or external (torch, einops) name; `Obj` - an instance of a non-module
  class (attention processors); `Bound` - a method bound to its receiver; `Lazy` - a module
  constructor call not yet resolved (resolved and built on first use, see `modules.py`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from ..sources import ClassRef, SourceFile

RAW, ACT, ATTN = "raw", "act", "attn"
HEADS, BCAST, NORMED, MAYBE_NONE, CATLAST = "heads", "bcast", "normed", "maybe_none", "catlast"
ROWOUT, MODULATED = "rowout", "modulated"  # output of a row projection / of a modulation
SCORES = "scores"  # q @ k^T of two projections (a hand-written attention)
# sizes read at run time from an unsharded tensor (the block's input stream, a replicated
# output): its whole `shape`, and its last size (`x.shape[-1]`, `b, n, d = x.shape`) or a value
# computed from it - the full width, which a sharded projection's output no longer has
SHAPE, WIDTH = "shape", "width"


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
_EMPTY: frozenset = frozenset()


Mono = tuple[tuple[Any, int], ...]  # sorted ((node path, attr), exponent), exponents non-zero


@dataclass(frozen=True, slots=True)
class Scalar:
    value: Any = UNKNOWN
    var: bool = False
    deps: frozenset = _EMPTY
    mono: Mono | None = None  # None: not known to be a monomial of `deps` (see `monomial`)
    whole: str = ""  # SHAPE / WIDTH: read from the shape of a tensor no projection shards

    @property
    def known(self) -> bool:
        return self.value is not UNKNOWN


def monomial(value: Any) -> Mono | None:
    """How a scalar scales with the module attributes it is computed from: `()` for a constant
    (a literal or a config value read without an attribute), `((attr, 1),)` for an attribute read,
    products and quotients of those; None when unknown (a tensor's shape, a sum of unlike terms)."""
    if not isinstance(value, Scalar):
        return None
    if value.mono is not None:
        return value.mono
    return () if value.known and not value.deps else None


def mono_combine(a: Mono | None, b: Mono | None, sign: int) -> Mono | None:
    """The monomial of `a * b` (sign 1) or `a / b` (sign -1)."""
    if a is None or b is None:
        return None
    out: dict[Any, int] = dict(a)
    for key, exp in b:
        out[key] = out.get(key, 0) + sign * exp
    return tuple(sorted(((k, e) for k, e in out.items() if e), key=repr))


@dataclass(frozen=True, slots=True)
class Tensor:
    srcs: frozenset = _EMPTY  # (linear path, RAW | ACT | ATTN)
    flags: frozenset = _EMPTY

    def linears(self) -> set[str]:
        return {p for p, _ in self.srcs}

    def with_via(self, via: str) -> Tensor:
        """Every source now reached through `via` (attention dominates activation)."""
        if not self.srcs:
            return self
        srcs = frozenset((p, ATTN if v == ATTN else via) for p, v in self.srcs)
        return Tensor(srcs, self.flags)

    def with_flags(self, add: tuple[str, ...] = (), drop: tuple[str, ...] = ()) -> Tensor:
        flags = (self.flags | frozenset(add)) - frozenset(drop)
        return self if flags == self.flags else Tensor(self.srcs, flags)


FRESH = Tensor()


def unsharded_shape(t: Tensor) -> Scalar:
    """`t.shape` / `t.size()`: marked SHAPE when no projection's sharded output reaches `t`."""
    return Scalar(whole=SHAPE if not t.srcs or t.flags & {ROWOUT, MODULATED} else "")


@dataclass(frozen=True, slots=True)
class Tup:
    items: tuple


@dataclass(frozen=True, slots=True)
class Alt:
    options: tuple


@dataclass(frozen=True, slots=True)
class Ref:
    """A definition: `kind` is class | func | ext (a dotted name we do not read) | builtin."""

    kind: str
    qualname: str
    node: ast.ClassDef | ast.FunctionDef | None = None
    source: SourceFile | None = None

    @property
    def last(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    def class_ref(self) -> ClassRef:
        node = self.node if isinstance(self.node, ast.ClassDef) else None
        return ClassRef(self.last, self.qualname, node, self.source)


@dataclass(frozen=True, eq=False)
class DictLit:
    """A module-level dict literal (`NORMS = {"layer_norm": nn.LayerNorm, ...}`), read lazily."""

    source: SourceFile
    node: ast.Dict


@dataclass(eq=False)
class Obj:
    """An instance of a model-defined class that is not an `nn.Module` (attention processors)."""

    cls: Ref
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Bound:
    func: ast.FunctionDef
    source: SourceFile
    owner: ClassRef
    receiver: Any


@dataclass(eq=False)
class Lazy:
    """`Cls(args)` seen while building a module: resolved and built when first used."""

    source: SourceFile
    name: str  # the callee as written (`nn.Linear`, `Attention`)
    args: list
    kwargs: dict
    line: int
    ref: Any = None  # the resolved callee when known at creation
    built: Any = None  # the Node (or other value) once resolved
    cond: str | None = None  # condition of the branch that created it (set when attached)
    absent: bool = False  # created only with other config values than the defaults


def is_none(value: Any) -> bool:
    return isinstance(value, Scalar) and value.known and value.value is None


def join(a: Any, b: Any) -> Any:
    """The value of a variable that may hold `a` or `b`."""
    if a is b:
        return a
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return Tensor(a.srcs | b.srcs, a.flags | b.flags)
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        ma, mb = monomial(a), monomial(b)
        mono = ma if ma == mb else None
        whole = a.whole if a.whole == b.whole else (WIDTH if WIDTH in (a.whole, b.whole) else "")
        if a.known and b.known and type(a.value) is type(b.value) and a.value == b.value:
            return Scalar(a.value, a.var or b.var, a.deps | b.deps, mono, whole)
        return Scalar(UNKNOWN, a.var or b.var, a.deps | b.deps, mono, whole)
    if is_none(a) and isinstance(b, Tensor):
        return b.with_flags((MAYBE_NONE,))
    if is_none(b) and isinstance(a, Tensor):
        return a.with_flags((MAYBE_NONE,))
    if isinstance(a, Tup) and isinstance(b, Tup) and len(a.items) == len(b.items):
        return Tup(tuple(join(x, y) for x, y in zip(a.items, b.items, strict=True)))
    options: list[Any] = []
    for value in (a, b):
        for option in value.options if isinstance(value, Alt) else (value,):
            if not any(option is o for o in options):
                options.append(option)
    tensors = [o for o in options if isinstance(o, Tensor)]
    if len(tensors) > 1:
        merged = tensors[0]
        for t in tensors[1:]:
            merged = join(merged, t)
        options = [o for o in options if not isinstance(o, Tensor)] + [merged]
    return Alt(tuple(options[:8])) if len(options) > 1 else options[0]


def options(value: Any) -> tuple:
    return value.options if isinstance(value, Alt) else (value,)


def tensors_in(value: Any, depth: int = 0) -> list[Tensor]:
    """Tensors held by a value (tuples and alternatives flattened)."""
    if isinstance(value, Tensor):
        return [value]
    if depth > 3:
        return []
    if isinstance(value, Tup | Alt):
        out: list[Tensor] = []
        for item in value.items if isinstance(value, Tup) else value.options:
            out += tensors_in(item, depth + 1)
        return out
    return []


def union(values: list[Any]) -> Tensor:
    srcs: frozenset = _EMPTY
    flags: frozenset = _EMPTY
    for value in values:
        for t in tensors_in(value):
            srcs |= t.srcs
            flags |= t.flags
    return Tensor(srcs, flags - {MAYBE_NONE, NORMED})


def as_tensor(value: Any) -> Tensor:
    """The tensor a value stands for where a tensor is expected (a tuple alternative is not one)."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, Alt):
        tensors = [o for o in value.options if isinstance(o, Tensor)]
        if tensors:
            return union(tensors)
    return union([value])


def deps_of(value: Any) -> frozenset:
    if isinstance(value, Scalar):
        return value.deps
    if isinstance(value, Tup):
        out: frozenset = _EMPTY
        for item in value.items:
            out |= deps_of(item)
        return out
    return _EMPTY
