"""Reads sub-module sources for the context-parallel plan: position-embedding outputs and the
attention processors of a block (do they already run context-parallel, and for which keys?)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from ..astutil import (
    callee_name,
    declared_params,
    walk_local,
)
from ..parallel_input import ParallelContext
from .attention_facts import AttentionFacts
from .attention_modules import attention_facts
from .axis_inference import return_axes
from .flow import ModuleCall
from .rank_inference import return_ranks


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
        ranks = return_ranks(func, owner)
        outputs = len(ranks)
        if outputs == 0:
            continue
        axes = return_axes(func, owner, positions=_position_params(ctx, call, func))
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


_CONVERSIONS = ("to", "long", "int", "float", "contiguous", "clone", "detach")


def _position_params(
    ctx: ParallelContext, call: ModuleCall, func: ast.FunctionDef
) -> frozenset[str]:
    """The parameters of the position module's `forward` this call hands a 1-D position vector:
    `torch.arange(n)`, inline or through a local forward assigns before the call."""
    params = declared_params(func)
    bound = {params[i]: arg for i, arg in enumerate(call.args) if i < len(params)}
    bound.update(call.keywords)
    return frozenset(
        name for name, arg in bound.items() if _is_position_vector(ctx, arg, call.line, 0)
    )


def _is_position_vector(ctx: ParallelContext, expr: ast.expr, line: int, depth: int) -> bool:
    if depth > 8 or ctx.forward is None:
        return False
    if isinstance(expr, ast.Call):
        if callee_name(expr) == "arange":
            return True
        func = expr.func
        return (
            isinstance(func, ast.Attribute)
            and func.attr in _CONVERSIONS
            and _is_position_vector(ctx, func.value, line, depth + 1)
        )
    if not isinstance(expr, ast.Name):
        return False
    assigns = [
        node
        for node in walk_local(ctx.forward)
        if isinstance(node, ast.Assign)
        and node.lineno < line
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id == expr.id
    ]
    if not assigns:
        return False
    last = max(assigns, key=lambda n: n.lineno)  # the value the call sees
    return _is_position_vector(ctx, last.value, last.lineno, depth + 1)


def _called_method(ctx: ParallelContext, call: ModuleCall) -> tuple[ast.FunctionDef, Any] | None:
    """The method `self.<attr>(...)` runs: the module class's `forward`, or `__call__` of a plain
    callable class (not an nn.Module); None when the class is not read."""
    if call.constructor is None:
        return None
    ref = ctx.resolver.resolve_class(call.constructor_source or ctx.source, call.constructor)
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
    params = declared_params(func)
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


__all__ = [
    "AttentionFacts",
    "PositionOutputs",
    "attention_facts",
    "declared_position_axes",
    "measures_length_of",
    "position_output_dims",
]
