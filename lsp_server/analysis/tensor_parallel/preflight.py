"""Divisibility pre-flight checks for the TP sizes: every attribute `shard_div_attr` divides (head
counts, `inner_dim`, `mlp_hidden_dim`) and the width of every colwise-sharded Linear must be
divisible by the TP size; the diagnostic lists the sizes that would work.

Values come from config.json when given (error), else from the constructor defaults (warning:
another checkpoint may differ).
"""

from __future__ import annotations

from typing import Any

from ..model import Diagnostic
from .plan import BlockFlow
from .roles import COLWISE
from .trace import Node
from .values import Alt, Scalar

MAX_LISTED = 64


def valid_sizes(value: int, limit: int = MAX_LISTED) -> list[int]:
    return [d for d in range(1, min(value, limit) + 1) if value % d == 0]


def node_at(root: Node | None, path: str) -> Node | None:
    node = root
    for part in path.split(".") if path else ():
        if node is None:
            return None
        child = node.children.get(part)
        if isinstance(child, Alt):
            child = next((o for o in child.options if isinstance(o, Node)), None)
        node = child if isinstance(child, Node) else None
    return node


def check(
    flow: BlockFlow,
    attrs: list[tuple[str, str]],
    dropped_owners: set[str],
    tp_sizes: tuple[int, ...],
    where: tuple[str, int],
    whole: list[tuple[str, str]] | None = None,
) -> list[Diagnostic]:
    """`attrs` are divided by `shard_div_attr`; `whole` are head counts left undivided (the
    processor absorbs them with -1) that must still be divisible: each rank holds whole heads."""
    sizes = sorted({s for s in tp_sizes if s > 1})
    out: list[Diagnostic] = []
    prefix = f"{flow.attr}.*."
    checked = [(a, "") for a in attrs] + [
        (a, "; not divided: -1 absorbs it, but each rank must hold whole heads")
        for a in whole or []
    ]
    for (path, attr), note in checked:
        if path in dropped_owners:
            continue
        node = node_at(flow.block, path)
        value = node.attrs.get(attr) if node is not None else None
        key = prefix + (f"{path}.{attr}" if path else attr)
        out += _divisible(key, value, sizes, "CDIT301", where, note)
    for path, style in flow.roles.styles.items():
        if style != COLWISE:
            continue
        node = flow.trace.linear_nodes.get(path)
        if node is None or node.out_features is None:
            continue
        line = flow.trace.linear_lines.get(path, where)
        out += _divisible(f"{prefix}{path}.out_features", node.out_features, sizes, "CDIT310", line)
    return out


def _divisible(
    key: str, value: Any, sizes: list[int], code: str, where: tuple[str, int], note: str = ""
) -> list[Diagnostic]:
    if not isinstance(value, Scalar) or not isinstance(value.value, int) or value.value <= 0:
        return []
    bad = [s for s in sizes if value.value % s]
    if not bad:
        return []
    good = [s for s in valid_sizes(value.value) if s > 1]
    origin = "the default config" if value.var else "the config"
    severity = "warning" if value.var else "error"
    what = "head count" if "head" in key.rsplit(".", 1)[-1] else "size"
    message = (
        f"{key} = {value.value} ({what}, from {origin}{note}) is not divisible by TP size "
        f"{', '.join(map(str, bad))}; valid TP sizes: {', '.join(map(str, good)) or 'none'}"
    )
    fix = {"setting": "tpSizes", "drop": bad, "fits": good[:8]}
    return [Diagnostic(severity, code, message, where[0], where[1], fix=fix)]  # type: ignore[arg-type]
