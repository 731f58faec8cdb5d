"""Blocks registered one by one under computed names, for the "no block list" error:

    for i in range(depth):                           for i in range(self.depth):
        setattr(self, f"block_{i}", Block(...))          h = getattr(self, f"block_{i}")(h, c)

No nn.ModuleList holds them, so cache-dit (which caches an nn.ModuleList that forward runs block
by block) has nothing to cache: `registered_one_by_one` names the registration (`setattr(self,
<name>, ...)` or `self.add_module(<name>, ...)` with a computed name, building a class of the
model's file) and the run in forward (`getattr(self, <name>)`), each with its line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from .astutil import walk_local


def registered_one_by_one(
    init: ast.FunctionDef, runs: Iterable[ast.FunctionDef], local_classes: set[str]
) -> str:
    """What the error says about blocks `init` registers under computed names and the methods
    `runs` (forward and its helpers) fetch by name; "" when `init` registers none."""
    registered = [r for r in _registrations(init) if r[2] & local_classes]
    if not registered:
        return ""
    fetched = [f for func in runs for f in _fetches(func)]
    # the registration whose name is fetched (the same f-string), else the first
    pair = next(
        ((r, f) for r in registered for f in fetched if _same_name(r[1], f[1])),
        (registered[0], fetched[0] if fetched else None),
    )
    (reg_call, _, classes), fetch = pair
    what = (
        f"`{_short(reg_call)}` (line {reg_call.lineno}) registers "
        f"{', '.join(sorted(classes))} blocks one by one under computed names"
    )
    if fetch is None:
        run = "forward fetches none of them by name"
    else:
        run = f"forward runs them with `{_short(fetch[0])}` (line {fetch[0].lineno})"
    return (
        f"{what}, and {run}: no nn.ModuleList holds them, and cache-dit caches an nn.ModuleList "
        "that forward runs block by block in a loop (`self.blocks = nn.ModuleList([...])`, "
        "`for block in self.blocks: x = block(x, ...)`)"
    )


def _registrations(init: ast.FunctionDef) -> list[tuple[ast.Call, ast.expr, set[str]]]:
    """`setattr(self, <name>, <value>)` / `self.add_module(<name>, <value>)` with a name that is
    not a literal: (call, name, the classes called in the value)."""
    out = []
    for node in walk_local(init):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) == 3:
            if not _is_self(node.args[0]):
                continue
            name, value = node.args[1], node.args[2]
        elif (
            isinstance(func, ast.Attribute)
            and func.attr == "add_module"
            and _is_self(func.value)
            and len(node.args) == 2
        ):
            name, value = node.args
        else:
            continue
        if isinstance(name, ast.Constant):
            continue  # a literal name binds one attribute, read as `self.<name>`
        built = {
            n.func.id
            for n in ast.walk(value)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        out.append((node, name, built))
    return sorted(out, key=lambda r: r[0].lineno)


def _fetches(func: ast.FunctionDef) -> list[tuple[ast.Call, ast.expr]]:
    """`getattr(self, <name>)` with a name that is not a literal: (call, name), those called
    directly (`getattr(self, f"block_{i}")(h, c)`) first."""
    called = {id(n.func) for n in walk_local(func) if isinstance(n, ast.Call)}
    out = [
        (n, n.args[1])
        for n in walk_local(func)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "getattr"
        and len(n.args) >= 2
        and _is_self(n.args[0])
        and not isinstance(n.args[1], ast.Constant)
    ]
    return sorted(out, key=lambda f: (id(f[0]) not in called, f[0].lineno))


def _same_name(a: ast.expr, b: ast.expr) -> bool:
    """Two computed names with the same literal parts (`f"block_{i}"`, `f"block_{k}"`)."""
    return _literal_parts(a) == _literal_parts(b)


def _literal_parts(name: ast.expr) -> tuple[str, ...]:
    if isinstance(name, ast.JoinedStr):
        return tuple(
            v.value for v in name.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
    return (ast.unparse(name),)


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _short(node: ast.AST, limit: int = 70) -> str:
    text = ast.unparse(node).split("\n")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."
