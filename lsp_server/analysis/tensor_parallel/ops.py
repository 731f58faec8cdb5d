"""What tensor operations do to the abstract `Tensor`: framework vocabulary (torch functions and
tensor methods, einops), read as names, never imported.

Shape operations record the module attributes their sizes are computed from (`ShapeUse`): for a
reshape the outer factors of the split last dim (`view(b, s, attn.heads, head_dim)` -> `heads`),
for a split of the last dim every size (`split(x, [attn.inner_dim * 3, attn.mlp_hidden_dim])`).
"""

from __future__ import annotations

from typing import Any

from .trace import Event, ShapeUse, Trace
from .values import (
    ACT,
    BCAST,
    CATLAST,
    FRESH,
    HEADS,
    NORMED,
    Scalar,
    Tensor,
    Tup,
    deps_of,
    tensors_in,
    union,
)

REDUCED = "reduced"
ACTIVATIONS = frozenset(
    {
        "gelu", "silu", "relu", "sigmoid", "tanh", "softmax", "mish", "softplus", "elu", "selu",
        "celu", "leaky_relu", "glu", "log_softmax", "hardswish", "hardsigmoid", "swish", "erf",
        "logsigmoid", "softsign", "relu6", "gelu_tanh", "quick_gelu", "exp",
    }
)  # fmt: skip
NORM_FUNCS = frozenset({"layer_norm", "rms_norm", "group_norm", "normalize", "instance_norm"})
MATMULS = frozenset({"matmul", "bmm", "mm", "einsum", "baddbmm", "addmm", "addbmm"})
CATS = frozenset({"cat", "concat", "concatenate", "stack", "hstack"})
REDUCTIONS = frozenset({"mean", "sum", "var", "std", "amax", "max", "norm", "logsumexp"})
REPEATS = frozenset({"repeat", "repeat_interleave", "expand", "tile"})
CREATORS = frozenset(
    {"zeros_like", "ones_like", "empty_like", "full_like", "zeros", "ones", "empty", "full",
     "arange", "randn", "rand", "tensor", "linspace", "randn_like", "rand_like"}
)  # fmt: skip
SCALAR_METHODS = frozenset({"size", "dim", "numel", "item", "tolist", "element_size", "nelement"})
ELEMENTWISE_BINARY = {"mul": "mul", "multiply": "mul", "div": "div", "add": "add", "sub": "add"}


def is_attention_name(name: str) -> bool:
    low = name.lower()
    if any(w in low for w in ("mask", "prepare", "processor", "set_", "norm", "scores_", "bias")):
        return False
    return "attention" in low or "attn" in low or low in ("sdpa", "sdp") or "flash_" in low


def _dim(args: list, kwargs: dict, index: int) -> Any:
    value = kwargs.get("dim", kwargs.get("axis"))
    if value is None and len(args) > index:
        value = args[index]
    if isinstance(value, Scalar) and value.known:
        return value.value
    return None


def _is_last(dim: Any, t: Tensor) -> bool:
    return dim in (-1, None) or (dim == 2 and HEADS not in t.flags)


def _sizes(args: list) -> list:
    if len(args) == 1 and isinstance(args[0], Tup):
        return list(args[0].items)
    return list(args)


def _attrs(values: list) -> frozenset:
    out: frozenset = frozenset()
    for v in values:
        out |= deps_of(v)
    return out


class TensorOps:
    """Tensor semantics for one trace; `where` gives (path, line) for evidence."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def shape(self, t: Tensor, attrs: frozenset, kind: str, where: tuple[str, int]) -> None:
        if t.srcs and attrs:
            self.trace.shapes.append(ShapeUse(frozenset(t.linears()), attrs, kind, *where))

    def method(
        self, name: str, t: Tensor, args: list, kwargs: dict, where: tuple[str, int]
    ) -> Any | None:
        """`t.<name>(*args)`; None when the name is not tensor vocabulary (caller decides)."""
        if name in ("view", "reshape"):
            sizes = _sizes(args)
            if sizes and all(isinstance(s, Scalar) for s in sizes):
                self.shape(t, _attrs(sizes[:-1]), "reshape", where)
                if len(sizes) >= 4:
                    return t.with_flags((HEADS,), (BCAST, NORMED))
                return t.with_flags((), (HEADS, BCAST, NORMED))
            return t.with_flags((), (NORMED,))
        if name == "unflatten":
            sizes = _sizes(args[1:]) if len(args) > 1 else _sizes([kwargs.get("sizes", Tup(()))])
            self.shape(t, _attrs(sizes[:-1]), "reshape", where)
            return t.with_flags((HEADS,), (BCAST, NORMED))
        if name == "flatten":
            return t.with_flags((), (HEADS, BCAST, NORMED))
        if name == "unsqueeze":
            return t.with_flags((BCAST,))
        if name in ("chunk", "split", "split_with_sizes", "tensor_split", "unbind"):
            return self.split(name, t, args, kwargs, where)
        if name in REPEATS:
            if t.srcs:
                self.trace.repeats.append(Event(frozenset(t.linears()), *where, name))
            return t
        if name in ACTIVATIONS or name.rstrip("_") in ACTIVATIONS:
            return t.with_via(ACT).with_flags((), (NORMED,))
        if name in REDUCTIONS:
            return t.with_flags((REDUCED,), (NORMED,))
        if name in SCALAR_METHODS:
            return Scalar()
        if name in ELEMENTWISE_BINARY:
            return None  # the caller applies binary-operator semantics
        if name in MATMULS:
            return union([t, *args]).with_via(ACT)
        return t.with_flags((), (NORMED,))

    def function(self, name: str, args: list, kwargs: dict, where: tuple[str, int]) -> Any | None:
        """`torch.<name>(...)` / `F.<name>(...)`; None when not vocabulary."""
        first = args[0] if args else None
        if name in CATS:
            items = tensors_in(first) if first is not None else []
            out = union(items)
            dim = _dim(args, kwargs, 1)
            groups = {frozenset(i.linears()) for i in items if i.srcs}
            if name != "stack" and len(groups) > 1 and _is_last(dim, out):
                out = out.with_flags((CATLAST,))
            return out
        if name in MATMULS:
            return union(args).with_via(ACT)
        if name in CREATORS:
            return FRESH
        if isinstance(first, Tensor):
            if name in NORM_FUNCS:
                self.norm(first, where, name)
                return first.with_flags((NORMED,))
            if name in ("chunk", "split", "split_with_sizes", "tensor_split", "unbind"):
                return self.split(name, first, args[1:], kwargs, where)
            if name in ("reshape", "unflatten", "flatten", "unsqueeze", *REPEATS):
                return self.method(name, first, args[1:], kwargs, where)
            if name in ACTIVATIONS or name in REDUCTIONS or name in ("rsqrt", "sqrt"):
                return self.method(name, first, args[1:], kwargs, where)
            if name in ("where", "masked_fill", "clamp", "dropout", "pad", "roll", "flip"):
                return union(args).with_flags((), (NORMED,))
        if name in ("rearrange", "repeat", "reduce") and isinstance(first, Tensor):
            return self.einops(name, first, args, kwargs, where)
        return None

    def norm(self, t: Tensor, where: tuple[str, int], what: str) -> None:
        if t.srcs:
            detail = "per-head" if HEADS in t.flags else "across-heads"
            self.trace.norms.append(Event(frozenset(t.linears()), *where, f"{detail}:{what}"))

    def split(self, name: str, t: Tensor, args: list, kwargs: dict, where: tuple[str, int]) -> Any:
        if name == "unbind":
            return t
        spec = args[0] if args else kwargs.get("chunks", kwargs.get("split_size_or_sections"))
        dim = _dim(args, kwargs, 1)
        if name == "chunk":
            n = spec.value if isinstance(spec, Scalar) and isinstance(spec.value, int) else None
            if t.srcs and (_is_last(dim, t) or dim == 1):
                self.trace.chunks.append(Event(frozenset(t.linears()), *where, str(n or "?")))
            if n is not None and 1 <= n <= 16:
                return Tup((t,) * n)
            return t
        if isinstance(spec, Tup):
            if _is_last(dim, t):
                self.shape(t, _attrs(list(spec.items)), "split", where)
                if t.srcs:
                    detail = str(len(spec.items))
                    self.trace.chunks.append(Event(frozenset(t.linears()), *where, detail))
            return Tup((t,) * max(1, len(spec.items)))
        return t

    def einops(self, name: str, t: Tensor, args: list, kwargs: dict, where: tuple[str, int]) -> Any:
        pattern = args[1] if len(args) > 1 else kwargs.get("pattern")
        if not (isinstance(pattern, Scalar) and isinstance(pattern.value, str)):
            return t
        left, _, right = pattern.value.partition("->")
        if name == "repeat":
            if t.srcs:
                self.trace.repeats.append(Event(frozenset(t.linears()), *where, "einops.repeat"))
            return t
        outer: list[Any] = []
        for group in left.split("(")[1:]:
            axes = group.split(")")[0].split()
            if len(axes) > 1 and axes[0] in kwargs:
                outer.append(kwargs[axes[0]])
        self.shape(t, _attrs(outer), "reshape", where)
        if "(" in left:
            return t.with_flags((HEADS,), (BCAST, NORMED))
        if "(" in right:
            return t.with_flags((), (HEADS, BCAST, NORMED))
        return t.with_flags((), (NORMED,))
