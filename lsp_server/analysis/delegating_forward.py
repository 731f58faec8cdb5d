"""Blocks whose `forward` only hands its arguments on to a function: `def forward(self, *args,
**kwargs): return mix(*args, text_half=self.text_half, **kwargs)` (reference code that keeps the
joint attention of two half-blocks in a free function). The block's parameters are the
function's, less the ones the wrapper binds by keyword; its returns are the function's."""

from __future__ import annotations

import ast

from .resolver import Resolver
from .sources import SourceFile


def delegated_function(
    resolver: Resolver, source: SourceFile, func: ast.FunctionDef
) -> tuple[ast.FunctionDef, SourceFile, set[str]] | None:
    """The function `func` hands `*args` (and `**kwargs`) on to, the file defining it and the
    parameter names the call binds by keyword; None unless the body is that one `return`."""
    vararg = func.args.vararg
    body = [
        s
        for s in func.body
        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))  # a docstring
    ]
    if vararg is None or func.args.args[1:] or len(body) != 1:
        return None
    ret = body[0]
    if not (
        isinstance(ret, ast.Return)
        and isinstance(ret.value, ast.Call)
        and isinstance(ret.value.func, ast.Name)
    ):
        return None
    call = ret.value
    handed_on = (
        len(call.args) == 1
        and isinstance(call.args[0], ast.Starred)
        and isinstance(call.args[0].value, ast.Name)
        and call.args[0].value.id == vararg.arg
    )
    if not handed_on:
        return None
    found = resolver.find_function(source, call.func.id)
    if found is None:
        return None
    return found[0], found[1], {k.arg for k in call.keywords if k.arg}
