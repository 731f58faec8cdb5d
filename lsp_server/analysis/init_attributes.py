"""The attributes a constructor binds on `self`: `self.x = value`, and the modules attached by
name with `setattr(self, "x", value)` — also inside a loop over literal tuples, where the name is
an f-string of the loop variables (`for prefix, dim in (("video", 64), ("audio", 32)):
setattr(self, f"{prefix}_rope", Rope(dim))` binds `video_rope` and `audio_rope`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from .astutil import self_attr, walk_local


@dataclass(frozen=True)
class InitAttribute:
    attr: str
    value: ast.expr
    line: int


def init_attributes(init: ast.FunctionDef) -> Iterator[InitAttribute]:
    """Every binding of a `self` attribute in `init`, in source order (first binding first)."""
    found: list[InitAttribute] = []
    for node in walk_local(init):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                attr = self_attr(target)
                if attr:
                    found.append(InitAttribute(attr, node.value, node.lineno))
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            attr = self_attr(node.target)
            if attr:
                found.append(InitAttribute(attr, node.value, node.lineno))
        elif isinstance(node, ast.For):
            found.extend(_setattr_loop(node))
        elif isinstance(node, ast.Expr) and _is_self_setattr(node.value):
            call = node.value
            assert isinstance(call, ast.Call)
            name = call.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                found.append(InitAttribute(name.value, call.args[2], node.lineno))
    yield from sorted(found, key=lambda a: a.line)


def _is_self_setattr(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "setattr"
        and len(node.args) == 3
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == "self"
    )


def _setattr_loop(loop: ast.For) -> list[InitAttribute]:
    """`setattr(self, f"{p}_x", v)` directly in the body of a loop over a literal tuple or list:
    one attribute per iteration whose f-string can be rendered from the literal values."""
    if not isinstance(loop.iter, ast.Tuple | ast.List):
        return []
    out: list[InitAttribute] = []
    for stmt in loop.body:
        if not (isinstance(stmt, ast.Expr) and _is_self_setattr(stmt.value)):
            continue
        call = stmt.value
        assert isinstance(call, ast.Call)
        if not isinstance(call.args[1], ast.JoinedStr):
            continue
        for item in loop.iter.elts:
            bound = _bind(loop.target, item)
            name = _render(call.args[1], bound) if bound is not None else None
            if name and name.isidentifier():
                out.append(InitAttribute(name, call.args[2], stmt.lineno))
    return out


def _bind(target: ast.expr, value: ast.expr) -> dict[str, object] | None:
    if isinstance(target, ast.Name):
        return {target.id: value.value} if isinstance(value, ast.Constant) else {}
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
        if len(target.elts) != len(value.elts):
            return None
        out: dict[str, object] = {}
        for t, v in zip(target.elts, value.elts, strict=True):
            sub = _bind(t, v)
            if sub is None:
                return None
            out.update(sub)
        return out
    return None


def _render(text: ast.JoinedStr, bound: dict[str, object]) -> str | None:
    parts: list[str] = []
    for part in text.values:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            parts.append(part.value)
        elif (
            isinstance(part, ast.FormattedValue)
            and isinstance(part.value, ast.Name)
            and part.value.id in bound
            and part.format_spec is None
            and part.conversion == -1
        ):
            parts.append(str(bound[part.value.id]))
        else:
            return None
    return "".join(parts)
