"""The rewrite of a copied module's relative imports into absolute ones against its anchor (the
installed package where they resolve, `sources.Anchor`)."""

from __future__ import annotations

import ast
import io
import tokenize

from .astutil import walk
from .sources import Anchor


def absolute_module(anchor: Anchor, module: str, level: int) -> str:
    """The absolute name of `from <level dots><module>` in the anchor's module."""
    package = anchor.module.split(".")
    if anchor.path.stem != "__init__":
        package = package[:-1]
    base = package[: len(package) - (level - 1)] if level > 1 else package
    return ".".join([*base, module] if module else base)


def absolute_imports(text: str, anchor: Anchor) -> str:
    """`text` with every relative `from` import (functions included) made absolute against the
    anchor; only the module part of each statement changes, everything else is kept."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    wanted = {}
    for node in walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            line = lines[node.lineno - 1]
            col = len(line.encode("utf-8")[: node.col_offset].decode("utf-8", "replace"))
            wanted[(node.lineno, col)] = absolute_module(anchor, node.module or "", node.level)
    if not wanted:
        return text
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(row: int, col: int) -> int:
        return starts[row - 1] + col

    spans: list[tuple[int, int, str]] = []
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    for i, tok in enumerate(tokens):
        if tok.type != tokenize.NAME or tok.string != "from" or tok.start not in wanted:
            continue
        j = i + 1
        while j < len(tokens) and not (
            tokens[j].type == tokenize.NAME and tokens[j].string == "import"
        ):
            j += 1
        if j == len(tokens):
            continue
        spans.append((offset(*tok.end), offset(*tokens[j].start), f" {wanted[tok.start]} "))
    for start, end, replacement in sorted(spans, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text
