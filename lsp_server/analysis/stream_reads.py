"""How a block loop's body reads the streams its blocks carry (`loop_body`).

Under caching the body runs once and cache-dit's wrapper hands every block the call's arguments
as they were for the first block, the streams excepted (each block gets the previous one's
output). So a value the body computes from a stream's contents and hands the block beside the
streams (`m = self.mod(x)`, `blk(x, m)`) is per-block work, and so is a stream handed to the block
as an expression of it and written back (token routing: `routed = blk(torch.gather(x, 1, idx),
c)`, `x = x.scatter(1, idx, routed)`: `x` is the stream the loop carries). Reading a stream's
shape, dtype or device is not reading its contents (the same for every block).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from .astutil import names_assigned, names_read, walk_local
from .block_calls import BlockCall

# attributes and methods of a tensor that describe it rather than its values
_METADATA_ATTRS = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "layout"})
_METADATA_METHODS = frozenset({"size", "dim", "numel", "get_device"})


def value_names(node: ast.AST) -> set[str]:
    """The names `node` reads for their values: not those read only for their shape, dtype or
    device (`x.shape[1]`, `x.size(1)`, `x.device`, `len(x)`)."""
    metadata: set[int] = set()
    for sub in walk_local(node):
        if isinstance(sub, ast.Attribute) and sub.attr in _METADATA_ATTRS:
            metadata.add(id(sub.value))
        elif isinstance(sub, ast.Call):
            func = sub.func
            if isinstance(func, ast.Attribute) and func.attr in _METADATA_METHODS:
                metadata.add(id(func.value))
            elif isinstance(func, ast.Name) and func.id == "len" and len(sub.args) == 1:
                metadata.add(id(sub.args[0]))
    return {
        n.id
        for n in walk_local(node)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in metadata
    }


def routed_streams(calls: Iterable[BlockCall], body: list[ast.stmt]) -> set[str]:
    """Streams handed to a block as an expression of them and written back from its output:
    names read in a call's first positional argument (not a plain name) that the body rebinds
    from a statement reading what the call assigns (or holding the call), other than those
    targets themselves."""
    out: set[str] = set()
    for call in calls:
        first = call.args[0] if call.args else None
        if first is None or isinstance(first, ast.Name | ast.Starred):
            continue
        outputs = {t for t in call.targets if t}
        rebound: set[str] = set()
        # from the statement holding the call on (before it, `outputs` are the previous
        # block's)
        at = next((i for i, s in enumerate(body) if any(n is call.call for n in walk_local(s))), 0)
        for stmt in body[at:]:
            for node in walk_local(stmt):
                if not isinstance(node, ast.Assign):
                    continue
                holds = any(n is call.call for n in walk_local(node.value))
                if holds or names_read(node.value) & outputs:
                    rebound |= names_assigned(node)
        out |= (names_read(first) & rebound) - outputs
    return out


def call_argument_names(calls: Iterable[BlockCall]) -> set[str]:
    """The names the block calls read in their arguments (not through `*args` / `**kwargs`)."""
    out: set[str] = set()
    for call in calls:
        for arg in [*call.args, *call.keywords.values()]:
            if not isinstance(arg, ast.Starred):
                out |= names_read(arg)
    return out


def stream_derived_arguments(
    calls: Iterable[BlockCall], streams: set[str], stream_valued: set[str]
) -> list[ast.expr]:
    """The arguments of the block calls beside the first that are not a stream itself but
    computed from one's contents (`blk(x, self.mod(x))`, `blk(x, m)` with `m` from `x`): the
    wrapper would hand every block the first block's."""
    out: list[ast.expr] = []
    for call in calls:
        for arg in [*call.args[1:], *call.keywords.values()]:
            if isinstance(arg, ast.Starred) or (isinstance(arg, ast.Name) and arg.id in streams):
                continue
            if value_names(arg) & stream_valued:
                out.append(arg)
    return out
