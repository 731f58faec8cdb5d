"""Where the batch axis of a token stream sits when the blocks receive it.

Most DiTs hand their blocks `(batch, tokens, channels)`; code written for sequence-first layers
(`nn.MultiheadAttention`'s default, Megatron-style `(s, b, h)`, DETR-style `flatten(2).permute(2,
0, 1)`) hands them `(tokens, batch, channels)`, and a split or gather on axis 1 would then cut the
batch. Forward's inputs are batch-first; each assignment before the first block loop moves the
batch axis by the layout ops it applies (`transpose`, `permute`, `movedim`, `swapaxes`, einops
`rearrange`), through module calls and element-wise ops. Unknown when an op merges or cannot be
read; the plan keeps axis 1 then.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace

from ..astutil import callee_name, int_literal, names_assigned, self_attr
from ..model import Evidence
from ..parallel_input import ParallelBlockList
from .block_binding import name_of
from .flow import ForwardFlow, before_the_blocks
from .result import EACH, HookPlan, SplitInput


def batch_axis(flow: ForwardFlow, var: str) -> int | None:
    """The batch axis of `var` as the first block loop receives it (0 for forward's inputs);
    None when a layout op cannot be read."""
    state: dict[str, int | None] = {p: 0 for p in flow.params}
    for stmt in before_the_blocks(flow):
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            continue
        target = stmt.targets[0]
        if isinstance(target, ast.Name):
            state[target.id] = _expr_batch(stmt.value, state, 0)
        else:
            for name in names_assigned(stmt):
                state[name] = _expr_batch(stmt.value, state, 0)
    return state.get(var, 0)


def _expr_batch(expr: ast.expr, state: dict[str, int | None], depth: int) -> int | None:
    if depth > 16:
        return None
    if isinstance(expr, ast.Name):
        return state.get(expr.id, 0)
    if isinstance(expr, ast.BinOp):  # `x + pos`: the stream is the left operand by convention
        return _expr_batch(expr.left, state, depth + 1)
    if isinstance(expr, ast.Subscript | ast.Starred):
        return _expr_batch(expr.value, state, depth + 1)
    if isinstance(expr, ast.Tuple | ast.List) and expr.elts:
        return _expr_batch(expr.elts[0], state, depth + 1)
    if not isinstance(expr, ast.Call):
        return 0
    name = callee_name(expr)
    func = expr.func
    if name == "rearrange" and len(expr.args) >= 2:
        return _rearranged(_expr_batch(expr.args[0], state, depth + 1), expr.args[1])
    if isinstance(func, ast.Attribute) and not self_attr(func) and not _is_namespace(func.value):
        return _moved(_expr_batch(func.value, state, depth + 1), name, list(expr.args))
    if name in _LAYOUT_OPS and expr.args:  # torch.transpose(x, 0, 1)
        return _moved(_expr_batch(expr.args[0], state, depth + 1), name, list(expr.args[1:]))
    if expr.args:  # a module or function of the stream: layers act on the last axis
        return _expr_batch(expr.args[0], state, depth + 1)
    return 0


_LAYOUT_OPS = ("transpose", "swapaxes", "swapdims", "permute", "movedim", "moveaxis")


def _is_namespace(node: ast.expr) -> bool:
    """`torch`, `F`, `nn.functional`: a namespace, not a tensor."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in ("torch", "F", "nn", "einops", "math")


def _moved(inner: int | None, method: str, args: list[ast.expr]) -> int | None:
    """The batch axis after `method(*args)` moved it from `inner`."""
    if inner is None:
        return None
    if method == "permute":
        elts = (
            args[0].elts if len(args) == 1 and isinstance(args[0], ast.Tuple | ast.List) else args
        )
        order = [int_literal(e) for e in elts]
        if any(d is None or d < 0 for d in order) or inner not in order:
            return None
        return order.index(inner)
    if method in _LAYOUT_OPS:
        dims = [int_literal(a) for a in args]
        if len(dims) != 2 or dims[0] is None or dims[1] is None:
            return None
        a, b = dims[0], dims[1]
        if method in ("movedim", "moveaxis"):
            return _moved_dim(inner, a, b)
        if inner == a:
            return b if b >= 0 else None
        if inner == b:
            return a if a >= 0 else None
        return inner  # negative dims address the feature end of a token tensor
    if method in ("flatten", "reshape", "view", "unflatten") and inner != 0:
        return None  # sizes around a moved batch axis: not read
    return inner  # merged with or split from the axes after it, the batch stays in front


def _moved_dim(inner: int, a: int, b: int) -> int | None:
    if a < 0 or b < 0:
        return None
    if inner == a:
        return b
    if a < inner <= b:
        return inner - 1
    if b <= inner < a:
        return inner + 1
    return inner


def _rearranged(inner: int | None, pattern: ast.expr) -> int | None:
    if inner is None or not (isinstance(pattern, ast.Constant) and isinstance(pattern.value, str)):
        return None
    if "->" not in pattern.value:
        return None
    left, right = (_axes(side) for side in pattern.value.split("->", 1))
    if left is None or right is None or inner >= len(left):
        return None
    label = left[inner]
    if " " in label:  # the batch already merged with another axis
        return None
    hits = [i for i, group in enumerate(right) if label in group.split()]
    if len(hits) != 1 or right[hits[0]] != label:
        return None
    return hits[0]


def _axes(side: str) -> list[str] | None:
    """`b (h w) c` -> ["b", "h w", "c"]."""
    groups = re.findall(r"\(([^)]*)\)|(\S+)", side.strip())
    out = [(grouped or single).strip() for grouped, single in groups]
    return out if all(out) else None


def relayout_sequence_first(
    flow: ForwardFlow,
    plan: HookPlan,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    stream_params: list[str],
    path: str,
    evidence: list[Evidence],
) -> list[Evidence]:
    """Move the stream splits and the gathers to axis 0 when the blocks receive the streams
    sequence-first. Returns refusals: a stream whose batch axis a layout op moved where it
    cannot be followed."""
    line = block.call.lineno if block.call is not None else 0
    moved: dict[str, str] = {}  # block parameter -> forward variable, sequence-first
    for param in stream_params:
        var = name_of(bound.get(param))
        if var is None:
            continue
        axis = batch_axis(flow, var)
        if axis is None:
            return [
                Evidence(
                    f"`{var}` reaches `{block.attr}` through layout ops whose batch axis is not "
                    "read (a reshape around a moved batch axis): its token axis is unknown, "
                    "context parallelism is not generated",
                    path,
                    line,
                )
            ]
        if axis == 1:
            moved[param] = var
    if not moved:
        return []
    for key in (f"{block.attr}.0", f"{block.attr}.*", f"{block.attr}.{EACH}"):
        for name, spec in list(plan.splits.get(key, {}).items()):
            if name in moved and isinstance(spec, SplitInput) and spec.split_dim == 1:
                plan.splits[key][name] = replace(spec, split_dim=0)
    for key, gather in list(plan.gathers.items()):
        if gather.gather_dim == 1:
            plan.gathers[key] = replace(gather, gather_dim=0)
    names = ", ".join(f"`{v}`" for v in moved.values())
    verb = "reaches" if len(moved) == 1 else "reach"
    evidence.append(
        Evidence(
            f"{names} {verb} `{block.attr}` sequence-first (a layout op in forward moves the "
            "batch to axis 1): split and gathered on axis 0",
            path,
            line,
        )
    )
    return []
