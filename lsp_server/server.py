"""The cdit language server: `CditLanguageServer` holds the state, `create_server` wires features.

Run it with `python -m lsp_server` (stdio; `--tcp`/`--ws` also work) or `cdit-integrate serve`.
Nothing happens at import: the server object is built by `create_server()`.

Documents are synchronized in full (the client sends the whole text on each change). Incremental
sync would make pygls split lines with `str.splitlines`, which also breaks on form feeds and Unicode
line separators, so an edit after such a character would land on the wrong line.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path as uris_to_fs_path

from .features import generation, runs
from .features.analyzer import analyze_snapshot
from .features.documents import AnalysisCache, DocumentAnalysis, Snapshot
from .features.jsonrpc import CditProtocol, ResyncingReader
from .features.positions import open_document, open_uris, path_for
from .features.settings import Settings, parse_settings
from .isolation import add_source_roots

NAME = "cdit-integrator"
VERSION = "0.1.0"
log = logging.getLogger(__name__)
T = TypeVar("T")
EXIT_BAD_INPUT = 2


class CditLanguageServer(LanguageServer):
    """Settings, the per-document analysis cache and the running verification jobs."""

    def __init__(self) -> None:
        super().__init__(
            NAME,
            VERSION,
            text_document_sync_kind=types.TextDocumentSyncKind.Full,
            protocol_cls=CditProtocol,
        )
        self.settings = Settings()
        # What the client said at start; `settings.workspace_trusted` can only lower it. Over
        # stdio a client that says nothing is trusted (the extension always says); over --tcp /
        # --ws only a client that declares `"workspaceTrusted": true` is (`main` clears both).
        self.trust_by_default = True
        self.client_trusted = True
        # Settings problems found in `initialize`, shown once the client is initialized.
        self.pending_problems: tuple[str, ...] = ()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cdit-analysis")
        self.documents = AnalysisCache(self._snapshot, self._analyze, self._publish, self._worker)
        self.runs = runs.RunManager(self)
        self.gate_check = generation.GateCheckSources()

    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        # Resynchronizes after a message shorter than its Content-Length (see features.jsonrpc).
        super().start_io(ResyncingReader(stdin or sys.stdin.buffer), stdout)  # type: ignore[arg-type]

    # -- state --

    @property
    def trusted(self) -> bool:
        """Whether runs and writes are allowed (both the client and the settings must agree)."""
        return self.client_trusted and self.settings.workspace_trusted

    def codegen_available(self) -> bool:
        return generation.codegen_installed()

    def runtime_available(self) -> bool:
        return runs.runtime_runnable()

    def apply_settings(self, raw: Any, *, announce: bool = True) -> tuple[str, ...]:
        """Apply the client's `cdit` settings; returns (and unless told not to, shows) problems."""
        parsed = parse_settings(raw, self.settings)
        changed = parsed.settings != self.settings
        self.settings = parsed.settings
        if parsed.problems and announce:
            self.show_problems(parsed.problems)
        if changed:
            self.documents.invalidate()
            for uri in open_uris(self.workspace):
                self.documents.schedule(uri, 0)
        return parsed.problems

    def show_problems(self, problems: Sequence[str]) -> None:
        self.window_show_message(
            types.ShowMessageParams(
                type=types.MessageType.Warning,
                message="cdit: invalid settings kept their previous values:\n"
                + "\n".join(problems),
            )
        )

    async def in_worker(self, function: Callable[[], T]) -> T:
        """Run blocking analysis or generation on the analysis worker (one at a time)."""
        return await asyncio.get_running_loop().run_in_executor(self._worker, function)

    def log_message(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None:
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    # -- analysis cache callbacks --

    def _snapshot(self, uri: str) -> Snapshot | None:
        doc = open_document(self.workspace, uri)
        if doc is None:
            return None
        path = path_for(uri)
        root = self.workspace.root_path
        sources = self.gate_check.for_transformer(Path(root) if root else None, path)
        return Snapshot(uri, doc.version or 0, doc.source, path, sources)

    def _analyze(self, snapshot: Snapshot, generation: int) -> DocumentAnalysis:
        previous = self.documents.latest(snapshot.uri)
        return analyze_snapshot(
            snapshot,
            generation,
            self.settings,
            self.workspace.position_codec,
            had_transformers=bool(previous and (previous.transformers or previous.diagnostics)),
        )

    def _publish(self, entry: DocumentAnalysis) -> None:
        if entry.failure is not None and entry.failure.code in ("too-large", "internal"):
            self.log_message(f"cdit: {entry.uri}: {entry.failure.message}")
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(
                uri=entry.uri, version=entry.version, diagnostics=list(entry.diagnostics)
            )
        )

    def close(self) -> None:
        self.documents.close()
        self.runs.cancel_all()
        self._worker.shutdown(wait=False, cancel_futures=True)


# -- document and workspace handlers ----------------------------------------------------------


def initialize(ls: CditLanguageServer, params: types.InitializeParams) -> None:
    # The workspace folders take part in locating modules by source, never in imports.
    add_source_roots(workspace_paths(params))
    options = params.initialization_options
    declared = options.get("workspaceTrusted") if isinstance(options, dict) else None
    ls.client_trusted = declared is True or (declared is not False and ls.trust_by_default)
    if not isinstance(options, dict):
        return
    ls.pending_problems = ls.apply_settings(options.get("settings"), announce=False)


def workspace_paths(params: types.InitializeParams) -> list[str]:
    """The local folders of `rootUri` / `rootPath` and `workspaceFolders`."""
    uris = [folder.uri for folder in params.workspace_folders or []]
    if params.root_uri:
        uris.append(params.root_uri)
    paths = [p for p in (uris_to_fs_path(u) for u in uris) if p]
    if params.root_path:
        paths.append(params.root_path)
    return paths


async def initialized(ls: CditLanguageServer, params: types.InitializedParams) -> None:
    if ls.pending_problems:
        ls.show_problems(ls.pending_problems)
    await pull_configuration(ls)


async def pull_configuration(ls: CditLanguageServer) -> None:
    """Read the `cdit` section when the client supports `workspace/configuration`."""
    workspace = ls.client_capabilities.workspace
    if not (workspace and workspace.configuration):
        return
    try:
        (section,) = await ls.workspace_configuration_async(
            types.ConfigurationParams(items=[types.ConfigurationItem(section="cdit")])
        )
    except Exception as exc:  # a client that answers with an error keeps the settings we have
        ls.log_message(f"cdit: workspace/configuration failed: {exc}")
        return
    ls.apply_settings(section)


async def did_change_configuration(
    ls: CditLanguageServer, params: types.DidChangeConfigurationParams
) -> None:
    settings = params.settings
    if isinstance(settings, dict) and isinstance(settings.get("cdit"), dict):
        ls.apply_settings(settings["cdit"])
    else:
        await pull_configuration(ls)


def did_open(ls: CditLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.documents.schedule(params.text_document.uri, 0)


def did_change(ls: CditLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.documents.schedule(params.text_document.uri, ls.settings.debounce_ms / 1000)


def did_save(ls: CditLanguageServer, params: types.DidSaveTextDocumentParams) -> None:
    # A saved file may be a block or attention module that other open transformers import.
    for uri in open_uris(ls.workspace):
        entry = ls.documents.latest(uri)
        if uri == params.text_document.uri or (entry and entry.transformers):
            ls.documents.invalidate(uri)
            ls.documents.schedule(uri, 0)


def did_close(ls: CditLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.documents.forget(uri)
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


def shutdown(ls: CditLanguageServer, params: None) -> None:
    ls.close()


# -- wiring ------------------------------------------------------------------------------------


def create_server() -> CditLanguageServer:
    # Imported here: the feature modules name `CditLanguageServer` in their annotations (pygls
    # reads command annotations at run time), so they import this module.
    from .features import code_actions, code_lens, commands, hover

    server = CditLanguageServer()
    feature = server.feature
    feature(types.INITIALIZE)(initialize)
    feature(types.INITIALIZED)(initialized)
    feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)(did_change_configuration)
    feature(types.TEXT_DOCUMENT_DID_OPEN)(did_open)
    feature(types.TEXT_DOCUMENT_DID_CHANGE)(did_change)
    feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))(did_save)
    feature(types.TEXT_DOCUMENT_DID_CLOSE)(did_close)
    feature(types.SHUTDOWN)(shutdown)
    feature(types.TEXT_DOCUMENT_HOVER)(hover.hover)
    feature(types.TEXT_DOCUMENT_CODE_LENS, types.CodeLensOptions(resolve_provider=True))(
        code_lens.code_lens
    )
    feature(types.CODE_LENS_RESOLVE)(code_lens.resolve_code_lens)
    feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=code_actions.KINDS, resolve_provider=True),
    )(code_actions.code_actions)
    feature(types.CODE_ACTION_RESOLVE)(code_actions.resolve_code_action)
    for name, handler in commands.HANDLERS.items():
        server.command(name)(handler)
    return server


def argument_parser(prog: str = "python -m lsp_server") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="The cdit language server (stdio unless --tcp or --ws)."
    )
    add_transport_arguments(parser)
    return parser


def add_transport_arguments(parser: argparse.ArgumentParser) -> None:
    """--tcp / --ws / --host / --port / --token-file (also `cdit-integrate serve`'s)."""
    transport = parser.add_mutually_exclusive_group()
    transport.add_argument("--tcp", action="store_true", help="listen on TCP instead of stdio")
    transport.add_argument(
        "--ws", action="store_true", help="listen on a WebSocket instead of stdio"
    )
    parser.add_argument(
        "--host",
        help="loopback address for --tcp / --ws (default 127.0.0.1; others are refused)",
    )
    parser.add_argument("--port", type=int, help="port for --tcp / --ws (default 8888, 0: any)")
    parser.add_argument(
        "--token-file",
        help="for --tcp / --ws: read the client token from this file (mode 600), or create it; "
        "without it a new token is printed to stderr",
    )


def main(argv: Sequence[str] | None = None, prog: str = "python -m lsp_server") -> int:
    """Start the server on stdio (or `--tcp` / `--ws`: loopback only, with a token)."""
    parser = argument_parser(prog)
    args = parser.parse_args(list(argv) if argv is not None else None)
    remote = "tcp" if args.tcp else "ws" if args.ws else None
    if remote is None and (args.host, args.port, args.token_file) != (None, None, None):
        parser.error("--host, --port and --token-file need --tcp or --ws")

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # The analysis allocates many short-lived AST nodes while the parse cache keeps large trees
    # alive: with the default thresholds full collections over that heap add 100+ ms spikes.
    gc.set_threshold(50_000, 50, 100)
    server = create_server()
    try:
        if remote is None:
            server.start_io()
            return 0
        from .remote import StartupError, serve

        # Any local process can reach a socket: trust only a client that declares it.
        server.trust_by_default = server.client_trusted = False
        host = "127.0.0.1" if args.host is None else args.host
        port = 8888 if args.port is None else args.port
        try:
            serve(
                server,
                remote,
                host,
                port,
                args.token_file,
                announce=lambda line: print(f"{parser.prog}: {line}", file=sys.stderr, flush=True),
            )
        except StartupError as exc:
            print(f"{parser.prog}: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    finally:
        server.close()
    return 0
