"""What the interpreter records while it runs a block: module instances and data-flow events.

`Node` is one module instance of the block (paths are relative to the block, `attn.to_out.0`);
`Trace` collects the events the roles are decided from: which tensors reach each Linear, the
attention calls and their q/k/v, reshapes of projected tensors with module attributes (the
`shard_div_attr` evidence: each size with the role it plays and how it scales), chunks of Linear
outputs, normalizations of projected tensors, Linear outputs used to modulate a normalized stream,
and calls into DTensor-unsafe kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..sources import SourceFile
from .values import Mono, Ref, Scalar, Tensor

MODULE, LINEAR, LIST, SEQ, DICT = "module", "linear", "list", "seq", "dict"
NORM, ACTIVATION, PASS, OPAQUE = "norm", "act", "pass", "opaque"


@dataclass(eq=False)
class Node:
    kind: str
    cls: Ref | None
    source: SourceFile | None = None
    line: int = 0
    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)
    path: str | None = None
    built: bool = False
    children: dict[str, Any] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    conds: dict[str, str] = field(default_factory=dict)
    cond: str | None = None  # condition under which this module exists (from its parent)
    default_absent: bool = False  # exists only with other config values than the defaults
    absent: set[str] = field(default_factory=set)  # children created only for other configs
    processor: Any = None
    out_features: Scalar | None = None
    in_features: Scalar | None = None

    @property
    def name(self) -> str:
        return self.cls.last if self.cls else self.kind

    def child_path(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name


@dataclass
class AttnCall:
    owner: Node | None
    q: Tensor
    k: Tensor
    v: Tensor
    name: str
    path: str
    line: int
    gqa_flag: Scalar | None = None  # value of `enable_gqa=` when passed


COUNT, PER_HEAD = "count", "per_head"


@dataclass(frozen=True)
class SizeUse:
    """One size of a shape operation on a projected tensor, computed from module attributes.

    `role` COUNT: the size must be the per-rank value when the projection is column-sharded (a head
    count splitting its last dim, a width it is reshaped or split to); PER_HEAD: the size must stay
    the same on every TP size (the head_dim of `unflatten(-1, (-1, head_dim))`)."""

    role: str
    deps: frozenset  # (node path, attr)
    mono: Mono | None  # how the size scales with `deps` (`values.monomial`)
    text: str = ""  # the size as written


@dataclass
class ShapeUse:
    linears: frozenset[str]
    attrs: frozenset  # (node path, attr) of the COUNT sizes
    kind: str  # reshape | split | attention (a head count passed to the attention call)
    path: str
    line: int
    sizes: tuple[SizeUse, ...] = ()
    absorbed: bool = False  # the head count is left to `-1` next to a given head size
    text: str = ""  # the operation as written (shortened)


@dataclass
class Event:
    linears: frozenset[str]
    path: str
    line: int
    detail: str = ""


@dataclass
class Trace:
    linear_inputs: dict[str, Tensor] = field(default_factory=dict)
    linear_nodes: dict[str, Node] = field(default_factory=dict)
    linear_lines: dict[str, tuple[str, int]] = field(default_factory=dict)
    attn_calls: list[AttnCall] = field(default_factory=list)
    shapes: list[ShapeUse] = field(default_factory=list)
    chunks: list[Event] = field(default_factory=list)
    norms: list[Event] = field(default_factory=list)
    modulations: dict[str, Event] = field(default_factory=dict)
    unsafe: list[Event] = field(default_factory=list)
    repeats: list[Event] = field(default_factory=list)  # K/V heads repeated before attention
    # a projected tensor reshaped/split to a last size read from an unsharded tensor's shape
    # (`o.reshape(b, n, d)` after `b, n, d = x.shape`): its projections cannot be sharded
    whole_widths: list[Event] = field(default_factory=list)
    # a projected tensor's last dim split into groups ahead of its heads
    # (`q.reshape(b, n, 2, heads, -1)`: two query maps): its columns are not per-head
    grouped: list[Event] = field(default_factory=list)
    sources: dict[str, SourceFile] = field(default_factory=dict)

    def linear_call(self, node: Node, value: Tensor, path: str, line: int) -> None:
        key = node.path or ""
        old = self.linear_inputs.get(key)
        self.linear_inputs[key] = value if old is None else Tensor(old.srcs | value.srcs, old.flags)
        self.linear_nodes.setdefault(key, node)
        self.linear_lines.setdefault(key, (path, line))
