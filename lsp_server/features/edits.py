"""New file contents -> an LSP `WorkspaceEdit` the editor can preview and apply.

Code generation hands over plain data (for each file: its current text or None when it is new, and
the text it should have). Changed files become minimal line edits (`difflib`), new files a
`CreateFile` plus one insertion. With change-annotation support every edit carries an annotation
that needs confirmation, so VS Code opens its refactor preview before anything is written.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from .positions import line_start, split_lines, uri_for

ANNOTATION = "cdit-generate"


@dataclass(frozen=True)
class DocumentChange:
    """One document of a `WorkspaceEdit` (its `documentChanges`): `old` is the text the editor
    should have (None: the file is created), `new` the text it gets. Generation hands over
    codegen's `FileChange`s (files on disk, with their region hashes); they become these, with the
    open document's version, for the editor to preview and apply."""

    path: str
    old: str | None
    new: str
    version: int | None = None  # the open document's version, when the editor has it open


def text_edits(old: str, new: str, codec: PositionCodec) -> list[types.TextEdit]:
    """Minimal whole-line edits turning `old` into `new`."""
    a, b = split_lines(old), split_lines(new)
    edits = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        edits.append(
            types.TextEdit(
                range=types.Range(line_start(a, i1, codec), line_start(a, i2, codec)),
                new_text="".join(b[j1:j2]),
            )
        )
    return edits


def workspace_edit(
    changes: list[DocumentChange],
    codec: PositionCodec,
    *,
    document_changes: bool = True,
    annotations: bool = False,
    label: str = "cdit: generated integration",
) -> types.WorkspaceEdit:
    """The edit for `changes`. Without `document_changes` support new files cannot be created."""
    annotation_id = ANNOTATION if annotations else None
    if not document_changes:
        simple: dict[str, list[types.TextEdit]] = {}
        for change in changes:
            if change.old is None:
                raise ValueError(f"the client cannot create files ({change.path})")
            simple[uri_for(change.path)] = text_edits(change.old, change.new, codec)
        return types.WorkspaceEdit(changes=simple)
    out: list[types.TextDocumentEdit | types.CreateFile] = []
    for change in changes:
        uri = uri_for(change.path)
        if change.old is None:
            out.append(
                types.CreateFile(
                    uri=uri,
                    options=types.CreateFileOptions(overwrite=False, ignore_if_exists=True),
                    annotation_id=annotation_id,
                )
            )
            edits = [types.TextEdit(range=types.Range(_zero(), _zero()), new_text=change.new)]
            version = None
        else:
            edits = text_edits(change.old, change.new, codec)
            version = change.version
        if not edits:
            continue
        if annotation_id:
            edits = [
                types.AnnotatedTextEdit(
                    range=e.range, new_text=e.new_text, annotation_id=annotation_id
                )
                for e in edits
            ]
        out.append(
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(
                    uri=uri, version=version
                ),
                edits=list(edits),
            )
        )
    annotation_map: Mapping[str, types.ChangeAnnotation] | None = None
    if annotation_id:
        annotation_map = {
            annotation_id: types.ChangeAnnotation(label=label, needs_confirmation=True)
        }
    return types.WorkspaceEdit(document_changes=out, change_annotations=annotation_map)


def _zero() -> types.Position:
    return types.Position(0, 0)


async def apply_edit(
    ls: Any, edit: types.WorkspaceEdit, label: str, result: dict[str, Any]
) -> dict[str, Any]:
    """Ask the client to apply ``edit`` (its preview first, where annotated); ``result`` gains
    ``applied`` and the client's ``failureReason``."""
    response = await ls.workspace_apply_edit_async(
        types.ApplyWorkspaceEditParams(edit=edit, label=label)
    )
    result["applied"] = bool(response and response.applied)
    if response and response.failure_reason:
        result["failureReason"] = response.failure_reason
    return result
