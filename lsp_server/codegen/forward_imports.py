"""The import lines a copied `forward` needs: its free names, resolved against its source module.

A name the source module imports is imported the same way (relative imports made absolute);
any other free name (a module-level function, class or constant) is imported from the module.
"""

from __future__ import annotations

import ast
import builtins


def imports_for(code: str, source: str, module_name: str, class_name: str) -> list[str]:
    """Import lines for the names `code` reads that the source module defines or imports."""
    func = ast.parse(code).body[0]
    free = _free_names(func)
    module = ast.parse(source)
    package = module_name.rsplit(".", 1)[0] if "." in module_name else ""
    lines: set[str] = set()
    for name in sorted(free):
        lines.add(_import_line(name, module, module_name, package))
    return sorted(lines, key=lambda s: (not s.startswith("import "), s))


def _names_read(func: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _free_names(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.stmt) -> set[str]:
    assert isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
    local: set[str] = set()
    args = func.args
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        local.add(a.arg)
    for a in (args.vararg, args.kwarg):
        if a is not None:
            local.add(a.arg)
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            local.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                local.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node is not func:
                local.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            local.add(node.name)
        elif isinstance(node, ast.arg) and node is not None:
            local.add(node.arg)
    return _names_read(func) - local - set(dir(builtins))


def _import_line(name: str, module: ast.Module, module_name: str, package: str) -> str:
    for stmt in _top_level(module.body):
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                bound = alias.asname or alias.name.split(".")[0]
                if bound == name:
                    if alias.asname:
                        return f"import {alias.name} as {alias.asname}"
                    return f"import {alias.name.split('.')[0]}"
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    source = _absolute(stmt.module, stmt.level, package)
                    bound = f" as {alias.asname}" if alias.asname else ""
                    return f"from {source} import {alias.name}{bound}"
    return f"from {module_name} import {name}"


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for stmt in body:
        out.append(stmt)
        if isinstance(stmt, ast.If):
            out.extend(_top_level(stmt.body))
            out.extend(_top_level(stmt.orelse))
        elif isinstance(stmt, ast.Try):
            out.extend(_top_level(stmt.body))
    return out


def _absolute(module: str | None, level: int, package: str) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".") if package else []
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join([*base, module] if module else base)
