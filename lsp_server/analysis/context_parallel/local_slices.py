"""Slices after the loops bounded by the length of a stream that is still this rank's part.

Under a split at the first block, a length forward measured before the loops is the whole one,
so a slice of the gathered stream by it needs the whole sequence (`is_sequence_global`). A
length read from a stream an earlier list's loop handed back is this rank's, though: in
`x = torch.cat([txt, img], 1)` before a single-stream list and `img = x[:, txt.shape[1]:]` after
it, each rank joins and cuts its own parts, so the slice stays token-local and the gather belongs
after it (at the output head), not at the last block, where the cut of the gathered sequence by a
rank's text length kept the other ranks' text (the run stopped on the latent's shape).
"""

from __future__ import annotations

import ast
import copy

_LENGTH_READS = ("shape", "size")


def without_local_slices(value: ast.expr, local: frozenset[str]) -> ast.expr:
    """A copy of `value` with each slice `s[..., a:b]` whose bounds are lengths of `local`
    streams (`txt.shape[1]`, `-txt.size(1)`, None) replaced by `s`."""
    if not local:
        return value

    class _Cut(ast.NodeTransformer):
        def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
            self.generic_visit(node)
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            slices = [p for p in parts if isinstance(p, ast.Slice)]
            if not slices or any(not _whole_axis(p) for p in parts if p not in slices):
                return node
            bounds = [b for s in slices for b in (s.lower, s.upper, s.step) if b is not None]
            if bounds and all(_local_length(b, local) for b in bounds):
                return node.value
            return node

    return _Cut().visit(copy.deepcopy(value))


def _whole_axis(part: ast.expr) -> bool:
    """`...` (an axis kept whole besides the slices)."""
    return isinstance(part, ast.Constant) and part.value is Ellipsis


def _local_length(bound: ast.expr, local: frozenset[str]) -> bool:
    """`name.shape[k]` / `name.size(k)` of a `local` name, or its negation."""
    if isinstance(bound, ast.UnaryOp) and isinstance(bound.op, ast.USub):
        bound = bound.operand
    if isinstance(bound, ast.Subscript):
        bound = bound.value
    elif isinstance(bound, ast.Call) and not bound.keywords:
        bound = bound.func
    return (
        isinstance(bound, ast.Attribute)
        and bound.attr in _LENGTH_READS
        and isinstance(bound.value, ast.Name)
        and bound.value.id in local
    )
