"""Reads sub-module sources for the context-parallel plan: position-embedding outputs and the
attention processors of a block (do they already run context-parallel, and for which keys?)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from ..astutil import (
    call_name,
    callee_name,
    names_read,
    positional_params,
    self_attr,
    short_text,
    walk_local,
)
from ..model import Evidence
from ..parallel_input import ParallelContext
from ..sources import ClassRef
from .flow import ModuleCall
from .result import SdpaRoute

_RESHAPES = ("view", "reshape", "expand", "repeat")
_ATTENTION_KERNELS = (
    "scaled_dot_product_attention",
    "flash_attn_func",
    "dispatch_attention_fn",
    "_dispatch_attention_fn",
    "memory_efficient_attention",
)


@dataclass(frozen=True)
class PositionOutputs:
    """What a position module's `forward` returns: per returned tensor the sequence axis and the
    rank (None where not inferred), and how the axis was read (or why it could not be)."""

    dims: tuple[tuple[int | None, int | None], ...]
    how: str
    module_class: str = ""  # the class whose `forward` was read

    @property
    def count(self) -> int:
        return len(self.dims)

    @property
    def known(self) -> bool:
        return all(axis is not None for axis, _ in self.dims)


def position_output_dims(
    ctx: ParallelContext, calls: list[ModuleCall]
) -> dict[str, PositionOutputs]:
    """attr -> the sequence axis and rank of each returned tensor, read from the module's
    `forward`: from how the tensor is built (a slice to a length `[:n]`, `arange` over a length,
    `outer(positions, freqs)`, cached tables sliced to the length), else from an explicit reshape's
    rank (`(S, D)` tables carry no batch axis: 0; `(B, S, ...)`: 1). Never a default: an axis not
    inferred stays None and the split is refused."""
    out: dict[str, PositionOutputs] = {}
    for call in calls:
        found = _called_method(ctx, call)
        if found is None:
            continue
        func, owner = found[0], found[1].node
        ranks = _return_ranks(func, owner)
        outputs = len(ranks)
        if outputs == 0:
            continue
        axes = _return_axes(func, owner)
        dims: list[tuple[int | None, int | None]] = []
        hows: list[str] = []
        for index in range(outputs):
            axis, how = axes[index] if index < len(axes) else (None, "")
            rank = ranks[index]
            if axis is None and rank is not None:
                axis, how = (0 if rank == 2 else 1), f"rank {rank} from a reshape"
            dims.append((axis, rank))
            hows.append(how or "no slice to a length, `arange` or reshape found")
        # outputs of one module on the same axis share the rank one of them shows (the previous
        # reading: the first returned tensor's rank for all)
        ranks_seen = {rank for _, rank in dims if rank is not None}
        if len(ranks_seen) == 1 and len({axis for axis, _ in dims}) == 1:
            dims = [(axis, next(iter(ranks_seen))) for axis, _ in dims]
        out[call.attr] = PositionOutputs(
            tuple(dims), "; ".join(dict.fromkeys(hows)), call.constructor
        )
    return out


def _called_method(ctx: ParallelContext, call: ModuleCall) -> tuple[ast.FunctionDef, Any] | None:
    """The method `self.<attr>(...)` runs: the module class's `forward`, or `__call__` of a plain
    callable class (not an nn.Module); None when the class is not read."""
    if call.constructor is None:
        return None
    ref = ctx.resolver.resolve_class(ctx.source, call.constructor)
    if ref.node is None:
        return None
    return ctx.resolver.find_method(ref, "forward") or ctx.resolver.find_method(ref, "__call__")


def measures_length_of(ctx: ParallelContext, call: ModuleCall, names: set[str]) -> str | None:
    """The first of `names` the position module reads a length of (`x.shape[1]`, `x.size(-2)`,
    `b, s, _ = x.shape`, `len(x)`): the parameter it is bound to in the module's `forward`. A
    module that only reads the batch size, device or dtype of the tensor (`x.size(0)`,
    `x.device`) does not count. None when no such read (or the module's source is not read)."""
    found = _called_method(ctx, call)
    if found is None:
        return None
    func = found[0]
    params = positional_params(func)
    bound: dict[str, str] = {}
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Name) and arg.id in names and index < len(params):
            bound[params[index]] = arg.id
    for key, arg in call.keywords.items():
        if isinstance(arg, ast.Name) and arg.id in names:
            bound[key] = arg.id
    for node in walk_local(func):
        param = _length_read(node)
        if param in bound:
            return bound[param]
    return None


def _length_read(node: ast.AST) -> str | None:
    """The name whose non-batch length `node` reads, if it reads one."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
        attr = node.value
        if attr.attr == "shape" and isinstance(attr.value, ast.Name):
            index = node.slice
            if isinstance(index, ast.Constant) and index.value == 0:
                return None
            return attr.value.id
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "size"
        and isinstance(node.func.value, ast.Name)
    ):
        if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == 0:
            return None
        return node.func.value.id
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "len"
        and node.args
        and isinstance(node.args[0], ast.Name)
    ):
        return node.args[0].id
    if (
        isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "shape"
        and isinstance(node.value.value, ast.Name)
        and any(isinstance(t, ast.Tuple) and len(t.elts) > 1 for t in node.targets)
    ):
        return node.value.value.id
    return None


def declared_position_axes(
    inferred: dict[str, PositionOutputs], shipped: dict[str, Any]
) -> dict[str, PositionOutputs]:
    """Fill the axes not inferred from how a position module's outputs are built with the ones
    the class's own `_cp_plan` declares for that module's outputs, or for another module of the
    same class (the same `forward`, so the same layout): its authors' statement of the layout,
    e.g. batch-first tables built from input coordinates. Never a default."""
    declared: dict[str, tuple[str, dict[str, Any]]] = {}
    for attr, info in inferred.items():
        specs = shipped.get(attr)
        if isinstance(specs, dict) and info.module_class:
            declared.setdefault(info.module_class, (attr, specs))
    out = dict(inferred)
    for attr, info in inferred.items():
        if info.known or info.module_class not in declared:
            continue
        source, specs = declared[info.module_class]
        dims = list(info.dims)
        for index, (axis, rank) in enumerate(dims):
            spec = specs.get(str(index))
            if axis is not None or not isinstance(spec, dict):
                continue
            split_dim, ndim = spec.get("split_dim"), spec.get("expected_dims")
            if isinstance(split_dim, int) and spec.get("split_output") is True:
                dims[index] = (split_dim, ndim if isinstance(ndim, int) else rank)
        how = f"axis as the class's `_cp_plan` declares for `{source}` ({info.module_class})"
        out[attr] = PositionOutputs(tuple(dims), how, info.module_class)
    return out


_POINTWISE = (
    "to",
    "float",
    "double",
    "half",
    "bfloat16",
    "contiguous",
    "type_as",
    "cos",
    "sin",
    "exp",
    "clone",
    "detach",
    "cpu",
    "cuda",
    "real",
    "imag",
    "polar",
)


def _return_axes(
    func: ast.FunctionDef, owner: ast.ClassDef | None, depth: int = 0
) -> list[tuple[int | None, str]]:
    """(sequence axis, how it was read) of each value the function returns."""
    axes = _Axes(func, owner, depth)
    for node in walk_local(func):
        if isinstance(node, ast.Return) and node.value is not None:
            elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            return [axes.axis(e, 0) for e in elts]
    return []


_ID_VECTORS = ("tensor", "as_tensor", "clone", "long", "int", "to")


def _is_torch(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "torch"


def _is_full_slice(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Slice)
        and node.lower is None
        and node.upper is None
        and node.step is None
    )


class _Axes:
    """Follows a returned tensor back to where its sequence axis is made: a slice to a length
    (`t[:n]`, `t[:, :n]`), `arange(n)` (axis 0), `outer(positions, freqs)` (the positions' axis);
    through element-wise ops, `cat` along another axis, local (also tuple-unpacked) assignments and
    helper methods of the same class."""

    def __init__(self, func: ast.FunctionDef, owner: ast.ClassDef | None, depth: int) -> None:
        self.owner = owner
        self.depth = depth
        self.assigns: dict[str, tuple[ast.expr, int | None]] = {}
        # lengths: forward parameters and locals read from a shape (`n = x.shape[1]`, `len(x)`)
        self.params = set(positional_params(func)) | {a.arg for a in func.args.kwonlyargs}
        self.lengths = set(self.params)
        # list name -> the values appended to it (`freqs.append(freq)`)
        self.appends: dict[str, list[ast.expr]] = {}
        # lists filled with `.extend(...)` (per-token position lists built in Python)
        self.extended = {
            node.func.value.id
            for node in walk_local(func)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "extend"
            and isinstance(node.func.value, ast.Name)
        }
        for node in walk_local(func):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "append"
                and isinstance(node.func.value, ast.Name)
                and len(node.args) == 1
            ):
                self.appends.setdefault(node.func.value.id, []).append(node.args[0])
        nodes = sorted(
            (n for n in walk_local(func) if isinstance(n, ast.Assign)), key=lambda n: n.lineno
        )
        for node in nodes:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.assigns.setdefault(target.id, (node.value, None))
                elif isinstance(target, ast.Tuple):
                    for i, elt in enumerate(target.elts):
                        if isinstance(elt, ast.Name):
                            self.assigns.setdefault(elt.id, (node.value, i))
        for name, (value, index) in list(self.assigns.items()):
            if index is None and _is_shape_read(value):
                self.lengths.add(name)

    def axis(
        self, expr: ast.expr, depth: int, element: int | None = None
    ) -> tuple[int | None, str]:
        none: tuple[int | None, str] = (None, "")
        if depth > 12:
            return none
        if isinstance(expr, ast.Tuple) and element is not None and element < len(expr.elts):
            return self.axis(expr.elts[element], depth + 1)
        if isinstance(expr, ast.Subscript):
            picked = _tuple_index(expr)
            if picked is not None and element is None:
                return self.axis(expr.value, depth + 1, picked)  # `f[0]` of a `(cos, sin)`
            if element is not None:
                return none
            if not isinstance(expr.slice, ast.Tuple | ast.Slice) and any(
                isinstance(n, ast.Call) and callee_name(n) == "arange" for n in ast.walk(expr.slice)
            ):  # `table[offset + arange(n)]`: rows picked by a position vector
                return 0, f"rows picked by positions (`{short_text(expr)}`)"
            if self._is_token_ids(expr.slice, depth + 1):  # `table[ids[:, k]]`
                return 0, f"rows gathered by per-token ids (`{short_text(expr)}`)"
            found = _length_slice_axis(expr.slice)
            if found is not None:
                return found, f"sliced to a length on axis {found} (`{short_text(expr)}`)"
            kept = _kept_axes(expr.slice)  # `ys[:, None]`: new unit axes around the old ones
            if kept is not None:
                inner, how = self.axis(expr.value, depth + 1)
                if inner is not None and inner < len(kept):
                    return kept[inner], how
            return none
        if isinstance(expr, ast.BinOp) and isinstance(
            expr.op, ast.Mult | ast.Add | ast.Sub | ast.Div
        ):  # `positions[:, None] * self.freqs`: the other side adds no leading axis
            for side, other in ((expr.left, expr.right), (expr.right, expr.left)):
                if _no_leading_axes(other):
                    found, how = self.axis(side, depth + 1, element)
                    if found is not None:
                        return found, how
            return none
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            value, index = self.assigns[expr.id]
            return self.axis(value, depth + 1, index)
        if isinstance(expr, ast.Name) and expr.id in self.appends:
            values = self.appends[expr.id]
            if element is not None and element < len(values):  # `freqs[i]` of appended values
                return self.axis(values[element], depth + 1)
            return none
        if not isinstance(expr, ast.Call):
            return none
        name = callee_name(expr)
        sized = self._length_axis(expr, name)
        if sized is not None:
            return sized, f"`{short_text(expr)}` has a sequence length on axis {sized}"
        if _is_frequency_fn(name) and any(
            self._is_positions(a, depth + 1)
            for a in [*expr.args, *(k.value for k in expr.keywords)]
        ):
            return 0, f"`{name}` of a flattened position vector (positions on axis 0)"
        if name == "arange" and element is None:
            return 0, "built by `arange` over a length"
        if element is None and self._is_positions(expr, depth + 1):
            return 0, f"a flattened position vector (`{short_text(expr)}`)"
        if name == "outer" and len(expr.args) == 2:
            for i, arg in enumerate(expr.args):
                if self._from_arange(arg, depth + 1):
                    return i, f"`outer` of positions (`arange`) on axis {i}"
            return none
        if name in ("cat", "concat") and expr.args:
            first = expr.args[0]
            if isinstance(first, ast.ListComp):
                inner, how = self._comprehension_axis(first, depth + 1)
                if inner is not None and _cat_dim(expr) != inner:
                    return inner, how
            if isinstance(first, ast.List | ast.Tuple) and first.elts:
                inner, how = self.axis(first.elts[0], depth + 1)
                if inner is not None and _cat_dim(expr) != inner:
                    return inner, how
            if isinstance(first, ast.Name) and self.appends.get(first.id):
                inner, how = self.axis(self.appends[first.id][0], depth + 1)
                if inner is not None and _cat_dim(expr) != inner:
                    return inner, how
            return none
        method = self_attr(expr.func)
        if method and self.owner is not None and self.depth < 2:
            helper = next(
                (f for f in self.owner.body if isinstance(f, ast.FunctionDef) and f.name == method),
                None,
            )
            if helper is not None:
                axes = _return_axes(helper, self.owner, self.depth + 1)
                index = element or 0
                return axes[index] if index < len(axes) else none
            return none
        if name in _POINTWISE:
            if isinstance(expr.func, ast.Attribute) and not (
                isinstance(expr.func.value, ast.Name) and expr.func.value.id == "torch"
            ):
                return self.axis(expr.func.value, depth + 1, element)
            if expr.args:
                return self.axis(expr.args[0], depth + 1, element)
        return none

    def _is_token_ids(self, expr: ast.expr, depth: int) -> bool:
        """One column of a per-token id table the caller passes (`ids[:, k]`, through local
        names): a 1-D vector with one entry per token, so rows picked by it follow the tokens."""
        if depth > 12:
            return False
        if isinstance(expr, ast.Name) and expr.id in self.extended:
            return True  # filled per token with `.extend(...)` (then made a tensor)
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            value, index = self.assigns[expr.id]
            return index is None and self._is_token_ids(value, depth + 1)
        if isinstance(expr, ast.Call) and callee_name(expr) in _ID_VECTORS:
            # `torch.tensor(frame_index, dtype=torch.long)` of a list forward fills per token,
            # `ids.clone()`, `ids.long()`
            inner = expr.args[0] if expr.args else None
            if isinstance(expr.func, ast.Attribute) and not _is_torch(expr.func.value):
                inner = expr.func.value
            return inner is not None and (
                self._is_token_ids(inner, depth + 1)
                or (isinstance(inner, ast.Name) and inner.id in self.extended)
            )
        return (
            isinstance(expr, ast.Subscript)
            and isinstance(expr.value, ast.Name)
            and expr.value.id in self.params
            and isinstance(expr.slice, ast.Tuple)
            and len(expr.slice.elts) == 2
            and _is_full_slice(expr.slice.elts[0])
            and not isinstance(expr.slice.elts[1], ast.Slice)
        )

    def _comprehension_axis(self, comp: ast.ListComp, depth: int) -> tuple[int | None, str]:
        """`[f[0] for f in freqs]`: the element's axis, `f` standing for a value of `freqs`."""
        if len(comp.generators) != 1 or not isinstance(comp.generators[0].target, ast.Name):
            return None, ""
        gen = comp.generators[0]
        assert isinstance(gen.target, ast.Name)
        source = gen.iter
        values: list[ast.expr] = []
        if isinstance(source, ast.Name) and source.id in self.appends:
            values = self.appends[source.id]
        elif isinstance(source, ast.List | ast.Tuple):
            values = list(source.elts)
        if not values:
            return None, ""
        saved = self.assigns.get(gen.target.id)
        self.assigns[gen.target.id] = (values[0], None)
        try:
            return self.axis(comp.elt, depth + 1)
        finally:
            if saved is None:
                del self.assigns[gen.target.id]
            else:
                self.assigns[gen.target.id] = saved

    def _length_axis(self, call: ast.Call, name: str) -> int | None:
        """`zeros(1, n, d)`: the one axis whose size is a sequence length (a forward parameter or
        a length read from a shape); None when there is none or more than one."""
        if name not in _FACTORIES:
            return None
        sizes = list(call.args)
        if len(sizes) == 1 and isinstance(sizes[0], ast.Tuple | ast.List):
            sizes = list(sizes[0].elts)
        if name == "full" and len(call.args) >= 2 and not isinstance(call.args[0], ast.Tuple):
            return None  # `full(size, value)` with a size that is not spelled out
        hits = [
            i
            for i, size in enumerate(sizes)
            if isinstance(size, ast.Name) and size.id in self.lengths
        ]
        return hits[0] if len(hits) == 1 and len(sizes) > 1 else None

    def _is_positions(self, expr: ast.expr, depth: int) -> bool:
        """A 1-D vector of positions: `arange`, or a grid flattened (`g.reshape(-1)`,
        `g.flatten()`)."""
        if depth > 12:
            return False
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            return self._is_positions(self.assigns[expr.id][0], depth + 1)
        if not isinstance(expr, ast.Call):
            return False
        if self._from_arange(expr, depth):
            return True
        if not isinstance(expr.func, ast.Attribute):
            return False
        if expr.func.attr == "flatten":
            return not expr.args
        return (
            expr.func.attr in ("reshape", "view")
            and len(expr.args) == 1
            and _is_minus_one(expr.args[0])
        )

    def _from_arange(self, expr: ast.expr, depth: int) -> bool:
        if depth > 12:
            return False
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            return self._from_arange(self.assigns[expr.id][0], depth + 1)
        if isinstance(expr, ast.Call):
            if callee_name(expr) == "arange":
                return True
            if isinstance(expr.func, ast.Attribute) and expr.func.attr in _POINTWISE:
                return self._from_arange(expr.func.value, depth + 1)
        return False


_FACTORIES = ("zeros", "ones", "empty", "randn", "rand", "full")


def _kept_axes(index: ast.expr) -> list[int] | None:
    """`[:, None]` -> [0]: where each axis of the value lands when a subscript only adds unit
    axes (`None`) around full slices; None for any other subscript."""
    parts = list(index.elts) if isinstance(index, ast.Tuple) else [index]
    kept: list[int] = []
    for i, part in enumerate(parts):
        if isinstance(part, ast.Constant) and part.value is None:
            continue
        if not _is_full_slice(part):
            return None
        kept.append(i)
    return kept if len(kept) < len(parts) else None


def _no_leading_axes(expr: ast.expr) -> bool:
    """An operand that cannot put axes in front of the other side's: a number, or an attribute
    of `self` (a frequency buffer or parameter, one axis of features)."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, int | float)
    return self_attr(expr) is not None


def _is_frequency_fn(name: str) -> bool:
    """A function that turns positions into frequencies (`get_1d_rotary_pos_embed`, `rope(...)`)."""
    lowered = name.lower()
    return any(w in lowered for w in ("rotary", "rope", "freq", "pos_embed", "sincos"))


def _is_shape_read(value: ast.expr) -> bool:
    """`x.shape[1]`, `x.size(1)`, `len(x)`: a length read from a tensor."""
    if isinstance(value, ast.Subscript):
        return isinstance(value.value, ast.Attribute) and value.value.attr == "shape"
    if isinstance(value, ast.Call):
        name = call_name(value)
        return name == "len" or (
            isinstance(value.func, ast.Attribute) and value.func.attr == "size"
        )
    return False


def _is_minus_one(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and node.operand.value == 1
    )


def _tuple_index(expr: ast.Subscript) -> int | None:
    """`f[0]`: a non-negative integer index (an element of a tuple-valued result)."""
    index = expr.slice
    if isinstance(index, ast.Constant) and isinstance(index.value, int):
        return index.value if index.value >= 0 else None
    return None


def _length_slice_axis(index: ast.expr) -> int | None:
    """The axis a subscript cuts to a length or a window of one (`[:n]` -> 0, `[:, :n]` -> 1,
    `[a : a + n, ...]` -> 0); None when there is none, or when `None`, an integer index or a `...`
    before it make the axis ambiguous."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    for i, part in enumerate(parts):
        if not isinstance(part, ast.Slice):
            return None  # `None` / `...` / an integer index: the axis is not the position
        if (
            part.step is None
            and part.upper is not None
            and not isinstance(part.upper, ast.Constant)
        ):
            rest = parts[i + 1 :]
            if all(
                (isinstance(p, ast.Slice) and p.lower is None and p.upper is None)
                or (isinstance(p, ast.Constant) and p.value is Ellipsis)
                for p in rest
            ):
                return i
            return None
    return None


def _cat_dim(call: ast.Call) -> int | None:
    for kw in call.keywords:
        if kw.arg in ("dim", "axis") and isinstance(kw.value, ast.Constant):
            return kw.value.value if isinstance(kw.value.value, int) else None
        if kw.arg in ("dim", "axis") and isinstance(kw.value, ast.UnaryOp):
            return -1
    if len(call.args) > 1 and isinstance(call.args[1], ast.Constant):
        value = call.args[1].value
        return value if isinstance(value, int) else None
    return 0


def _return_ranks(func: ast.FunctionDef, owner: ast.ClassDef | None) -> list[int | None]:
    """The rank of each value the function returns (None where no reshape gives it)."""
    shape = _Shapes(func, owner, 0)
    for node in walk_local(func):
        if isinstance(node, ast.Return) and node.value is not None:
            elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            return [shape.ndim(e, 0) for e in elts]
    return []


def _return_shape(
    func: ast.FunctionDef, owner: ast.ClassDef | None = None, depth: int = 0
) -> tuple[int | None, int]:
    """(dims of the first returned tensor, number of returned values) of a position module."""
    shape = _Shapes(func, owner, depth)
    for node in walk_local(func):
        if isinstance(node, ast.Return) and node.value is not None:
            elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            return shape.ndim(elts[0], 0), len(elts)
    return None, 0


class _Shapes:
    """Follows a returned value back to its outermost reshape: through local assignments, lists
    filled with `append` and concatenated, and helper methods of the same class."""

    def __init__(self, func: ast.FunctionDef, owner: ast.ClassDef | None, depth: int) -> None:
        self.owner = owner
        self.depth = depth
        self.assigns: dict[str, ast.expr] = {}
        self.appended: dict[str, ast.expr] = {}
        nodes = sorted(
            (n for n in walk_local(func) if isinstance(n, ast.Assign | ast.Expr)),
            key=lambda n: n.lineno,
        )
        for node in nodes:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.assigns[target.id] = node.value
            elif (
                isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "append"
                and isinstance(node.value.func.value, ast.Name)
                and node.value.args
            ):
                self.appended.setdefault(node.value.func.value.id, node.value.args[0])

    def ndim(self, expr: ast.expr, depth: int) -> int | None:
        if depth > 10:
            return None
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            attr = expr.func.attr
            if attr in _RESHAPES and expr.args and attr != "repeat":
                if len(expr.args) == 1 and isinstance(expr.args[0], ast.Tuple):
                    return len(expr.args[0].elts)
                if not any(isinstance(a, ast.Starred) for a in expr.args):
                    return len(expr.args)
                return None
            if attr == "unsqueeze":
                inner = self.ndim(expr.func.value, depth + 1)
                return inner + 1 if inner is not None else None
            if attr in ("flatten", "squeeze", "stack"):
                return None
            if attr in ("cat", "concat") and expr.args:
                first = expr.args[0]
                if isinstance(first, ast.List | ast.Tuple) and first.elts:
                    return self.ndim(first.elts[0], depth + 1)
                if isinstance(first, ast.Name) and first.id in self.appended:
                    return self.ndim(self.appended[first.id], depth + 1)
                return None
            method = self_attr(expr.func)
            if method and self.owner is not None and self.depth < 2:
                helper = next(
                    (
                        f
                        for f in self.owner.body
                        if isinstance(f, ast.FunctionDef) and f.name == method
                    ),
                    None,
                )
                if helper is not None:
                    return _return_shape(helper, self.owner, self.depth + 1)[0]
            return self.ndim(expr.func.value, depth + 1)  # .float(), .to(...), .contiguous()
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            value = self.assigns[expr.id]
            if value is not expr:
                return self.ndim(value, depth + 1)
        return None


@dataclass
class AttentionFacts:
    cross_attention_cp: bool | None = None
    needs_processor_patch: list[Evidence] = field(default_factory=list)
    third_party_attention: list[Evidence] = field(default_factory=list)
    gqa: list[Evidence] = field(default_factory=list)
    masks: list[Evidence] = field(default_factory=list)
    # the joint key sequence the processor builds (`key = torch.cat([key, encoder_key], dim=1)`):
    # which stream comes first, "hidden" or "encoder", and where it was read
    joint_order: tuple[str, str] | None = None
    joint_order_at: Evidence | None = None
    # every join of the two streams seen (processors and the block's own forward); the order is
    # kept only when they all agree
    joins: list[tuple[tuple[str, str], Evidence]] = field(default_factory=list)
    # processors that compute attention themselves (linear attention: matmuls of keys and
    # values) with no attention kernel a context-parallel backend could run
    own_attention: list[Evidence] = field(default_factory=list)
    # the classes whose own method calls SDPA (one entry per class)
    sdpa_routes: list[SdpaRoute] = field(default_factory=list)
    # plain attention modules whose keys come from another input than the queries
    local_cross: list[Evidence] = field(default_factory=list)


def attention_facts(ctx: ParallelContext, block: ClassRef) -> AttentionFacts:
    """Look at the attention modules a block builds and the processors they run."""
    facts = AttentionFacts()
    init = ctx.resolver.find_method(block, "__init__")
    if init is None:
        return facts
    func, owner = init
    source = owner.source or ctx.source
    for node in walk_local(func):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        attr = next((self_attr(t) for t in node.targets if self_attr(t)), None)
        if attr is None:
            continue
        cls = ctx.resolver.resolve_class(source, call_name(node.value))
        if cls.node is None:
            continue
        if not _is_attention(ctx, cls):
            if _calls_attention_kernel(cls):  # a plain nn.Module computing attention itself
                _read_processor(ctx, cls, attr, facts, method="forward")
                facts.third_party_attention.append(_third_party(attr, cls, source, node))
            else:
                _hand_attention(ctx, cls, attr, facts)
            continue
        processor = _processor_class(ctx, node.value, cls, source)
        if processor is None or processor.node is None:
            continue
        _read_processor(ctx, processor, attr, facts)
        if not ctx.resolver.derives_from(cls, "AttentionModuleMixin") and not any(
            a.name in ("Attention", "AttentionModuleMixin", "MochiAttention")
            for a in ctx.resolver.iter_mro(cls)
        ):
            facts.third_party_attention.append(
                Evidence(
                    f"`{attr}` is {cls.name}, not a diffusers Attention: cache-dit will not "
                    "hand it the parallel config; the planner must set "
                    "`processor._parallel_config`",
                    str(source.path),
                    node.lineno,
                )
            )
    forward = ctx.resolver.find_method(block, "forward")
    if forward is not None and (forward[1].source or ctx.source) is not None:
        path = str((forward[1].source or ctx.source).path)
        for order, line in _stream_joins(forward[0]):
            where = Evidence(
                f"{block.name} joins the streams as [{order[0]}, {order[1]}]", path, line
            )
            facts.joins.append((order, where))
    orders = {order for order, _ in facts.joins}
    if len(orders) == 1:
        facts.joint_order = next(iter(orders))
        facts.joint_order_at = facts.joins[0][1]
    return facts


def _calls_attention_kernel(cls: ClassRef) -> bool:
    forward = next(
        (
            s
            for s in cls.node.body
            if isinstance(s, ast.FunctionDef)  # type: ignore[union-attr]
            and s.name == "forward"
        ),
        None,
    )
    aliases = _sdpa_aliases(cls.source.tree) if cls.source is not None else set()
    return forward is not None and any(
        isinstance(n, ast.Call)
        and (callee_name(n) in _ATTENTION_KERNELS or _calls_sdpa(n, aliases))
        for n in walk_local(forward)
    )


def _third_party(attr: str, cls: ClassRef, source, node: ast.stmt) -> Evidence:
    return Evidence(
        f"`{attr}` is {cls.name}, not a diffusers Attention: cache-dit will not hand it the "
        "parallel config; the planner must set it and route attention through cache-dit's "
        "_dispatch_attention_fn",
        str(source.path),
        node.lineno,
    )


def _is_attention(ctx: ParallelContext, cls: ClassRef) -> bool:
    if "processor" in {
        a.arg
        for f in cls.node.body
        if isinstance(f, ast.FunctionDef)  # type: ignore[union-attr]
        and f.name == "__init__"
        for a in f.args.args
    }:
        return True
    return any(a.name in ("Attention", "AttentionModuleMixin") for a in ctx.resolver.iter_mro(cls))


def _processor_class(
    ctx: ParallelContext, call: ast.Call, cls: ClassRef, source
) -> ClassRef | None:
    for kw in call.keywords:
        if kw.arg == "processor" and isinstance(kw.value, ast.Call):
            return ctx.resolver.resolve_class(source, call_name(kw.value))
    for ancestor in ctx.resolver.iter_mro(cls):
        if ancestor.node is None or ancestor.source is None:
            continue
        for stmt in ancestor.node.body:
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_default_processor_cls" for t in stmt.targets
            ):
                return ctx.resolver.resolve_class(ancestor.source, ast.unparse(stmt.value))
        init = next(
            (
                s
                for s in ancestor.node.body
                if isinstance(s, ast.FunctionDef) and s.name == "__init__"
            ),
            None,
        )
        if init is not None:
            for node in walk_local(init):
                if isinstance(node, ast.IfExp) and isinstance(node.body, ast.Call):
                    name = call_name(node.body)
                    if "Processor" in name:
                        return ctx.resolver.resolve_class(ancestor.source, name)
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Call)
                    and any(isinstance(t, ast.Name) and t.id == "processor" for t in node.targets)
                ):
                    return ctx.resolver.resolve_class(ancestor.source, call_name(node.value))
    return None


def _read_processor(
    ctx: ParallelContext,
    processor: ClassRef,
    attr: str,
    facts: AttentionFacts,
    method: str = "__call__",
) -> None:
    assert processor.node is not None
    call_method = next(
        (s for s in processor.node.body if isinstance(s, ast.FunctionDef) and s.name == method),
        None,
    )
    if call_method is None or processor.source is None:
        return
    path = str(processor.source.path)
    dispatched = False
    sdpa_aliases = _sdpa_aliases(processor.source.tree)
    for node in walk_local(call_method):
        if not isinstance(node, ast.Call):
            continue
        name = callee_name(node)
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if "parallel_config" in keywords:
            dispatched = True
            value = keywords["parallel_config"]
            if isinstance(value, ast.IfExp) and "encoder_hidden_states" in ast.unparse(value.test):
                if facts.cross_attention_cp is None:
                    facts.cross_attention_cp = False
            elif self_attr(value) or isinstance(value, ast.Attribute):
                facts.cross_attention_cp = True
        if "enable_gqa" in keywords and not (
            isinstance(keywords["enable_gqa"], ast.Constant)
            and keywords["enable_gqa"].value is False
        ):
            facts.gqa.append(
                Evidence(
                    f"`{attr}` attention runs with enable_gqa: Ulysses needs K/V "
                    "repeated to all heads or a cp_gqa_strategy",
                    path,
                    node.lineno,
                )
            )
        if _calls_sdpa(node, sdpa_aliases) and not dispatched:
            other = _keys_from_another_input(call_method, node) if method == "forward" else None
            if other is not None:  # cross-attention: this rank's queries, the whole `other`
                facts.local_cross.append(
                    Evidence(
                        f"{processor.name} attends to `{other}` (keys and values from another "
                        "input than the queries): it stays local under context parallelism",
                        path,
                        node.lineno,
                    )
                )
                continue
            where = Evidence(
                f"{processor.name} calls F.scaled_dot_product_attention directly: patch it to "
                "cache-dit's _dispatch_attention_fn so attention runs the all-to-all",
                path,
                node.lineno,
            )
            facts.needs_processor_patch.append(where)
            _note_sdpa_route(facts, processor.name, method, node, where)
        if name == "prepare_attention_mask" or (
            name in ("cat", "concat", "pad", "ones", "ones_like", "full")
            and any("mask" in n.lower() for n in names_read(node))
        ):
            facts.masks.append(
                Evidence(
                    f"{processor.name} builds or pads the attention mask from the lengths it sees "
                    "(`" + short_text(node) + "`); under CP keys are gathered to full length, so "
                    "patch it to build the mask for the gathered sequence",
                    path,
                    node.lineno,
                )
            )
    kernels = any(
        isinstance(n, ast.Call) and callee_name(n) in _ATTENTION_KERNELS
        for n in walk_local(call_method)
    )
    if not dispatched and not kernels:
        own = _own_attention_product(call_method)
        if own is not None:
            facts.own_attention.append(
                Evidence(
                    f"`{attr}` ({processor.name}) computes attention itself "
                    f"(`{short_text(own)}`), not through an attention kernel: under context "
                    "parallelism it would attend over this rank's tokens only",
                    path,
                    own.lineno,
                )
            )
    for order, line in _stream_joins(call_method):
        where = Evidence(
            f"{processor.name} joins the streams as [{order[0]}, {order[1]}]", path, line
        )
        facts.joins.append((order, where))
    if facts.needs_processor_patch and facts.cross_attention_cp is None:
        facts.cross_attention_cp = True


def _sdpa_aliases(tree: ast.Module) -> set[str]:
    """Bare names a module binds to SDPA (`from torch.nn.functional import
    scaled_dot_product_attention [as sdpa]`)."""
    return {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == "torch.nn.functional"
        for alias in node.names
        if alias.name == "scaled_dot_product_attention"
    }


def _calls_sdpa(call: ast.Call, aliases: set[str]) -> bool:
    if isinstance(call.func, ast.Name):
        return call.func.id in aliases or call.func.id == "scaled_dot_product_attention"
    return callee_name(call) == "scaled_dot_product_attention"


def _keys_from_another_input(func: ast.FunctionDef, call: ast.Call) -> str | None:
    """The parameter of `func` the keys of `call` (an SDPA call) derive from when the queries do
    not (cross-attention in a plain module's forward); None for self-attention or when unsure."""
    args = {k.arg: k.value for k in call.keywords if k.arg}
    query = call.args[0] if call.args else args.get("query")
    key = call.args[1] if len(call.args) > 1 else args.get("key")
    if query is None or key is None:
        return None
    params = [a.arg for a in func.args.args[1:] + func.args.kwonlyargs]
    sources: dict[str, set[str]] = {}
    for node in walk_local(func):
        if isinstance(node, ast.Assign):
            read = names_read(node.value)
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        sources.setdefault(name.id, set()).update(read)

    def origin(expr: ast.AST) -> set[str]:
        seen: set[str] = set()
        todo = list(names_read(expr))
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            todo += sources.get(name, ())
        return {n for n in seen if n in params}

    from_query, from_key = origin(query), origin(key)
    # keys that may also come from the queries' input (`context if context is not None else x`)
    # are self-attention on some calls: not local
    return sorted(from_key)[0] if from_query and from_key and not from_key & from_query else None


def _note_sdpa_route(
    facts: AttentionFacts, class_name: str, method: str, call: ast.Call, where: Evidence
) -> None:
    names = (call.func.id,) if isinstance(call.func, ast.Name) else ()
    owner = "processor" if method == "__call__" else "module"
    for i, route in enumerate(facts.sdpa_routes):
        if route.class_name == class_name:
            merged = tuple(dict.fromkeys(route.names + names))
            facts.sdpa_routes[i] = SdpaRoute(class_name, owner, merged, route.evidence)
            return
    facts.sdpa_routes.append(SdpaRoute(class_name, owner, names, where))


_ENCODER_WORDS = ("encoder", "text", "txt", "context", "ctx", "cond", "prompt", "caption", "added")


def _stream_joins(func: ast.FunctionDef) -> list[tuple[tuple[str, str], int]]:
    """Joins of the two token streams along the sequence: `key = torch.cat([key, encoder_key],
    dim=1)` (keys, `dim=-3` too), `x = torch.cat([txt, img], dim=1)` (streams, `dim=-2` too); each
    part is "encoder" when its name says so (`encoder_key`, `txt`, `added_k`), else "hidden". Only
    joins of one of each; masks are not streams."""
    out: list[tuple[tuple[str, str], int]] = []
    for node in walk_local(func):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if not targets:
            continue
        call = node.value
        if callee_name(call) not in ("cat", "concat") or not call.args:
            continue
        parts = call.args[0]
        if not isinstance(parts, ast.List | ast.Tuple) or len(parts.elts) != 2:
            continue
        names = [names_read(e) for e in parts.elts]
        if any(any("mask" in n.lower() for n in group) for group in names) or not all(names):
            continue
        dims = [k.value for k in call.keywords if k.arg == "dim"] + list(call.args[1:2])
        if not (dims and isinstance(dims[0], ast.Constant | ast.UnaryOp)):
            continue
        try:
            dim = ast.literal_eval(dims[0])
        except ValueError:
            continue
        keyish = any(t == "key" or t.endswith("_key") or t in ("k", "keys") for t in targets)
        if dim != 1 and dim != (-3 if keyish else -2):
            continue
        kinds = tuple(
            "encoder" if any(w in n.lower() for n in group for w in _ENCODER_WORDS) else "hidden"
            for group in names
        )
        if sorted(kinds) == ["encoder", "hidden"]:
            out.append(((kinds[0], kinds[1]), node.lineno))
    return out


def _hand_attention(ctx: ParallelContext, cls: ClassRef, attr: str, facts: AttentionFacts) -> None:
    """A plain module (or the processor its `__init__` builds) multiplying keys by hand."""
    candidates: list[tuple[ClassRef, str]] = [(cls, "forward")]
    init = ctx.resolver.find_method(cls, "__init__")
    if init is not None and cls.source is not None:
        for node in walk_local(init[0]):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and any(self_attr(t) == "processor" for t in node.targets)
            ):
                candidates.append(
                    (ctx.resolver.resolve_class(cls.source, call_name(node.value)), "__call__")
                )
    for ref, method in candidates:
        found = ctx.resolver.find_method(ref, method) if ref.node is not None else None
        if found is None:
            continue
        func, owner = found
        if any(
            isinstance(n, ast.Call) and callee_name(n) in _ATTENTION_KERNELS
            for n in walk_local(func)
        ):
            return
        own = _own_attention_product(func)
        if own is not None:
            path = str((owner.source or cls.source).path) if (owner.source or cls.source) else ""
            facts.own_attention.append(
                Evidence(
                    f"`{attr}` ({ref.name}) computes attention itself (`{short_text(own)}`), "
                    "not through an attention kernel: under context parallelism it would "
                    "attend over this rank's tokens only",
                    path,
                    own.lineno,
                )
            )
            return


def _own_attention_product(func: ast.FunctionDef) -> ast.AST | None:
    """A product of the keys with the values or queries (`torch.matmul(value, key)`,
    `q @ k.transpose(...)`, `einsum(..., k, v)`): attention computed by hand."""

    def keyish(node: ast.AST) -> bool:
        return any(n in ("key", "k", "keys") or n.endswith("_key") for n in names_read(node))

    for node in walk_local(func):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.MatMult)
            and (keyish(node.left) or keyish(node.right))
        ):
            return node
        if (
            isinstance(node, ast.Call)
            and callee_name(node)
            in (
                "matmul",
                "bmm",
                "einsum",
                "baddbmm",
            )
            and any(keyish(a) for a in node.args)
        ):
            return node
    return None
