"""Inputs of forward that reach the blocks holding the split axis in their batch, whole.

Under a split of forward's input on an axis (the frames), a block that holds that axis in its
batch (`(B F) S C`: spatial blocks) gets this rank's rows of the stream. A tensor handed to it
beside the stream must have the same rows: built by forward from this rank's sizes (the caption
and timestep repeated per frame: `repeat_interleave(f)`), or an input's own rows (a caption
mask `(B, L)` the block broadcasts as it would unsplit). A tensor whose rows forward laid out
from another input's axes alone (a per-frame timestep `(B, F)` of diffusion forcing, flattened
to `(B F)` rows by a reshape, view, flatten or rearrange) stays whole on every rank: the split
would hand the blocks rows of every frame beside this rank's frames. Where the layout names
which of the input's axes it folds into the rows right after the batch (`rearrange(t, "b f ->
(b f) ...")`, `t.flatten(0, 1)`), that input is split with the latent on that axis (a
companion: the generated module checks at each call that it has as many entries there as the
latent has frames); any other layout is refused with the statement, before anything runs.
"""

from __future__ import annotations

import ast
from typing import Any

from ..astutil import callee_name, names_in, short_text, walk
from ..model import Evidence
from ..parallel_input import ParallelContext
from .axis_atoms import AtomTrace
from .axis_regions import LOCAL, axis_kind
from .axis_size_reads import (
    DESCRIPTIONS,
    assignments,
    input_origins,
    layout_receiver,
    other_inputs,
)
from .block_binding import is_block_call


def whole_inputs_to_local_blocks(
    ctx: ParallelContext, trace: AtomTrace, atom: str, size_names: set[str]
) -> tuple[list[Evidence], tuple[tuple[str, int], ...]]:
    """(why a block holding `atom` in its batch would get an input of forward whole, the
    inputs split with the latent instead: (parameter, its axis)); both empty: none."""
    func = ctx.forward
    if func is None:
        return [], ()
    params = other_inputs(func, trace.param)
    local = {trace.param}  # grows with the names computed from it
    origins = input_origins(func, params, local, trace.shape_reads, atom, size_names)
    merged = _laid_out(func, params, origins, local)
    lists = {b.attr: b for b in ctx.block_lists}
    companions: dict[str, int] = {}
    for site in trace.sites:
        block = lists.get(site.list_attr)
        if block is None or axis_kind(site.layout, atom) != LOCAL:
            continue
        for call in (n for n in walk(func) if is_block_call(n, block)):
            assert isinstance(call, ast.Call)
            for arg in (*call.args[1:], *(k.value for k in call.keywords)):
                names = names_in(arg) & set(merged)
                if not names:
                    continue
                found = set().union(*(origins.get(n, set()) for n in names_in(arg)))
                if None in found:
                    continue  # built from this rank's share
                folds = {merged[n] for n in names}
                if None not in folds and all(companions.get(p, a) == a for p, a in folds):
                    companions.update(f for f in folds if f is not None)
                    continue
                return [_whole(ctx, arg, found | (names_in(arg) & params), site, call)], ()
    for param in companions:
        other = _other_read(func, param)
        if other is not None:
            return [
                Evidence(
                    f"`{short_text(other)}` reads forward's input `{param}` otherwise than "
                    "folding its frames into the rows: split with the latent, it would read "
                    "this rank's frames",
                    ctx.path,
                    other.lineno,
                )
            ], ()
    return [], tuple(sorted(companions.items()))


# methods that keep a tensor's layout: `t = t.float()` before the fold reads it as it is
_KEEPS = ("to", "float", "double", "half", "bfloat16", "type", "contiguous", "type_as")


def _other_read(func: ast.FunctionDef, param: str) -> ast.stmt | None:
    """The first statement reading `param` other than as the tensor a fold lays out (or a
    conversion assigned back to it: `t = t.to(x.dtype)`)."""
    folded: set[int] = set()
    for node in walk(func):
        if (
            isinstance(node, ast.Assign)
            and [_name(t) for t in node.targets] == [param]
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr in _KEEPS
            and _name(node.value.func.value) == param
        ):
            folded.add(id(node.value.func.value))
    for call in walk(func):
        if not isinstance(call, ast.Call) or _folded_axis(call) is None:
            continue
        receiver = layout_receiver(call)
        if isinstance(receiver, ast.Name) and receiver.id == param:
            folded.add(id(receiver))
    for stmt in func.body:
        for node in walk(stmt):
            loads = isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
            if loads and node.id == param and id(node) not in folded:
                return _statement(node, stmt)
    return None


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _statement(node: ast.AST, top: ast.stmt) -> ast.stmt:
    """The innermost statement of `top` holding `node`."""
    for child in walk(top):
        inside = isinstance(child, ast.stmt) and child is not top
        if inside and any(n is node for n in walk(child)):
            return _statement(node, child)
    return top


def _whole(
    ctx: ParallelContext, arg: ast.expr, found: set[str | None], site: Any, call: ast.Call
) -> Evidence:
    return Evidence(
        f"`{short_text(arg)}`, whose rows forward laid out from the axes of its input "
        f"`{sorted(n for n in found if n)[0]}`, reaches `{site.list_attr}` beside the stream "
        "whose batch holds the axis a split would cut: it stays whole on every rank (a "
        "per-frame input, such as a timestep per frame, would hand each rank every frame's "
        "rows), and the layout does not say which of its axes follows the frames",
        ctx.path,
        call.lineno,
    )


_LAYOUTS = ("flatten", "reshape", "view", "rearrange")


def _laid_out(
    func: ast.FunctionDef,
    params: set[str],
    origins: dict[str, set[str | None]],
    local: set[str],
) -> dict[str, tuple[str, int] | None]:
    """Names holding an input of forward whose axes a reshape, view, flatten or rearrange laid
    out (rows made of its other axes), and the names computed from them, in source order; each
    with (the input, the axis folded into the rows right after the batch) where the layout
    says it, else None."""
    merged: dict[str, tuple[str, int] | None] = {}
    for node in assignments(func):
        if not isinstance(node, ast.Assign):
            continue
        read = _rows_read(node.value) - local
        folds: list[tuple[str, int] | None] = [merged[n] for n in read if n in merged]
        for call in walk(node.value):
            if not isinstance(call, ast.Call) or callee_name(call) not in _LAYOUTS:
                continue
            receiver = layout_receiver(call)
            held = _rows_read(receiver) - local if receiver is not None else set()
            if held & params or any(origins.get(n, set()) - {None} for n in held):
                param = receiver.id if isinstance(receiver, ast.Name) else None
                folded = _folded_axis(call) if param in params else None
                folds.append((param, folded) if param and folded is not None else None)
        if folds:
            fold = folds[0] if len(set(folds)) == 1 else None
            for target in node.targets:
                merged.update({n.id: fold for n in walk(target) if isinstance(n, ast.Name)})
    return merged


def _rows_read(node: ast.AST) -> set[str]:
    """Names whose rows `node` reads: not those only described (`x.dtype`, `x.shape`)."""
    described = {
        id(a.value) for a in walk(node) if isinstance(a, ast.Attribute) and a.attr in DESCRIPTIONS
    }
    return {n.id for n in walk(node) if isinstance(n, ast.Name) and id(n) not in described}


def _folded_axis(call: ast.Call) -> int | None:
    """The input axis a layout folds into its rows right after the batch: `rearrange(t, "b f ->
    (b f) ...")` (the first group of the output made of the input's first two axes) and
    `t.flatten(0, 1)` (or `flatten()` of a 2-D input, checked at each call): axis 1."""
    name = callee_name(call)
    if name == "rearrange" and len(call.args) >= 2 and isinstance(call.args[1], ast.Constant):
        pattern = call.args[1].value
        if not isinstance(pattern, str) or "->" not in pattern:
            return None
        left, right = (side.split() for side in pattern.split("->"))
        first = " ".join(right).split(")")[0] if right and right[0].startswith("(") else ""
        group = first.lstrip("(").split()
        return 1 if len(left) >= 2 and group == left[:2] else None
    if name == "flatten" and not call.keywords:
        bounds = [a.value for a in call.args if isinstance(a, ast.Constant)]
        if len(bounds) == len(call.args) and bounds in ([0, 1], [0, -1], []):
            return 1
    return None
