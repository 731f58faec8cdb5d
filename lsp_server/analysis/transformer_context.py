"""What the PatchFunctor checks need to know about a transformer (`patch_functor.Context`): its
optional forward inputs, its boolean config flags with their defaults, the variables built only
when an optional input is passed, and the keywords the pipeline passes."""

from __future__ import annotations

import ast
from typing import Any

from .astutil import is_none, param_defaults, walk, walk_local
from .list_discovery import ListFacts
from .patch_functor import Context, pre_loop_taint
from .resolver import Resolver
from .sources import ClassRef, SourceFile


def loop_context(
    resolver: Resolver,
    cls: ClassRef,
    forward: ast.FunctionDef | None,
    lists: list[ListFacts],
    config: dict[str, Any] | None,
    pipeline: SourceFile | None,
) -> Context:
    """The context the loop-body classification of `cls`'s block lists runs in."""
    optional: set[str] = set()
    if forward is not None:
        for name, default in param_defaults(forward).items():
            if is_none(default):
                optional.add(name)
    first_loop = min(
        (s.loop.lineno for f in lists for s in f.sites if s.method is forward), default=10**9
    )
    taint = pre_loop_taint(forward, optional, first_loop) if forward is not None else {}
    return Context(optional, _flags(resolver, cls, config), taint, _pipeline_inputs(pipeline))


def _flags(resolver: Resolver, cls: ClassRef, config: dict[str, Any] | None) -> dict[str, object]:
    """`self.flag = flag` in __init__ -> the flag's config value or default."""
    init = resolver.find_method(cls, "__init__")
    if init is None:
        return {}
    func = init[0]
    defaults = param_defaults(func)
    flags: dict[str, object] = {}
    for name, default in defaults.items():
        try:
            value = ast.literal_eval(default)
        except (ValueError, SyntaxError):
            continue
        if config and name in config:
            value = config[name]
        if isinstance(value, bool):
            flags[name] = value
    for node in walk_local(func):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.value, ast.Name)
            and node.value.id in flags
        ):
            target = node.targets[0]
            if isinstance(target, ast.Attribute):
                flags[target.attr] = flags[node.value.id]
    return flags


def _pipeline_inputs(pipeline: SourceFile | None) -> set[str] | None:
    """Keywords the pipeline passes with a real value (None without a pipeline).

    A keyword whose value is `None` or a `__call__` parameter that defaults to None (an
    optional feature such as skip-layer guidance) does not count as passed by default.
    """
    if pipeline is None:
        return None
    optional: set[str] = set()
    for node in walk(pipeline.tree):
        if isinstance(node, ast.FunctionDef) and node.name == "__call__":
            optional |= {k for k, v in param_defaults(node).items() if is_none(v)}
    names: set[str] = set()
    for node in walk(pipeline.tree):
        if isinstance(node, ast.Call):
            for k in node.keywords:
                if (
                    k.arg
                    and not is_none(k.value)
                    and not (isinstance(k.value, ast.Name) and k.value.id in optional)
                ):
                    names.add(k.arg)
        elif isinstance(node, ast.Dict):
            names |= {
                k.value
                for k in node.keys
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
    return names
