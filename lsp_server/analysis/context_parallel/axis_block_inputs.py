"""Inputs of forward that reach the blocks holding the split axis in their batch, whole.

Under a split of forward's input on an axis (the frames), a block that holds that axis in its
batch (`(B F) S C`: spatial blocks) gets this rank's rows of the stream. A tensor handed to it
beside the stream must have the same rows: built by forward from this rank's sizes (the caption
and timestep repeated per frame: `repeat_interleave(f)`), or an input's own rows (a caption
mask `(B, L)` the block broadcasts as it would unsplit). A tensor whose rows forward laid out
from another input's axes alone (a per-frame timestep `(B, F)` of diffusion forcing, flattened
to `(B F)` rows by a reshape, view, flatten or rearrange) stays whole on every rank: the split
would hand the blocks rows of every frame beside this rank's frames. Refused with the
statement, before anything runs.
"""

from __future__ import annotations

import ast

from ..astutil import names_in, short_text, walk
from ..model import Evidence
from ..parallel_input import ParallelContext
from .axis_atoms import AtomTrace
from .axis_regions import LOCAL, axis_kind
from .axis_size_reads import input_origins
from .block_binding import is_block_call


def whole_inputs_to_local_blocks(
    ctx: ParallelContext, trace: AtomTrace, atom: str, size_names: set[str]
) -> list[Evidence]:
    """Why a block holding `atom` in its batch would get an input of forward whole (empty: it
    would not)."""
    func = ctx.forward
    if func is None:
        return []
    params = {a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)}
    params -= {"self", trace.param}
    origins = input_origins(func, params, size_names | {trace.param}, trace.shape_reads, atom)
    merged = _laid_out(func, params, origins)
    lists = {b.attr: b for b in ctx.block_lists}
    for site in trace.sites:
        block = lists.get(site.list_attr)
        if block is None or axis_kind(site.layout, atom) != LOCAL:
            continue
        for call in (n for n in walk(func) if is_block_call(n, block)):
            assert isinstance(call, ast.Call)
            for arg in (*call.args[1:], *(k.value for k in call.keywords)):
                names = names_in(arg)
                if not names & merged:
                    continue
                found = set().union(*(origins.get(n, set()) for n in names)) | (names & params)
                if None in found:
                    continue  # built from this rank's share
                return [
                    Evidence(
                        f"`{short_text(arg)}`, whose rows forward laid out from the axes of its "
                        f"input `{sorted(n for n in found if n)[0]}`, reaches "
                        f"`{site.list_attr}` beside the stream whose batch holds the axis a "
                        "split would cut: it stays whole on every rank (a per-frame input, such "
                        "as a timestep per frame, would hand each rank every frame's rows)",
                        ctx.path,
                        call.lineno,
                    )
                ]
    return []


_LAYOUTS = ("flatten", "reshape", "view", "rearrange")


def _laid_out(
    func: ast.FunctionDef, params: set[str], origins: dict[str, set[str | None]]
) -> set[str]:
    """Names holding an input of forward whose axes a reshape, view, flatten or rearrange laid
    out (rows made of its other axes), and the names computed from them, in source order."""
    merged: set[str] = set()
    assigns = sorted(
        (n for n in walk(func) if isinstance(n, ast.Assign) and n.value is not None),
        key=lambda n: (n.lineno, n.col_offset),
    )
    for node in assigns:
        assert isinstance(node, ast.Assign)
        laid = bool(names_in(node.value) & merged)
        for call in walk(node.value):
            if not isinstance(call, ast.Call):
                continue
            name = call.func.attr if isinstance(call.func, ast.Attribute) else ""
            name = call.func.id if isinstance(call.func, ast.Name) else name
            if name not in _LAYOUTS:
                continue
            receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
            if name == "rearrange" or (
                isinstance(receiver, ast.Name) and receiver.id in ("torch", "einops")
            ):
                receiver = call.args[0] if call.args else None
            read = names_in(receiver) if receiver is not None else set()
            if read & params or any(origins.get(n, set()) - {None} for n in read):
                laid = True
        if laid:
            for target in node.targets:
                merged |= {n.id for n in walk(target) if isinstance(n, ast.Name)}
    return merged
