"""Attention over windows of the tokens: a module cuts the token axis of its input, or of the
queries, keys and values made from it, into groups of a fixed size and attends within each group
(`q.reshape(b * (n // w), w, h, d)`, `rearrange(q, "b h (nw w) d -> (b nw) h w d", w=8)`).

Under a token split every rank holds a slice of the sequence, so its groups would be cut from
its slice, and cache-dit's context-parallel attention (an all-to-all or a ring over the call's
sequence axis) would mix the groups of every rank: the result runs and is wrong. Read in a
block's own `forward` and in its attention modules, whose head splits (`view(b, n, h, d)`)
this rule leaves alone: a window is a size computed by dividing a token length. Windows cut in
a function the module hands its tokens to are `called_windows`' (`windows_in` with the layouts
the caller read, `TokenSeen.layouts`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from ..astutil import call_name, declared_params, short_text, walk, walk_local
from .query_layout import Layout
from .token_reductions import names
from .token_work import first_param, token_length_read
from .value_layouts import ValueLayouts

_RESHAPES = ("reshape", "view", "unflatten")


def token_windows(func: ast.FunctionDef, stream: str | None = None) -> tuple[int, str] | None:
    """The first call of `func` that cuts the token axis of a value made from `stream` (its
    first input by default) into windows: (line, message); None when there is none."""
    stream = stream or first_param(func)
    if stream is None:
        return None
    hit = windows_in(func, TokenSeen(tracked={stream}))
    return (hit.lineno, f"cuts the tokens it sees into groups {window_text(hit)}") if hit else None


def window_text(hit: ast.Call, where: str = "") -> str:
    """What a window cut does, after "cuts the tokens ... into groups" (`where`: its place)."""
    return (
        f"(windows, frames: `{short_text(hit)}`{where}): under a token split each rank's groups "
        "would be cut from its own slice, and the context-parallel attention would mix tokens of "
        "different groups"
    )


def windows_in(func: ast.FunctionDef, seen: TokenSeen) -> ast.Call | None:
    """The first call of `func` that cuts the token axis of a value `seen` tracks into windows."""
    for stmt in _binding_statements(func):
        value, targets = _value_and_targets(stmt)
        if value is None:
            continue
        for inner in walk(value):  # a comprehension binds its targets before the value reads them
            if isinstance(inner, ast.comprehension) and names(inner.iter) & seen.tracked:
                seen.tracked |= names(inner.target)
        hit = window_call(value, seen)
        if hit is not None:
            return hit
        seen.bind(stmt, value, targets)
    return None


# calls that resample the tokens (down or up): the output has another token count
_RESAMPLES = frozenset(
    {"avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool1d", "max_pool2d", "max_pool3d"}
    | {"adaptive_avg_pool1d", "adaptive_avg_pool2d", "interpolate", "upsample"}
    | {"pixel_shuffle", "pixel_unshuffle"}
)
# calls that keep the token count of their first input (layouts, casts, modules on the tokens)
_KEEPS = frozenset({"transpose", "permute", "contiguous", "to", "float", "type_as", "clone"})


def token_count_change(func: ast.FunctionDef) -> tuple[int, str] | None:
    """A block `forward` whose returned stream (its first returned value) has another token count
    than its input: a reshape that divides a token length (`x.reshape(b, n // 2, 2 * d)`, a
    token merge) or a pooling / interpolation, followed back from the return through module
    calls, element-wise ops, layout calls and the names' last values. (line, the call's text)."""
    stream = first_param(func)
    if stream is None:
        return None
    seen = TokenSeen(tracked={stream})
    values: dict[str, ast.expr] = {}
    for stmt in _binding_statements(func):
        value, targets = _value_and_targets(stmt)
        if value is None:
            continue
        if isinstance(stmt, ast.Return):
            first = value.elts[0] if isinstance(value, ast.Tuple) and value.elts else value
            hit = _resampled(first, seen, values, 0)
            if hit is not None:
                return hit.lineno, short_text(hit)
            continue
        seen.bind(stmt, value, targets)
        if isinstance(stmt, ast.Assign) and len(targets) == 1:
            values[next(iter(targets))] = value
    return None


def _resampled(
    expr: ast.expr, seen: TokenSeen, values: dict[str, ast.expr], depth: int
) -> ast.Call | None:
    if depth > 8:
        return None
    if isinstance(expr, ast.Name):
        inner = values.get(expr.id)
        return _resampled(inner, seen, values, depth + 1) if inner is not None else None
    if isinstance(expr, ast.BinOp):
        return _resampled(expr.left, seen, values, depth + 1) or _resampled(
            expr.right, seen, values, depth + 1
        )
    if not isinstance(expr, ast.Call):
        return None
    name = call_name(expr).split(".")[-1]
    if name in _RESAMPLES:
        return expr
    if name in _RESHAPES and isinstance(expr.func, ast.Attribute):
        sizes = list(expr.args[1:] if name == "unflatten" else expr.args)
        if len(sizes) == 1 and isinstance(sizes[0], ast.Tuple | ast.List):
            sizes = list(sizes[0].elts)
        return expr if any(_divides(s, seen) or names(s) & seen.counts for s in sizes) else None
    if name in _KEEPS and isinstance(expr.func, ast.Attribute):
        return _resampled(expr.func.value, seen, values, depth + 1)
    if expr.args:  # a module or function on the tokens (`self.merge(...)`, `self.norm(x)`)
        return _resampled(expr.args[0], seen, values, depth + 1)
    return None


def processor_stream(func: ast.FunctionDef) -> str | None:
    """The token stream a diffusers-style processor's `__call__(self, attn, hidden_states, ...)`
    is handed: `hidden_states`, else its second parameter."""
    params = declared_params(func)
    if "hidden_states" in params:
        return "hidden_states"
    return params[1] if len(params) > 1 else None


@dataclass
class TokenSeen:
    """What the statements so far made: values from the input (`tracked`), token lengths of
    them (`lengths`), and counts of groups (`counts`, a length divided: `nw = n // w`).
    `layouts`: tracked values whose layout a caller read (a function handed `(B, H, S, D)`
    queries): their token length is read at their sequence axis, not at axis 1."""

    tracked: set[str]
    lengths: set[str] = field(default_factory=set)
    counts: set[str] = field(default_factory=set)
    layouts: dict[str, Layout] = field(default_factory=dict)

    def bind(self, stmt: ast.AST, value: ast.expr, targets: set[str]) -> None:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and stmt.targets else None
        if (  # `b, n, d = x.shape`: the second of three (`b, h, n, d`: the layout's axis)
            isinstance(target, ast.Tuple)
            and isinstance(value, ast.Attribute)
            and value.attr == "shape"
            and names(value.value) & self.tracked
            and (at := self._unpacked_length(value.value, len(target.elts))) is not None
            and isinstance(target.elts[at], ast.Name)
        ):
            self.lengths.add(target.elts[at].id)
            return
        if len(targets) == 1 and _divides(value, self):
            self.counts |= targets
        elif len(targets) == 1 and self.length_read(value):
            self.lengths |= targets
        if names(value) & self.tracked:
            self.tracked |= targets
            if self.layouts:
                self._follow_layouts(target, value)

    def length_read(self, value: ast.expr) -> bool:
        """`x.shape[1]`, `x.size(-2)` of a tracked value; at its sequence axis for one whose
        layout is read."""
        plain = self.tracked - self.layouts.keys()
        return token_length_read(value, plain) or any(
            token_length_read(value, {name}, (layout.seq, layout.seq - layout.rank))
            for name, layout in self.layouts.items()
        )

    def _unpacked_length(self, owner: ast.expr, count: int) -> int | None:
        layout = self.layouts.get(owner.id) if isinstance(owner, ast.Name) else None
        if layout is not None:
            return layout.seq if layout.rank == count else None
        return 1 if count == 3 else None

    def _follow_layouts(self, target: ast.expr | None, value: ast.expr) -> None:
        if target is None:
            return
        for name, layout in ValueLayouts(self.layouts).unpacked(target, value).items():
            self.layouts.pop(name, None)
            if layout is not None:
                self.layouts[name] = layout


def _binding_statements(func: ast.FunctionDef) -> list[ast.AST]:
    """Assignments, `for` loops and returns of `func` (a loop's targets bind values made from
    its iterable), in source order."""
    kinds = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.Return)
    return sorted((n for n in walk_local(func) if isinstance(n, kinds)), key=lambda n: n.lineno)


def _value_and_targets(stmt: ast.AST) -> tuple[ast.expr | None, set[str]]:
    if isinstance(stmt, ast.Assign):
        return stmt.value, set().union(*(names(t) for t in stmt.targets))
    if isinstance(stmt, ast.AnnAssign | ast.AugAssign):
        return stmt.value, names(stmt.target)
    if isinstance(stmt, ast.For):
        return stmt.iter, names(stmt.target)
    if isinstance(stmt, ast.Return):
        return stmt.value, set()
    return None, set()


def _divides(expr: ast.expr, seen: TokenSeen) -> bool:
    """`n // w`, `n / self.window`, `(n + pad) // w`, `x.shape[1] // w`: a token length divided
    into a count of groups."""
    for node in walk(expr):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.FloorDiv | ast.Div)
            and (names(node.left) & seen.lengths or seen.length_read(node.left))
        ):
            return True
    return False


def window_call(value: ast.expr, seen: TokenSeen) -> ast.Call | None:
    """A reshape (`reshape`, `view`, `unflatten`) of a tracked value with a size that is a
    count of groups, or an einops `rearrange` that splits an inner axis into a group."""
    for node in walk(value):
        if not isinstance(node, ast.Call):
            continue
        name = call_name(node).split(".")[-1]
        if name == "rearrange" and len(node.args) >= 2 and names(node.args[0]) & seen.tracked:
            if _rearrange_windows(node.args[1]):
                return node
            continue
        if name not in _RESHAPES or not isinstance(node.func, ast.Attribute):
            continue
        if not names(node.func.value) & seen.tracked:
            continue
        sizes: list[ast.expr] = list(node.args[1:] if name == "unflatten" else node.args)
        if len(sizes) == 1 and isinstance(sizes[0], ast.Tuple | ast.List):
            sizes = list(sizes[0].elts)
        if any(_divides(s, seen) or names(s) & seen.counts for s in sizes):
            return node
    return None


def _rearrange_windows(pattern: ast.expr) -> bool:
    """An einops pattern whose input splits an axis other than the last into a group
    (`b (nw w) d -> (b nw) w d`): the token axis cut into windows. A split of the last axis
    (`b n (h d) -> b h n d`) is a head split."""
    if not (isinstance(pattern, ast.Constant) and isinstance(pattern.value, str)):
        return False
    if "->" not in pattern.value:
        return False
    left, right = pattern.value.split("->", 1)
    groups = re.findall(r"\(([^)]*)\)|(\S+)", left.strip())
    for i, (grouped, _single) in enumerate(groups):
        inner = bool(grouped) and len(grouped.split()) > 1 and i not in (0, len(groups) - 1)
        if inner and not re.search(r"\(\s*" + re.escape(grouped.strip()) + r"\s*\)", right):
            return True
    return False
