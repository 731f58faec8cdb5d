"""`CditLanguageServer`: the language server's state (settings, the per-document analysis cache,
the running verification jobs). The features take it as their first argument and import it from
here; `server.py` wires them to the LSP methods, so no feature imports the wiring module.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from .features import generation, runs
from .features.analyzer import analyze_snapshot
from .features.documents import AnalysisCache, DocumentAnalysis, Snapshot
from .features.jsonrpc import CditProtocol, ResyncingReader
from .features.positions import open_document, open_uris, path_for
from .features.settings import Settings, parse_settings
from .services.codegen_module import codegen_installed

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
        return codegen_installed()

    def runtime_available(self) -> bool:
        return runs.runtime_runnable() and runs.runtime_installed_here(
            self.settings.run_interpreter()
        )

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
