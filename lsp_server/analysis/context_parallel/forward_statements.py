"""Small readings of `forward` statements shared by the plan steps: the names a statement assigns
and reads, the module it applies, and the words that mark positions, masks and other streams."""

from __future__ import annotations

import ast

from ..astutil import (
    names_read,
    walk,
)
from .flow import ForwardFlow, data_names

POSITION_WORDS = ("rotary", "rope", "freq", "pos")


OTHER_STREAM_WORDS = ("encoder", "text", "txt", "cond", "prompt", "context", "ctx", "caption")


KEY_MASK_WORDS = ("attention_mask", "attn_mask")


def is_mask_name(name: str) -> bool:
    return "mask" in name


def assigned_names(stmt: ast.stmt) -> list[str]:
    if not isinstance(stmt, ast.Assign):
        return []
    return [n.id for t in stmt.targets for n in walk(t) if isinstance(n, ast.Name)]


def short_stmt(stmt: ast.AST, limit: int = 80) -> str:
    text = ast.unparse(stmt).split("\n")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def own_reads(stmt: ast.stmt) -> set[str]:
    """Names a statement reads itself (a compound statement: its header only; its body
    statements are visited on their own)."""
    if isinstance(stmt, ast.For | ast.AsyncFor):
        return names_read(stmt.iter)
    if isinstance(stmt, ast.If | ast.While):
        return names_read(stmt.test)
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return set().union(*(names_read(i.context_expr) for i in stmt.items))
    if isinstance(stmt, ast.Try | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return set()
    return names_read(stmt)


def module_on(value: ast.expr, tracked: set[str], flow: ForwardFlow) -> str | None:
    """The outermost `self.<module>(...)` call applied to a tracked variable."""
    for node in walk(value):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        attr = (
            func.attr
            if isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
            else None
        )
        if (
            attr is None
            and isinstance(func, ast.Subscript)
            and isinstance(func.value, ast.Attribute)
        ):
            attr = func.value.attr
        if attr and attr in flow.constructors and any(data_names(a) & tracked for a in node.args):
            return attr
    return None
