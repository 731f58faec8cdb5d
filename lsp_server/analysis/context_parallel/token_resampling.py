"""Work that pools, strides over or resamples neighbouring tokens, attention modules included.

A module that averages its tokens in pairs before taking keys from them
(`F.avg_pool1d(x.transpose(1, 2), 2)`), reduces them with a strided convolution over their grid
(spatial-reduction attention: `self.sr = nn.Conv2d(d, d, kernel_size=r, stride=r)`), or
interpolates them, combines each token with its neighbours. Under a token split each rank resamples
its own slice: the result is right only while every rank's length is a multiple of the window and
the grid rows fall on the split, which an uneven split (UAA) or a length the caller chooses does
not promise. Read on values made from the module's first input; a 1-D pooling of that input as it
is handed (`(B, S, D)`: the features pooled) keeps the tokens.
"""

from __future__ import annotations

import ast

from ..astutil import call_name, self_attr, short_text, walk, walk_local
from ..parallel_input import ParallelContext
from ..sources import ClassRef
from .token_reductions import names
from .token_work import first_param

_KINDS = ("avg", "max", "lp", "adaptive_avg", "adaptive_max")
_POOL_FUNCTIONS = frozenset(f"{kind}_pool{n}d" for kind in _KINDS for n in (1, 2, 3)) | {
    "interpolate",
    "upsample",
    "pixel_shuffle",
    "pixel_unshuffle",
    "fold",
    "unfold",
}
_MODULE_KINDS = ("Avg", "Max", "LP", "AdaptiveAvg", "AdaptiveMax")
_POOL_MODULES = frozenset(f"{kind}Pool{n}d" for kind in _MODULE_KINDS for n in (1, 2, 3)) | {
    "Upsample",
    "PixelShuffle",
    "PixelUnshuffle",
    "Fold",
    "Unfold",
}
_ONE_D = frozenset(name for name in _POOL_FUNCTIONS | _POOL_MODULES if "1d" in name.lower())


def token_resampling(
    ctx: ParallelContext, cls: ClassRef, forward: ast.FunctionDef
) -> tuple[int, str] | None:
    """The first pooling, interpolation or strided convolution `forward` applies to a value made
    from its first input: (line, message); None when there is none."""
    stream = first_param(forward)
    if stream is None:
        return None
    built = _resampling_modules(ctx, cls)
    tracked = {stream}
    for stmt in sorted(_statements(forward), key=lambda n: n.lineno):
        value = stmt.value
        if value is None:
            continue
        for node in walk(value):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            what = _resampler(node, built)
            if what is None or not names(node.args[0]) & tracked:
                continue
            if what in _ONE_D and isinstance(node.args[0], ast.Name) and node.args[0].id == stream:
                continue  # the features of each token pooled
            return node.lineno, (
                f"resamples neighbouring tokens (`{short_text(node)}`): under a token split "
                "each rank would pool or stride over its own slice, right only while every "
                "rank's length is a multiple of the window, which an uneven split does not keep"
            )
        if names(value) & tracked:
            tracked |= _targets(stmt)
    return None


_Statement = ast.Assign | ast.AnnAssign | ast.AugAssign | ast.Return


def _statements(func: ast.FunctionDef) -> list[_Statement]:
    kinds = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return)
    return [n for n in walk_local(func) if isinstance(n, kinds)]


def _targets(stmt: ast.AST) -> set[str]:
    if isinstance(stmt, ast.Assign):
        return set().union(*(names(t) for t in stmt.targets))
    if isinstance(stmt, ast.AnnAssign | ast.AugAssign):
        return names(stmt.target)
    return set()


def _resampler(call: ast.Call, built: dict[str, str]) -> str | None:
    """The pooling / resampling name of a functional call, or of the module `self.<attr>` holds."""
    attr = self_attr(call.func)
    if attr is not None:
        return built.get(attr)
    name = call_name(call).split(".")[-1]
    return name if name in _POOL_FUNCTIONS else None


def _resampling_modules(ctx: ParallelContext, cls: ClassRef) -> dict[str, str]:
    """`self.<attr>` built as a pooling / resampling module or a strided convolution, by any
    `__init__` of the class and its bases (a more derived one rebuilding an attribute wins)."""
    built: dict[str, str] = {}
    for func, _ in reversed(ctx.resolver.init_methods(cls)):
        for node in walk_local(func):
            if not isinstance(node, ast.Assign):
                continue
            kind = _module_kind(node.value)
            for target in node.targets:
                if (attr := self_attr(target)) is None:
                    continue
                if kind is None:
                    built.pop(attr, None)
                else:
                    built[attr] = kind
    return built


def _module_kind(value: ast.expr) -> str | None:
    if not isinstance(value, ast.Call):
        return None
    name = call_name(value).split(".")[-1]
    if name in _POOL_MODULES:
        return name
    if name in ("Conv1d", "Conv2d", "Conv3d"):
        stride = next((k.value for k in value.keywords if k.arg == "stride"), None)
        if stride is None and len(value.args) > 3:
            stride = value.args[3]
        if stride is not None and not _is_one(stride):
            return name
    return None


def _is_one(expr: ast.expr) -> bool:
    items = expr.elts if isinstance(expr, ast.Tuple | ast.List) else [expr]
    return all(isinstance(i, ast.Constant) and i.value == 1 for i in items)
