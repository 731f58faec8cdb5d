"""Every position conversion between the analysis and LSP happens here.

The analysis speaks 1-based line numbers (like `ast`) and file-system paths. LSP speaks 0-based
lines, columns in the client's position encoding (UTF-16 unless negotiated otherwise) and URIs.
Lines are split the way LSP and `ast` count them (`\\n`, `\\r\\n`, `\\r`), not with
`str.splitlines`, which also breaks on form feeds and Unicode separators and would shift every
line after one. Column units go through pygls' `PositionCodec`; nothing here counts UTF-16 by hand.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote

from lsprotocol import types
from pygls import uris
from pygls.workspace import TextDocument, Workspace
from pygls.workspace.position_codec import PositionCodec, ServerTextPosition, ServerTextRange

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_LINE_WITH_BREAK = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


class LineIndex:
    """The lines of one document version, for turning analysis lines into LSP ranges."""

    def __init__(self, text: str, codec: PositionCodec) -> None:
        self.lines: Sequence[str] = _LINE_BREAK.split(text)
        self.codec = codec

    def __len__(self) -> int:
        return len(self.lines)

    def line_range(self, line: int) -> types.Range:
        """Range over the text of 1-based `line`, from its first non-blank character to its end.

        A line past the end of the document (the analysis read an older text, or a file changed
        on disk) is clamped to the last line.
        """
        row = min(max(line, 1), len(self.lines)) - 1
        text = self.lines[row]
        start = len(text) - len(text.lstrip())
        end = len(text.rstrip())
        if end <= start:
            start, end = 0, len(text)
        server = ServerTextRange(ServerTextPosition(row, start), ServerTextPosition(row, end))
        return self.codec.range_to_client_units(self.lines, server)

    def line_text(self, line: int) -> str:
        """The text of 1-based `line` ("" past the end)."""
        return self.lines[line - 1] if 1 <= line <= len(self.lines) else ""


def split_lines(text: str) -> list[str]:
    """Lines with their terminators (`\\n`, `\\r\\n`, `\\r`), the way LSP counts them."""
    return _LINE_WITH_BREAK.findall(text)


def line_start(lines: Sequence[str], row: int, codec: PositionCodec) -> types.Position:
    """The position where 0-based `row` of `lines` (from `split_lines`) starts.

    Past the last line: the end of the document (the start of a new line when the text ends with
    a line break, else the end of the last line in client units).
    """
    if row < len(lines):
        return types.Position(row, 0)
    if not lines:
        return types.Position(0, 0)
    last = len(lines) - 1
    bare = lines[last].rstrip("\r\n")
    if bare != lines[last]:
        return types.Position(len(lines), 0)
    end = codec.position_to_client_units([bare], ServerTextPosition(0, len(bare)))
    return types.Position(last, end.character)


def analysis_line(position: types.Position) -> int:
    """The 1-based analysis line of an LSP position (line numbers need no unit conversion)."""
    return position.line + 1


def lsp_line(line: int) -> int:
    """The 0-based LSP line of a 1-based analysis line."""
    return max(line - 1, 0)


def whole_line_range(line: int) -> types.Range:
    """A range covering 1-based `line` of a file whose text the server does not hold.

    From the start of the line to the start of the next one: valid in every position encoding.
    """
    row = lsp_line(line)
    return types.Range(types.Position(row, 0), types.Position(row + 1, 0))


def uri_for(path: str | os.PathLike[str]) -> str:
    """A `file:` URI for an analysis path (not resolved: the client's URI for a file it opened
    through a symlink must round-trip unchanged)."""
    text = os.path.abspath(path)
    return uris.from_fs_path(text) or Path(text).as_uri()


def open_document(workspace: Workspace, uri: str) -> TextDocument | None:
    """The open document of `uri`, however the client percent-encoded it (pygls keys its
    documents by the decoded URI, so `text_documents.get(uri)` misses `file:///a%20b.py`)."""
    return workspace.text_documents.get(unquote(uri))


def open_uris(workspace: Workspace) -> list[str]:
    """The URIs of the open documents, spelled as the client opened them."""
    return [doc.uri for doc in workspace.text_documents.values()]


def path_for(uri: str) -> Path | None:
    """The file-system path of a `file:` URI; None for other schemes (untitled, git, ...)."""
    if not uri.startswith("file:"):
        return None
    fs = uris.to_fs_path(uri)
    return Path(fs) if fs else None


@functools.lru_cache(maxsize=1024)
def same_file(a: str, b: str) -> bool:
    """Whether two analysis paths name one file (`..` and symlinks resolved)."""
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    return os.path.realpath(a) == os.path.realpath(b)


def line_link(path: str, line: int) -> str:
    """A Markdown link target that opens `path` at 1-based `line` in VS Code and most clients."""
    return f"{uri_for(path)}#L{line}"
