"""What tensor operations do to the abstract `Tensor`: framework vocabulary (torch functions and
tensor methods, einops), read as names, never imported.

Shape operations record the module attributes their sizes are computed from (`ShapeUse`), each
size with its role (`SizeUse`): for a reshape that splits the last dim into heads the outer
factors are COUNT sizes (`view(b, s, attn.heads, head_dim)` -> `heads`) and the last one is
PER_HEAD (`head_dim`, also when it is `attn.inner_dim // attn.heads`); a reshape that merges heads
back (`reshape(b, -1, attn.heads * head_dim)`) and a split of the last dim
(`split(x, [attn.inner_dim * 3, attn.mlp_hidden_dim])`) give COUNT sizes (per-rank widths). A
reshape that leaves the head count to `-1` next to a given head size is marked `absorbed`.
"""

from __future__ import annotations

import ast
from typing import Any

from .trace import COUNT, PER_HEAD, Event, ShapeUse, SizeUse, Trace
from .values import (
    ACT,
    BCAST,
    CATLAST,
    FRESH,
    HEADS,
    MAYBE_NONE,
    NORMED,
    SHAPE,
    WIDTH,
    Scalar,
    Tensor,
    Tup,
    deps_of,
    monomial,
    tensors_in,
    union,
    unsharded_shape,
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
MAPPING_LOOKUPS = frozenset({"get", "pop", "setdefault"})
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


def _minus_one(value: Any) -> bool:
    return isinstance(value, Scalar) and value.value == -1 and not value.deps


def _uses(pairs: list[tuple[Any, str]]) -> tuple[SizeUse, ...]:
    """The sizes computed from module attributes, with their roles."""
    return tuple(SizeUse(role, deps_of(v), monomial(v)) for v, role in pairs if deps_of(v))


def _text(node: ast.AST | None, limit: int = 90) -> str:
    if node is None:
        return ""
    try:
        text = " ".join(ast.unparse(node).split())
    except Exception:  # pragma: no cover - odd nodes
        return ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


class TensorOps:
    """Tensor semantics for one trace; `where` gives (path, line) for evidence and `node` the
    call as written (for the reasons that cite it)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def shape(
        self,
        t: Tensor,
        sizes: tuple[SizeUse, ...],
        kind: str,
        where: tuple[str, int],
        node: ast.AST | None = None,
        absorbed: bool = False,
        text: str = "",
    ) -> None:
        if not t.srcs or not (sizes or absorbed):
            return
        attrs: frozenset = frozenset()
        for size in sizes:
            if size.role == COUNT:
                attrs |= size.deps
        text = _text(node) or text
        use = ShapeUse(frozenset(t.linears()), attrs, kind, *where, sizes, absorbed, text)
        self.trace.shapes.append(use)

    def reshape(self, t: Tensor, sizes: list, where: tuple[str, int], node: ast.AST | None) -> bool:
        """`view`/`reshape` sizes: splitting the last dim into heads (four or more sizes, or a
        head count among the outer ones) makes the last size PER_HEAD; otherwise (a merge back,
        a flat reshape) it is the per-rank width (COUNT). Outer sizes are COUNT. True when the
        last dim was split into heads."""
        if not sizes:
            return False
        self.whole_width(t, sizes[-1], where, node)
        split = len(sizes) >= 4 or any(deps_of(s) for s in sizes[:-1])
        self.grouped(t, sizes, where, node)
        pairs = [(s, COUNT) for s in sizes[:-1]]
        pairs.append((sizes[-1], PER_HEAD if split else COUNT))
        absorbed = split and len(sizes) >= 2 and _minus_one(sizes[-2])
        absorbed = absorbed and not _minus_one(sizes[-1])
        self.shape(t, _uses(pairs), "reshape", where, node, absorbed)
        return split

    def grouped(self, t: Tensor, sizes: list, where: tuple[str, int], node: ast.AST | None) -> None:
        """A constant factor above 1 right before the first size computed from a module
        attribute (the head count): the last dim holds groups of heads (`reshape(b, n, 2,
        heads, -1)`, `unflatten(-1, (3, heads, -1))`), so column shards would cut whole groups,
        not heads of every group."""
        first = next((i for i, s in enumerate(sizes) if deps_of(s)), None)
        if not t.srcs or first is None or first == 0:
            return
        before = sizes[first - 1]
        if isinstance(before, Scalar) and isinstance(before.value, int) and before.value > 1:
            self.trace.grouped.append(Event(frozenset(t.linears()), *where, _text(node)))

    def whole_width(
        self, t: Tensor, size: Any, where: tuple[str, int], node: ast.AST | None
    ) -> None:
        """A projected tensor's last size given as the full width of an unsharded tensor."""
        sizes = size.items if isinstance(size, Tup) else (size,)
        if t.srcs and any(isinstance(s, Scalar) and s.whole in (WIDTH, SHAPE) for s in sizes):
            self.trace.whole_widths.append(Event(frozenset(t.linears()), *where, _text(node)))

    def method(
        self,
        name: str,
        t: Tensor,
        args: list,
        kwargs: dict,
        where: tuple[str, int],
        node: ast.AST | None = None,
    ) -> Any | None:
        """`t.<name>(*args)`; None when the name is not tensor vocabulary (caller decides)."""
        if name in ("view", "reshape"):
            sizes = _sizes(args)
            if sizes and all(isinstance(s, Scalar) for s in sizes):
                # `reshape(*x.shape[:-1], attn.heads, -1)`: the starred prefix has no known
                # length, the head count among the outer sizes still says "split into heads"
                if self.reshape(t, sizes, where, node) or len(sizes) >= 4:
                    return t.with_flags((HEADS,), (BCAST, NORMED))
                return t.with_flags((), (HEADS, BCAST, NORMED))
            return t.with_flags((), (NORMED,))
        if name == "unflatten":
            sizes = _sizes(args[1:]) if len(args) > 1 else _sizes([kwargs.get("sizes", Tup(()))])
            if sizes:
                self.whole_width(t, sizes[-1], where, node)
                self.grouped(t, sizes, where, node)
                pairs = [(s, COUNT) for s in sizes[:-1]] + [(sizes[-1], PER_HEAD)]
                absorbed = any(_minus_one(s) for s in sizes[:-1]) and not _minus_one(sizes[-1])
                self.shape(t, _uses(pairs), "reshape", where, node, absorbed)
            return t.with_flags((HEADS,), (BCAST, NORMED))
        if name in ("view_as", "reshape_as") and args and isinstance(args[0], Tensor):
            self.whole_width(t, unsharded_shape(args[0]), where, node)
            return t.with_flags((), (HEADS, BCAST, NORMED))
        if name == "flatten":
            return t.with_flags((), (HEADS, BCAST, NORMED))
        if name == "unsqueeze":
            return t.with_flags((BCAST,))
        if name in ("chunk", "split", "split_with_sizes", "tensor_split", "unbind"):
            return self.split(name, t, args, kwargs, where, node)
        if name in REPEATS:
            if t.srcs:
                self.trace.repeats.append(Event(frozenset(t.linears()), *where, name))
            return t
        if name in ACTIVATIONS or name.rstrip("_") in ACTIVATIONS:
            return t.with_via(ACT).with_flags((), (NORMED,))
        if name in REDUCTIONS:
            return t.with_flags((REDUCED,), (NORMED,))
        if name == "size":  # `x.size()` / `x.size(-1)` read like `x.shape` / `x.shape[-1]`
            shape = unsharded_shape(t)
            if not args:
                return shape
            last = isinstance(args[0], Scalar) and args[0].value == -1 and shape.whole
            return Scalar(whole=WIDTH if last else "")
        if name in SCALAR_METHODS:
            return Scalar()
        if name in MAPPING_LOOKUPS:
            # an untraced argument used as a mapping (`attention_kwargs.get("cached_k")`): the
            # value may be missing, so both branches of a later `is None` test stay open
            return Tensor(flags=frozenset({MAYBE_NONE}))
        if name in ELEMENTWISE_BINARY:
            return None  # the caller applies binary-operator semantics
        if name in MATMULS:
            return union([t, *args]).with_via(ACT)
        return t.with_flags((), (NORMED,))

    def function(
        self,
        name: str,
        args: list,
        kwargs: dict,
        where: tuple[str, int],
        node: ast.AST | None = None,
    ) -> Any | None:
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
                return self.split(name, first, args[1:], kwargs, where, node)
            if name in ("reshape", "unflatten", "flatten", "unsqueeze", *REPEATS):
                return self.method(name, first, args[1:], kwargs, where, node)
            if name in ACTIVATIONS or name in REDUCTIONS or name in ("rsqrt", "sqrt"):
                return self.method(name, first, args[1:], kwargs, where)
            if name in ("where", "masked_fill", "clamp", "dropout", "pad", "roll", "flip"):
                return union(args).with_flags((), (NORMED,))
        if name in ("rearrange", "repeat", "reduce") and isinstance(first, Tensor):
            return self.einops(name, first, args, kwargs, where, node)
        return None

    def norm(self, t: Tensor, where: tuple[str, int], what: str) -> None:
        if t.srcs:
            detail = "per-head" if HEADS in t.flags else "across-heads"
            self.trace.norms.append(Event(frozenset(t.linears()), *where, f"{detail}:{what}"))

    def split(
        self,
        name: str,
        t: Tensor,
        args: list,
        kwargs: dict,
        where: tuple[str, int],
        node: ast.AST | None = None,
    ) -> Any:
        if name == "unbind":
            return t
        spec = args[0] if args else kwargs.get("chunks", kwargs.get("split_size_or_sections"))
        dim = _dim(args, kwargs, 1)
        if name == "chunk":
            n = spec.value if isinstance(spec, Scalar) and isinstance(spec.value, int) else None
            # a chunk of the head dim (`rotate_half` of RoPE) splits no projection's width
            per_head = HEADS in t.flags and dim in (-1, None)
            if t.srcs and not per_head and (_is_last(dim, t) or dim == 1):
                self.trace.chunks.append(Event(frozenset(t.linears()), *where, str(n or "?")))
            if n is not None and 1 <= n <= 16:
                return Tup((t,) * n)
            return t
        if isinstance(spec, Tup):
            if _is_last(dim, t):
                self.whole_width(t, spec, where, node)
                self.shape(t, _uses([(v, COUNT) for v in spec.items]), "split", where, node)
                if t.srcs:
                    detail = str(len(spec.items))
                    self.trace.chunks.append(Event(frozenset(t.linears()), *where, detail))
            return Tup((t,) * max(1, len(spec.items)))
        if isinstance(spec, Scalar) and _is_last(dim, t):
            self.whole_width(t, spec, where, node)  # `qkv.split(x.shape[-1], dim=-1)`
        return t

    def einops(
        self,
        name: str,
        t: Tensor,
        args: list,
        kwargs: dict,
        where: tuple[str, int],
        node: ast.AST | None = None,
    ) -> Any:
        pattern = args[1] if len(args) > 1 else kwargs.get("pattern")
        if not (isinstance(pattern, Scalar) and isinstance(pattern.value, str)):
            return t
        left, _, right = pattern.value.partition("->")
        if name == "repeat":
            if t.srcs:
                self.trace.repeats.append(Event(frozenset(t.linears()), *where, "einops.repeat"))
            return t
        pairs: list[tuple[Any, str]] = []
        absorbed = False
        for group in (left + right).split("(")[1:]:
            axes = group.split(")")[0].split()
            if len(axes) < 2:
                continue
            pairs += [(kwargs[a], COUNT) for a in axes[:1] if a in kwargs]
            pairs += [(kwargs[a], PER_HEAD) for a in axes[1:] if a in kwargs]
            absorbed = absorbed or (axes[0] not in kwargs and any(a in kwargs for a in axes[1:]))
        self.shape(t, _uses(pairs), "reshape", where, node, absorbed)
        if "(" in left:
            return t.with_flags((HEADS,), (BCAST, NORMED))
        if "(" in right:
            return t.with_flags((), (HEADS, BCAST, NORMED))
        return t.with_flags((), (NORMED,))
