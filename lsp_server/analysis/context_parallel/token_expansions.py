"""Per-token values forward expands from coarser ones and hands to every block.

Video models conditioned per frame (diffusion forcing, autoregressive video) embed one timestep
per frame and give every token its frame's row before the blocks:
`c.repeat_interleave(h * w, dim=1)`, or `c[:, :, None].expand(-1, -1, h * w, -1).flatten(1, 2)`.
The count comes from the latent's shape, so the result has one row per token along the axis the
expansion made. Split at the first block, the blocks get this rank's tokens next to the whole
expansion: it is split with the tokens where every block receives it, on that axis. An expansion
whose axis is not read (a negative or computed `dim`) refuses context parallelism; it is never
split on a guess.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..astutil import names_assigned, short_text
from .flow import ForwardFlow, length_sources

# methods that keep every axis where it is
_KEEP_AXES = ("to", "float", "half", "bfloat16", "contiguous", "clone", "type_as", "detach")
_BROADCASTS = ("expand", "repeat", "broadcast_to", "expand_as")


@dataclass(frozen=True)
class Expansion:
    """A value expanded to one row per token: the axis (None when not read) and how."""

    axis: int | None
    how: str
    line: int


def token_expansion(flow: ForwardFlow, var: str, streams: set[str]) -> Expansion | None:
    """How `var` (as it stands when the first block loop starts) was expanded to one row per
    token of one of `streams`, from a count measured on it; None when it was not."""
    value, line = _last_value(flow, var)
    if value is None:
        return None
    return _expansion(flow, value, streams, line)


def _last_value(flow: ForwardFlow, var: str) -> tuple[ast.expr | None, int]:
    found: tuple[ast.expr | None, int] = (None, 0)
    for stmt in flow.statements:
        if stmt.lineno >= flow.first_loop_line:
            break
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and var in names_assigned(stmt):
            target = stmt.targets[0]
            found = (stmt.value, stmt.lineno) if isinstance(target, ast.Name) else (None, 0)
    return found


def _expansion(
    flow: ForwardFlow, value: ast.expr, streams: set[str], line: int
) -> Expansion | None:
    node = value
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        method = node.func.attr
        if method in _KEEP_AXES:
            node = node.func.value
            continue
        if method == "repeat_interleave":
            args = node.args[1:] if _is_torch_fn(node, method) else node.args
            return _repeat_interleave(flow, node, args, streams, line)
        if method == "flatten":
            return _flattened_broadcast(flow, node, streams, line)
        return None
    return None


def _repeat_interleave(
    flow: ForwardFlow, call: ast.Call, args: list[ast.expr], streams: set[str], line: int
) -> Expansion | None:
    """`c.repeat_interleave(n, dim=d)` with `n` measured on a stream: one row per token on d."""
    count = args[0] if args else _keyword(call, "repeats")
    dim = args[1] if len(args) > 1 else _keyword(call, "dim")
    if count is None or not length_sources(flow, count) & streams:
        return None
    how = f"`{short_text(call)}` repeats each row over a count read from the tokens"
    return Expansion(_axis(dim), how, line)


def _flattened_broadcast(
    flow: ForwardFlow, call: ast.Call, streams: set[str], line: int
) -> Expansion | None:
    """`c[:, :, None].expand(-1, -1, n, -1).flatten(1, 2)` with `n` measured on a stream: the
    flattened axes become the token axis, at the first of them."""
    assert isinstance(call.func, ast.Attribute)
    inner = call.func.value
    broadcast = next(
        (
            n
            for n in ast.walk(inner)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in _BROADCASTS
            and any(length_sources(flow, a) & streams for a in n.args)
        ),
        None,
    )
    if broadcast is None:
        return None
    start = call.args[0] if call.args else _keyword(call, "start_dim")
    how = f"`{short_text(call)}` broadcasts each row over a count read from the tokens"
    return Expansion(_axis(start), how, line)


def _axis(node: ast.expr | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and node.value >= 0:
        return node.value
    return None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_torch_fn(call: ast.Call, name: str) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == name
        and isinstance(func.value, ast.Name)
        and func.value.id == "torch"
    )
