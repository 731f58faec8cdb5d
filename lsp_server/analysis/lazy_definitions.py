"""Top-level definitions of a module, parsed one at a time: a file read only to resolve names in
it is split into top-level statements by a line scan (`top_level_chunks`), and each definition is
parsed when first looked up (`LazyDefinitions`)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .collector import collector_paused
from .model import AnalysisError

if TYPE_CHECKING:
    from .sources import SourceFile


def parse_quietly(text: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse` with the cyclic garbage collector paused: a parse allocates tens of thousands
    of nodes, none in a reference cycle, and each allocation burst otherwise sets off collections
    that traverse the whole heap of trees already parsed (~20% of a parse's time in an analysis
    run). The collector's previous state is restored; exceptions propagate as from `ast.parse`."""
    with collector_paused():
        return ast.parse(text, filename=filename)


def definitions(statements: Iterable[ast.stmt]) -> dict[str, ast.stmt]:
    """Classes, functions and simple assignments among `statements`, by name (last wins)."""
    top: dict[str, ast.stmt] = {}
    for stmt in statements:
        if isinstance(stmt, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            top[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    top[target.id] = stmt
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            top[stmt.target.id] = stmt
    return top


_DEFINITION = re.compile(
    r"^(?:@|(?:async\s+)?def\s+(?P<def>\w+)|class\s+(?P<cls>\w+)|(?P<var>\w+)\s*(?::[^=]*)?=[^=])"
)


@dataclass(frozen=True)
class _Chunk:
    start: int  # 0-based first line
    end: int  # exclusive
    name: str | None  # defined name (class, def, simple assignment)
    compound: bool  # `if`/`try`/`with` block: may define or import names inside


_STATEMENT_START = re.compile(
    r"^(?![ \t#)\]}\n\r]|else\b|elif\b|except\b|finally\b|case\b|\"|\')", re.M
)


def top_level_chunks(text: str) -> list[_Chunk] | None:
    """Split a module into top-level statements by a scan for column-0 lines (C-speed regex).
    A column-0 line inside a multi-line string or bracket would split a statement; such a piece
    fails to parse and the caller then parses the whole file."""
    offsets = [m.start() for m in _STATEMENT_START.finditer(text)]
    if not offsets:
        return None
    lines = text.split("\n")
    starts: list[int] = []
    decorated = False
    line = previous = 0
    for offset in offsets:  # increasing: the line is counted on from the previous offset's
        line += text.count("\n", previous, offset)
        previous = offset
        if not decorated:
            starts.append(line)
        decorated = lines[line].startswith("@")
    chunks: list[_Chunk] = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        head = next((ln for ln in lines[start:end] if not ln.startswith("@")), "")
        match = _DEFINITION.match(head)
        name = None
        if match:
            name = match.group("def") or match.group("cls") or match.group("var")
        compound = head.startswith(("if ", "try:", "with ", "for "))
        chunks.append(_Chunk(start, end, name, compound))
    return chunks


class LazyDefinitions(Mapping[str, ast.stmt]):
    """Top-level definitions of a lazily read file, each parsed when first looked up."""

    def __init__(self, source: SourceFile, chunks: list[_Chunk]) -> None:
        self._source = source
        self._lines = source.text.split("\n")
        self._spans: dict[str, _Chunk] = {c.name: c for c in chunks if c.name}
        self._parsed: dict[str, ast.stmt] = {}
        self._compound = [c for c in chunks if c.compound]
        self._compound_done = False
        self._imports = [c for c in chunks if self._lines[c.start].startswith(("from ", "import "))]

    def _parse(self, chunk: _Chunk) -> list[ast.stmt]:
        # Leading newlines keep the file's line numbers without rewriting the tree.
        segment = "\n" * chunk.start + "\n".join(self._lines[chunk.start : chunk.end])
        try:
            return parse_quietly(segment).body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            # the line scan cut a statement (a column-0 line inside a string): parse whole file
            try:
                tree = self._source.tree
            except AnalysisError:
                return []
            return [
                s
                for s in tree.body
                if chunk.start < getattr(s, "end_lineno", s.lineno) and s.lineno <= chunk.end
            ]

    def _load_compound(self) -> None:
        """Definitions inside top-level `if`/`try` blocks (optional imports, fallbacks)."""
        if self._compound_done:
            return
        self._compound_done = True
        for chunk in self._compound:
            for name, stmt in definitions(flat_top_level(self._parse(chunk))).items():
                self._parsed.setdefault(name, stmt)
                self._spans.setdefault(name, chunk)

    def __getitem__(self, name: str) -> ast.stmt:
        if name not in self._parsed:
            if name not in self._spans:
                self._load_compound()
                if name in self._parsed:
                    return self._parsed[name]
                raise KeyError(name)
            found = definitions(flat_top_level(self._parse(self._spans[name]))).get(name)
            if found is None:
                raise KeyError(name)
            self._parsed[name] = found
        return self._parsed[name]

    def __iter__(self) -> Iterator[str]:
        self._load_compound()
        return iter(self._spans)

    def __len__(self) -> int:
        self._load_compound()
        return len(self._spans)

    def import_statements(self) -> list[ast.stmt]:
        """All top-level imports, parsed together (their line numbers are not needed)."""
        text = "\n".join(
            "\n".join(self._lines[c.start : c.end]) for c in [*self._imports, *self._compound]
        )
        try:
            body = parse_quietly(text).body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            try:
                body = self._source.tree.body
            except AnalysisError:
                return []
        return [s for s in flat_top_level(body) if isinstance(s, ast.Import | ast.ImportFrom)]


def flat_top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Top-level statements, looking inside `if`/`try` blocks (TYPE_CHECKING, optional imports)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            yield from flat_top_level(stmt.body)
            yield from flat_top_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from flat_top_level(stmt.body)
            for handler in stmt.handlers:
                yield from flat_top_level(handler.body)
            yield from flat_top_level(stmt.orelse)
        else:
            yield stmt
