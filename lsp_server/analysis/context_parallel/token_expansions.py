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

from ..astutil import last_part, names_assigned, self_attr, short_text, walk
from .flow import ForwardFlow, length_sources

# methods that keep every axis where it is
_KEEP_AXES = ("to", "float", "half", "bfloat16", "contiguous", "clone", "type_as", "detach")
_BROADCASTS = ("expand", "repeat", "broadcast_to")
_ELEMENTWISE = ("silu", "gelu", "relu", "tanh", "sigmoid", "mish")
# layers that act on the last axis (every row kept where it is)
_TOKEN_LOCAL = ("Linear", "LayerNorm", "RMSNorm", "SiLU", "GELU", "Identity", "Dropout", "Tanh")


@dataclass(frozen=True)
class Expansion:
    """A value expanded to one row per token: the axis (None when not read) and how."""

    axis: int | None
    how: str
    line: int


def token_expansion(flow: ForwardFlow, var: str, streams: set[str]) -> Expansion | None:
    """How `var` (as it stands when the first block loop starts) was expanded to one row per
    token of one of `streams`, from a count measured on it; None when it was not."""
    return _name_expansion(flow, var, flow.first_loop_line, streams, 0)


def _name_expansion(
    flow: ForwardFlow, var: str, before: int, streams: set[str], depth: int
) -> Expansion | None:
    value, line = _last_value(flow, var, before)
    if value is None or depth > 6:
        return None
    return _expansion(flow, value, streams, line, depth)


def _last_value(flow: ForwardFlow, var: str, before: int) -> tuple[ast.expr | None, int]:
    found: tuple[ast.expr | None, int] = (None, 0)
    for stmt in flow.statements:
        if stmt.lineno >= before:
            break
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and var in names_assigned(stmt):
            target = stmt.targets[0]
            found = (stmt.value, stmt.lineno) if isinstance(target, ast.Name) else (None, 0)
    return found


def _expansion(
    flow: ForwardFlow, value: ast.expr, streams: set[str], line: int, depth: int
) -> Expansion | None:
    """Through ops that keep every row where it is (conversions, element-wise activations, the
    token-local layers of the model) down to the op that made one row per token."""
    node = value
    while True:
        if isinstance(node, ast.Name):  # `c = self.ada(c_tok)`: how `c_tok` was made
            return _name_expansion(flow, node.id, line, streams, depth + 1)
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        method = func.attr if isinstance(func, ast.Attribute) else ""
        attr = self_attr(func)
        if attr is not None:  # `self.ada(c)`: a layer acting on the last axis keeps the rows
            ctor = last_part(flow.constructors.get(attr, ""))
            if ctor not in _TOKEN_LOCAL or not node.args:
                return None
            node = node.args[0]
        elif _is_namespace(func) and method in _ELEMENTWISE and node.args:
            node = node.args[0]  # `F.silu(c)`
        elif method in _KEEP_AXES and isinstance(func, ast.Attribute):
            node = func.value
        elif method == "repeat_interleave":
            args = node.args[1:] if _is_torch_fn(node, method) else node.args
            return _repeat_interleave(flow, node, args, streams, line)
        elif method == "flatten":
            return _flattened_broadcast(flow, node, streams, line)
        elif method in _BROADCASTS and not _is_namespace(func):
            return _broadcast(flow, node, streams, line)
        else:
            return None


def _broadcast(flow: ForwardFlow, call: ast.Call, streams: set[str], line: int) -> Expansion | None:
    """`temb[:, None].expand(-1, n, -1)` / `.repeat(1, n, 1)` with exactly one size measured on a
    stream: one row per token on that axis."""
    sizes = list(call.args)
    if len(sizes) == 1 and isinstance(sizes[0], ast.Tuple | ast.List):
        sizes = list(sizes[0].elts)
    hits = [i for i, size in enumerate(sizes) if length_sources(flow, size) & streams]
    if len(hits) != 1:
        return None
    how = f"`{short_text(call)}` broadcasts each row over a count read from the tokens"
    return Expansion(hits[0], how, line)


def _is_namespace(func: ast.expr) -> bool:
    """`F.silu`, `torch.tanh`, `nn.functional.gelu`: a function, not a tensor method."""
    base = func.value if isinstance(func, ast.Attribute) else None
    while isinstance(base, ast.Attribute):
        base = base.value
    return isinstance(base, ast.Name) and base.id in ("F", "torch", "nn")


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
            for n in walk(inner)
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
