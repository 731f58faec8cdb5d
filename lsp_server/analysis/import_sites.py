"""The import statements of a module (`import_sites`): where each is, what it binds, and whether
it is optional (guarded by an `if` or a `try` that catches ImportError) or runs on import."""

from __future__ import annotations

import ast
from dataclasses import dataclass

_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


@dataclass(frozen=True)
class ImportSite:
    """One `import` / `from ... import` statement."""

    line: int
    col: int
    module: str  # without the dots
    level: int
    names: tuple[str, ...]  # imported names (`from`), or the module itself (`import a.b`)
    bound: tuple[str, ...]  # local names it binds
    guarded: bool  # under `if` (TYPE_CHECKING, is_x_available()) or a `try:` that catches
    # ImportError: an optional import
    top_level: bool  # runs when the module is imported (not inside a function)
    is_from: bool

    @property
    def spelled(self) -> str:
        return "." * self.level + self.module


def import_sites(tree: ast.Module) -> list[ImportSite]:
    """Every import statement of `tree`, functions and classes included, in source order."""
    out: list[ImportSite] = []
    _visit(tree.body, False, True, out)
    return out


def _visit(body: list[ast.stmt], guarded: bool, top: bool, out: list[ImportSite]) -> None:
    for stmt in body:
        if isinstance(stmt, ast.Import):
            out += _plain_imports(stmt, guarded, top)
        elif isinstance(stmt, ast.ImportFrom):
            out.append(_from_import(stmt, guarded, top))
        elif isinstance(stmt, ast.Try | ast.TryStar):
            catches = any(_catches_import_error(h) for h in stmt.handlers)
            _visit(stmt.body, guarded or catches, top, out)
            for handler in stmt.handlers:
                _visit(handler.body, guarded, top, out)
            _visit(stmt.orelse, guarded, top, out)
            _visit(stmt.finalbody, guarded, top, out)
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            _visit(stmt.body, guarded, False, out)
        elif isinstance(stmt, ast.If):
            _visit(stmt.body, True, top, out)
            _visit(stmt.orelse, True, top, out)
        elif isinstance(stmt, ast.ClassDef):
            _visit(stmt.body, guarded, top, out)
        else:
            for name in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, name, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    _visit(inner, guarded, top, out)
            for case in getattr(stmt, "cases", []) or []:
                _visit(case.body, guarded, top, out)


def _plain_imports(stmt: ast.Import, guarded: bool, top: bool) -> list[ImportSite]:
    """`import a.b, c as d`: one site per module."""
    out = []
    for alias in stmt.names:
        bound = alias.asname or alias.name.split(".")[0]
        out.append(
            ImportSite(
                stmt.lineno,
                stmt.col_offset,
                alias.name,
                0,
                (alias.name,),
                (bound,),
                guarded,
                top,
                False,
            )
        )
    return out


def _from_import(stmt: ast.ImportFrom, guarded: bool, top: bool) -> ImportSite:
    names = tuple(a.name for a in stmt.names)
    bound = tuple(a.asname or a.name for a in stmt.names if a.name != "*")
    return ImportSite(
        stmt.lineno,
        stmt.col_offset,
        stmt.module or "",
        stmt.level,
        names,
        bound,
        guarded,
        top,
        True,
    )


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        (t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else "")
        in _IMPORT_ERRORS
        for t in types
    )
