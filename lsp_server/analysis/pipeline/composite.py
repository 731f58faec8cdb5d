"""Composite pipelines: a `__call__` without a denoising loop that runs sub-pipelines."""

from __future__ import annotations

import ast
from collections.abc import Callable

from ..astutil import self_attr, walk
from ..model import Evidence
from .decision import Verdict
from .pipeline_class import ClassCtx, Loader

_MAX_SUBPIPE_DEPTH = 2  # composite pipelines delegating to sub-pipelines

# (loader, sub-pipeline class, transformer attribute hint, depth) -> its verdict
AnalyzeClass = Callable[[Loader, ClassCtx, str | None, int], Verdict]


def delegate(
    loader: Loader, ctx: ClassCtx, hint: str | None, depth: int, analyze_class: AnalyzeClass
) -> Verdict | None:
    """A composite pipeline whose `__call__` runs sub-pipelines (`self.generation_pipe(...)`).

    Each sub-pipeline attribute called in `__call__` (`self.x = SomePipeline(...)` in `__init__`,
    its class found in this file or through a relative import) is analyzed with `analyze_class`;
    the composite has separate CFG when any sub-pipeline with a known answer has it.
    """
    if depth >= _MAX_SUBPIPE_DEPTH or not ctx.subpipes:
        return None
    call = ctx.methods["__call__"]
    results: list[tuple[str, int, Verdict]] = []
    for node in walk(call.fn):
        if not isinstance(node, ast.Call):
            continue
        attr = self_attr(node.func)
        if attr is None or attr not in ctx.subpipes:
            continue
        mod, cls_name = ctx.subpipes[attr]
        found = loader.resolve_class(mod, cls_name)
        if found is None:
            continue
        sub_ctx = ClassCtx(loader, found[0], found[1], cross_file=True)
        if not sub_ctx.has_call():
            continue
        results.append((attr, node.lineno, analyze_class(loader, sub_ctx, hint, depth + 1)))
    known = [r for r in results if r[2].value is not None]
    if not known:
        return None
    value = any(v.value for _, _, v in known)
    ev = [
        Evidence(
            f"{ctx.name}.__call__ delegates to sub-pipeline `self.{attr}` "
            f"(has_separate_cfg={v.value})",
            str(call.mod.path),
            line,
        )
        for attr, line, v in known
    ]
    for _, _, v in known:
        ev.extend(v.evidence[:3])
    conf = min(v.confidence for _, _, v in known) * 0.9
    return Verdict(value, conf, ev)
