"""Helpers for the language-server protocol tests (a real server process over stdio)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls import uris
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

from lsp_server.features.positions import split_lines

HERE = Path(__file__).parent
REPO = HERE.parent.parent


def server_config() -> ClientServerConfig:
    return ClientServerConfig(
        server_command=[sys.executable, "-m", "lsp_server"], client_factory=make_client
    )


async def start_session(
    client: LanguageClient,
    root: Path,
    *,
    settings: dict[str, Any] | None = None,
    trusted: bool = True,
    client_name: str = "visual-studio-code",
) -> types.InitializeResult:
    options: dict[str, Any] = {"settings": settings or {}}
    if not trusted:
        options["workspaceTrusted"] = False
    if settings:
        client.set_configuration({"cdit": settings})
    return await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities(client_name),
            root_uri=root.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
            initialization_options=options,
        )
    )


def open_file(client: LanguageClient, path: Path, text: str | None = None, version: int = 1) -> str:
    uri = path.as_uri()
    if text is None:
        text = path.read_text(encoding="utf-8")
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=version, text=text
            )
        )
    )
    return uri


def change_file(client: LanguageClient, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


async def diagnostics_for(
    client: LanguageClient, uri: str, version: int | None = None, timeout: float = 20.0
) -> list[types.Diagnostic]:
    """Wait until diagnostics for `uri` (at `version`, when given) have been published."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        for params in reversed(published_for(client, uri)):
            if version is None or params.version == version:
                return list(params.diagnostics)
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise TimeoutError(f"no diagnostics for {uri} (version {version})")
        try:
            await asyncio.wait_for(
                client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), remaining
            )
        except (TimeoutError, asyncio.TimeoutError):
            continue


def published_for(client: LanguageClient, uri: str) -> list[types.PublishDiagnosticsParams]:
    """Every publishDiagnostics for `uri` so far, in order."""
    return [p for p in client.cdit_published if p.uri == uri]  # type: ignore[attr-defined]


def make_client() -> LanguageClient:
    """pytest-lsp's client, also keeping every publishDiagnostics (pytest-lsp keeps the latest
    per URI) and every `cdit/runProgress` notification."""
    client = LanguageClient(converter_factory=default_converter)
    client.cdit_published = []  # type: ignore[attr-defined]
    client.cdit_runs = []  # type: ignore[attr-defined]

    def publish(ls: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
        ls.diagnostics[params.uri] = params.diagnostics
        ls.cdit_published.append(params)  # type: ignore[attr-defined]

    def run_progress(ls: LanguageClient, params: Any) -> None:
        ls.cdit_runs.append(params)  # type: ignore[attr-defined]

    def apply_edit(
        ls: LanguageClient, params: types.ApplyWorkspaceEditParams
    ) -> types.ApplyWorkspaceEditResult:
        apply_workspace_edit(params.edit)
        return types.ApplyWorkspaceEditResult(applied=True)

    features = {
        **DEFAULT_CLIENT_FEATURES,
        types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: publish,
        "cdit/runProgress": run_progress,
        types.WORKSPACE_APPLY_EDIT: apply_edit,
    }
    register_lsp_features(client, features)
    return client


def line_of(text: str, needle: str, start: int = 0) -> int:
    """0-based line of the first line containing `needle` at or after line `start`."""
    for i, line in enumerate(text.splitlines()):
        if i >= start and needle in line:
            return i
    raise AssertionError(f"{needle!r} not found")


def apply_workspace_edit(edit: types.WorkspaceEdit) -> list[Path]:
    """Apply a WorkspaceEdit to the files on disk, as an editor would (UTF-16 columns)."""
    touched: list[Path] = []
    for change in edit.document_changes or []:
        if isinstance(change, types.CreateFile):
            path = Path(uris.to_fs_path(change.uri) or "")
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                path.write_text("", encoding="utf-8")
            continue
        assert isinstance(change, types.TextDocumentEdit), change
        path = Path(uris.to_fs_path(change.text_document.uri) or "")
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        text = apply_text_edits(text, list(change.edits))
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8", newline="") as out:
            out.write(text)
        touched.append(path)
    for uri, edits in (edit.changes or {}).items():
        path = Path(uris.to_fs_path(uri) or "")
        text = apply_text_edits(path.read_text(encoding="utf-8"), list(edits))
        with path.open("w", encoding="utf-8", newline="") as out:
            out.write(text)
        touched.append(path)
    return touched


def apply_text_edits(text: str, edits: list[types.TextEdit]) -> str:
    def offset(position: types.Position) -> int:
        lines = split_lines(text)
        if position.line >= len(lines):
            return len(text)
        units, index = 0, 0
        line = lines[position.line]
        while index < len(line) and units < position.character:
            units += 2 if ord(line[index]) > 0xFFFF else 1
            index += 1
        return sum(len(x) for x in lines[: position.line]) + index

    ordered = sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character))
    for edit in reversed(ordered):
        start, end = offset(edit.range.start), offset(edit.range.end)
        text = text[:start] + edit.new_text + text[end:]
    return text
