"""Local names that stand for a block list: forward binds `blocks = self.blocks` once and loops
over `blocks`, which cache-dit's wrapper replaces during the call like the attribute itself."""

from __future__ import annotations

import ast

from .astutil import per_node, self_attr, walk, walk_local


def local_aliases(func: ast.FunctionDef) -> dict[str, str]:
    """`_local_aliases` (a fresh dict: callers may change it)."""
    return dict(_local_aliases(func))


@per_node
def _local_aliases(func: ast.FunctionDef) -> dict[str, str]:
    """Local names `func` binds once, to a `self.<attr>`, and reads once (`blocks =
    self.blocks` then `for block in blocks:`): a loop over the name runs that attribute, which
    cache-dit's wrapper replaces during the call. A name read again (`blocks[: len(blocks) -
    n]`, Motif-Video's encoder and decoder slices) is not an alias: under caching its slices
    and length would be the wrapper's."""
    bound: dict[str, list[ast.expr]] = {}
    for node in walk_local(func):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.For):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value if isinstance(node, ast.Assign) else None
            for target in targets:
                for name in (n.id for n in walk(target) if isinstance(n, ast.Name)):
                    bound.setdefault(name, []).append(
                        value if isinstance(target, ast.Name) and value is not None else target
                    )
    reads: dict[str, int] = {}
    for node in walk_local(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            reads[node.id] = reads.get(node.id, 0) + 1
    return {
        name: attr
        for name, values in bound.items()
        if len(values) == 1 and reads.get(name) == 1 and (attr := self_attr(values[0]))
    }
