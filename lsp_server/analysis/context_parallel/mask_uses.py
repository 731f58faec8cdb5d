"""How a block's `forward` uses a mask parameter: per-token work, or only as attention argument."""

from __future__ import annotations

import ast

from ..astutil import (
    self_attr,
    walk,
    walk_local,
)
from ..parallel_input import ParallelBlockList, ParallelContext
from .flow import data_names
from .forward_statements import KEY_MASK_WORDS, assigned_names, short_stmt


def per_token_uses(
    ctx: ParallelContext, block: ParallelBlockList
) -> tuple[dict[str, tuple[int, str, bool]], set[str]]:
    """Block `forward` parameters (and the masks derived from them alone, such as a pairwise
    `m[:, None] * m[:, :, None]`) used other than as an attention argument: passed to a
    `self.<attn…>(...)` call or as `attention_mask=` / `attn_mask=` (also as such a dict key),
    or tested against None. param -> (line, statement, whether the use sits under
    `if param is not None:`), and the parameters that reach an attention argument."""
    found = ctx.resolver.find_method(block.block, "forward")
    if found is None:
        return {}, set()
    func = found[0]
    params = [a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs]
    allowed = _attention_argument_ids(func)
    statements = sorted(
        (n for n in walk_local(func) if isinstance(n, ast.stmt) and n is not func),
        key=lambda n: n.lineno,
    )
    guards = _not_none_guards(func)
    out: dict[str, tuple[int, str, bool]] = {}
    to_attention: set[str] = set()
    for param in params[1:]:
        first_use, reaches_attention = _first_per_token_use(
            param, statements, allowed, guards.get(param, [])
        )
        if reaches_attention:
            to_attention.add(param)
        if first_use is not None:
            out.setdefault(param, first_use)
    return out, to_attention


def _attention_argument_ids(func: ast.FunctionDef) -> set[int]:
    """Ids of the Name nodes in an attention-argument position: arguments of a
    `self.<attn…>(...)` call, `attention_mask=` / `attn_mask=` values (also as a dict key's
    value), and names tested against None."""
    allowed: set[int] = set()
    for node in walk_local(func):
        if isinstance(node, ast.Call):
            callee = self_attr(node.func) if isinstance(node.func, ast.Attribute) else None
            to_attention = bool(callee) and any(
                w in str(callee).lower() for w in ("attn", "attention")
            )
            for arg in node.args:
                if to_attention:
                    allowed.update(_mask_expression(arg))
            for kw in node.keywords:
                if "post" not in str(kw.arg) and (
                    to_attention or any(w in str(kw.arg) for w in KEY_MASK_WORDS)
                ):
                    allowed.update(_mask_expression(kw.value))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=False):
                if isinstance(key, ast.Constant) and any(
                    w in str(key.value) for w in KEY_MASK_WORDS
                ):
                    allowed.update(_mask_expression(value))
        elif isinstance(node, ast.Compare) and all(
            isinstance(op, ast.Is | ast.IsNot) for op in node.ops
        ):
            allowed.update(id(n) for n in walk(node) if isinstance(n, ast.Name))
    return allowed


def _not_none_guards(func: ast.FunctionDef) -> dict[str, list[tuple[int, int]]]:
    """name -> the line spans of the bodies of `if name is not None:`."""
    guards: dict[str, list[tuple[int, int]]] = {}
    for node in walk_local(func):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name)
            and len(node.test.ops) == 1
            and isinstance(node.test.ops[0], ast.IsNot)
            and isinstance(node.test.comparators[0], ast.Constant)
            and node.test.comparators[0].value is None
            and node.body
        ):
            end = max(getattr(b, "end_lineno", b.lineno) or b.lineno for b in node.body)
            guards.setdefault(node.test.left.id, []).append((node.body[0].lineno, end))
    return guards


def _header_parts(stmt: ast.stmt) -> list[ast.AST]:
    """The parts of a statement read by the statement itself (a compound one: its header)."""
    if isinstance(stmt, ast.If | ast.While):
        return [stmt.test]
    if isinstance(stmt, ast.For):
        return [stmt.iter]
    if isinstance(stmt, ast.With | ast.Try | ast.FunctionDef | ast.AsyncFunctionDef):
        return []
    return [stmt]


def _first_per_token_use(
    param: str,
    statements: list[ast.stmt],
    allowed: set[int],
    guards: list[tuple[int, int]],
) -> tuple[tuple[int, str, bool] | None, bool]:
    """The first use of `param` (or a mask derived from it alone) other than as an attention
    argument: (line, statement, guarded by `if param is not None:`), and whether it reaches an
    attention argument."""
    tracked = {param}
    first: tuple[int, str, bool] | None = None
    to_attention = False
    for stmt in statements:
        reads = {
            n
            for part in _header_parts(stmt)
            for n in walk(part)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in tracked
        }
        used = [n for n in reads if id(n) not in allowed]
        if len(used) < len(reads) and not isinstance(stmt, ast.If | ast.While):
            to_attention = True
        if not used:
            continue
        if _derives_mask(stmt, tracked):
            continue
        if first is None:
            guarded = any(a <= stmt.lineno <= b for a, b in guards)
            first = (stmt.lineno, short_stmt(stmt), guarded)
    return first, to_attention


def _derives_mask(stmt: ast.stmt, tracked: set[str]) -> bool:
    """An assignment computed from the tracked masks alone: its targets join `tracked`."""
    if not (isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None):
        return False
    called = {
        n.func.id
        for n in walk(stmt.value)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    others = data_names(stmt.value) - tracked - called - {"self", "torch", "F", "nn"}
    if others:
        return False
    tracked |= set(assigned_names(stmt)) | (
        {stmt.target.id}
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
        else set()
    )
    return True


def _mask_expression(expr: ast.expr) -> set[int]:
    """Ids of the Name nodes of an argument that only reshapes or converts one value
    (`m`, `m[:, None, None, :].bool()`, `m.to(x.dtype)`): arithmetic mixes in other data."""
    if any(isinstance(n, ast.BinOp | ast.Compare | ast.BoolOp) for n in walk(expr)):
        return set()
    meta = {id(n.value) for n in walk(expr) if isinstance(n, ast.Attribute) and n.attr in (
        "dtype", "device", "shape")}  # fmt: skip
    names = [
        n for n in walk(expr) if isinstance(n, ast.Name) and id(n) not in meta and n.id != "self"
    ]
    return {id(n) for n in names} if len({n.id for n in names}) == 1 else set()
