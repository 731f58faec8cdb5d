"""The cdit language server: `CditLanguageServer` holds the state, `create_server` wires features.

Run it with `python -m lsp_server` (stdio; `--tcp`/`--ws` also work) or `cdit-integrate serve`.
Nothing happens at import: the server object is built by `create_server()`.

Documents are synchronized in full (the client sends the whole text on each change). Incremental
sync would make pygls split lines with `str.splitlines`, which also breaks on form feeds and Unicode
line separators, so an edit after such a character would land on the wrong line.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from collections.abc import Sequence

from lsprotocol import types
from pygls.uris import to_fs_path as uris_to_fs_path

from .features.positions import open_uris
from .isolation import add_source_roots
from .language_server import EXIT_BAD_INPUT, CditLanguageServer


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
