"""A copy of forward with the local names that stand for a block list (`blocks = self.blocks`)
read as the list itself (`lsp_server.analysis.list_aliases`)."""

from __future__ import annotations

import ast


class ListAliases(ast.NodeTransformer):
    """Local names forward binds once to a `self.<list>` (`blocks = self.blocks`) read as the
    list itself, so a loop over the name is the list's loop (`local_aliases`)."""

    def __init__(self, func: ast.FunctionDef) -> None:
        from ..analysis.list_aliases import local_aliases

        self.aliases = local_aliases(func)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        attr = self.aliases.get(node.id)
        if attr is None or not isinstance(node.ctx, ast.Load):
            return node
        return ast.copy_location(
            ast.Attribute(ast.Name("self", ast.Load()), attr, ast.Load()), node
        )
