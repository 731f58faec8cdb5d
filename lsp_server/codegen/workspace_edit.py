"""Edits as LSP `WorkspaceEdit` data (plain dicts; the server wraps them in lsprotocol types).

`workspace_edit(changes)` returns `{"documentChanges": [...]}` with, per file, a `CreateFile`
operation when the file is new, then one `TextDocumentEdit` replacing the whole document (range
from 0:0 to the end of the old text, in the client's position encoding). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from .edits import FileChange

PositionEncoding = Literal["utf-16", "utf-8", "utf-32"]


def file_uri(path: Path) -> str:
    return path.resolve().as_uri()


def end_position(text: str, encoding: PositionEncoding = "utf-16") -> dict[str, int]:
    """The LSP position just after the last character of `text`."""
    lines = text.split("\n")
    last = lines[-1]
    if encoding == "utf-8":
        character = len(last.encode("utf-8"))
    elif encoding == "utf-16":
        character = len(last.encode("utf-16-le")) // 2
    else:
        character = len(last)
    return {"line": len(lines) - 1, "character": character}


def workspace_edit(
    changes: Iterable[FileChange], encoding: PositionEncoding = "utf-16"
) -> dict[str, Any]:
    document_changes: list[dict[str, Any]] = []
    for change in changes:
        uri = file_uri(change.path)
        if change.created:
            document_changes.append(
                {
                    "kind": "create",
                    "uri": uri,
                    "options": {"overwrite": False, "ignoreIfExists": True},
                }
            )
        old = change.old or ""
        document_changes.append(
            {
                "textDocument": {"uri": uri, "version": None},
                "edits": [
                    {
                        "range": {
                            "start": {"line": 0, "character": 0},
                            "end": end_position(old, encoding),
                        },
                        "newText": change.new,
                    }
                ],
            }
        )
    return {"documentChanges": document_changes}
