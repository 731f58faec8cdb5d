"""Read the `_cp_plan` a diffusers class ships and compare it with the inferred plan."""

from __future__ import annotations

import ast
from typing import Any

from ..astutil import callee_name
from ..resolver import Resolver
from ..sources import ClassRef
from .result import HookPlan


def read_cp_plan(resolver: Resolver, cls: ClassRef) -> tuple[dict[str, Any], int] | None:
    """`_cp_plan = {...}` on the class or a base: key -> {input: spec} or gather spec."""
    # diffusers declares `_cp_plan` on the model class itself; base classes are not read for it.
    for ancestor in [cls]:
        if ancestor.node is None:
            continue
        for stmt in ancestor.node.body:
            if (
                isinstance(stmt, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "_cp_plan" for t in stmt.targets)
                and isinstance(stmt.value, ast.Dict)
            ):
                return _plan_dict(stmt.value), stmt.lineno
    return None


def _spec(node: ast.expr) -> Any:
    if isinstance(node, ast.Call):
        kind = callee_name(node)
        values = {k.arg: _literal(k.value) for k in node.keywords if k.arg}
        names = (
            ("split_dim", "expected_dims", "split_output")
            if "Input" in kind
            else ("gather_dim", "expected_dims")
        )
        for name, arg in zip(names, node.args, strict=False):
            values[name] = _literal(arg)
        return values
    if isinstance(node, ast.Dict):
        return {
            str(_literal(k)): _spec(v)
            for k, v in zip(node.keys, node.values, strict=False)
            if k is not None
        }
    if isinstance(node, ast.List | ast.Tuple):
        return [_spec(e) for e in node.elts]
    return ast.unparse(node)


def _literal(node: ast.expr | None) -> Any:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError):
        return ast.unparse(node)


def _plan_dict(node: ast.Dict) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in zip(node.keys, node.values, strict=False):
        if k is None:
            continue
        out[str(_literal(k))] = _spec(v)
    return out


def compare(shipped: dict[str, Any], inferred: HookPlan) -> list[str]:
    """One line per difference between the shipped plan and ours (keys and dims)."""
    ours = inferred.to_json()
    diffs: list[str] = []
    for key in shipped:
        if key not in ours:
            diffs.append(f"diffusers also hooks `{key or '<root>'}`")
    for key in ours:
        if key not in shipped:
            diffs.append(f"we also hook `{key or '<root>'}` (diffusers does not)")
    for key in sorted(set(shipped) & set(ours)):
        theirs, mine = shipped[key], ours[key]
        if isinstance(theirs, dict) and isinstance(mine, dict) and "gather_dim" not in mine:
            for name in sorted(set(theirs) | set(mine)):
                if name not in mine:
                    diffs.append(f"diffusers splits `{name}` at `{key or '<root>'}`")
                elif name not in theirs:
                    diffs.append(f"we split `{name}` at `{key or '<root>'}`, diffusers does not")
                elif isinstance(theirs[name], dict) and (
                    theirs[name].get("split_dim") != mine[name]["split_dim"]
                ):
                    diffs.append(
                        f"`{name}` at `{key or '<root>'}`: split_dim "
                        f"{theirs[name].get('split_dim')} (diffusers) vs "
                        f"{mine[name]['split_dim']}"
                    )
    return diffs
