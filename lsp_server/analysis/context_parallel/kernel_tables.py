"""Attention kernels picked from a table of functions.

Serving code often chooses its attention backend by a setting: `ATTN_FNS = {"sdpa":
F.scaled_dot_product_attention, "xformers": xops.memory_efficient_attention, "math":
_math_attention}` at the top of the file, then `ATTN_FNS[self.backend](q, k, v)` in the module's
`forward` (or `self.attn_fn = ATTN_FNS[backend]` in `__init__`, `self.attn_fn(q, k, v)` in
`forward`). No kernel call is written where the attention runs, so no route is read, and the
table holds the functions it was built with: a route that rebinds SDPA afterwards does not
reach them. Under a token split every rank would attend over its own tokens. Refused, naming
the call and the kernels the table holds.
"""

from __future__ import annotations

import ast

from ..astutil import short_text, walk, walk_local
from ..parallel_input import ParallelContext
from ..sources import ClassRef, SourceFile
from .attention_facts import ATTENTION_KERNELS, own_attention_product, sdpa_names


def kernel_table(
    ctx: ParallelContext, cls: ClassRef, func: ast.FunctionDef
) -> tuple[int, str] | None:
    """The first call of `func` (a method of `cls`) running a function picked from a table of
    the file that holds an attention kernel: (line, message after the class's name)."""
    source = cls.source or ctx.source
    if source is None:
        return None
    picked = _picked_in_init(ctx, cls)
    local: dict[str, ast.expr] = {}
    for node in walk_local(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                local[target.id] = node.value
        if not isinstance(node, ast.Call):
            continue
        pick = _pick(node.func, local, picked)
        kernels = _table_kernels(ctx, source, pick) if pick is not None else []
        if kernels:
            assert pick is not None
            return node.lineno, (
                f"picks its attention kernel from a table (`{short_text(node)}`, the table "
                f"`{short_text(pick.value)}` holding {', '.join(f'`{k}`' for k in kernels)}): "
                "a kernel called through a table is not routed (the table keeps the function "
                "it was built with), so under a token split each rank would attend over its "
                "own tokens"
            )
    return None


def _pick(
    func: ast.expr, local: dict[str, ast.expr], picked: dict[str, ast.Subscript]
) -> ast.Subscript | None:
    """`TABLE[key]` as called: inline, through a local, or through `self.<attr>` set in
    `__init__`."""
    if isinstance(func, ast.Name) and func.id in local:
        func = local[func.id]
    if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name):
        return func
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "self"
    ):
        return picked.get(func.attr)
    return None


def _picked_in_init(ctx: ParallelContext, cls: ClassRef) -> dict[str, ast.Subscript]:
    """`self.<attr> = TABLE[key]` in the `__init__` of `cls` or its bases."""
    out: dict[str, ast.Subscript] = {}
    for init, _owner in ctx.resolver.init_methods(cls):
        for node in walk(init):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            target, value = node.targets[0], node.value
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
                and isinstance(value, ast.Subscript)
                and isinstance(value.value, ast.Name)
            ):
                out.setdefault(target.attr, value)
    return out


def _table_kernels(ctx: ParallelContext, source: SourceFile, pick: ast.Subscript) -> list[str]:
    """The attention kernels the top-level table `pick` indexes holds (by their text)."""
    assert isinstance(pick.value, ast.Name)
    stmt = source.top_level.get(pick.value.id)
    if not isinstance(stmt, ast.Assign):
        return []
    table = stmt.value
    if isinstance(table, ast.Dict):
        entries = [v for v in table.values if v is not None]
    elif isinstance(table, ast.List | ast.Tuple):
        entries = list(table.elts)
    else:
        return []
    aliases = sdpa_names(source.import_statements())
    return [short_text(e) for e in entries if _is_kernel(ctx, source, e, aliases)]


def _is_kernel(
    ctx: ParallelContext, source: SourceFile, entry: ast.expr, aliases: set[str]
) -> bool:
    """An attention kernel (by name or alias), or a function of the file that calls one or
    multiplies by keys itself."""
    last = entry.attr if isinstance(entry, ast.Attribute) else getattr(entry, "id", None)
    if last is None:
        return False
    if last in ATTENTION_KERNELS or last in aliases:
        return True
    if not isinstance(entry, ast.Name):
        return False
    found = ctx.resolver.find_function(source, entry.id)
    if found is None:
        return False
    helper = found[0]
    calls = (n for n in walk_local(helper) if isinstance(n, ast.Call))
    named = (getattr(c.func, "attr", None) or getattr(c.func, "id", None) for c in calls)
    return any(n in ATTENTION_KERNELS or n in aliases for n in named) or bool(
        own_attention_product(helper)
    )
