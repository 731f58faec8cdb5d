"""The analysis of open documents: one entry per URI and version, computed off the event loop.

`AnalysisCache` debounces edits per URI, analyzes a snapshot of the text on a single worker thread
(the analysis keeps module-level parse caches, so it is never run twice at once), and hands the
result to `publish` only when the document still has the version that was analyzed: a result for
an older version is kept for nothing and never reaches the client. While one analysis of a URI
runs, newer edits wait for it and then start one more run for the latest text.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    """The text of one document version, taken on the event loop."""

    uri: str
    version: int
    text: str
    path: Path | None
    # Other sources the gate check names for this transformer (pipeline, config, model index).
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Failure:
    """Why a document has no analysis (an `AnalysisError` code, or `internal`)."""

    code: str
    message: str


@dataclass(frozen=True)
class DocumentAnalysis:
    """Everything the editor features need about one analyzed document version."""

    uri: str
    version: int
    generation: int
    path: Path | None
    # `AnalysisResult.to_json()`, or None when the analysis could not run (see `failure`).
    report: dict[str, Any] | None
    failure: Failure | None
    diagnostics: tuple[types.Diagnostic, ...] = ()
    # For a pipeline file: its `has_separate_cfg` inference (`separateCfg` JSON).
    pipeline: dict[str, Any] | None = None
    anchors: Any = None  # anchors.Anchors
    lines: Any = None  # positions.LineIndex
    elapsed_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def transformers(self) -> list[dict[str, Any]]:
        return list(self.report["transformers"]) if self.report else []

    def transformer(self, class_name: str | None) -> dict[str, Any] | None:
        for t in self.transformers:
            if class_name is None or t["className"] == class_name:
                return t
        return None


Analyze = Callable[[Snapshot, int], DocumentAnalysis]


class AnalysisCache:
    """Latest analysis per URI, debounced scheduling and stale-result suppression.

    `snapshot(uri)` returns the open document's text and version (None once closed); `analyze`
    runs on `executor` and must not raise; `publish` runs on the event loop.
    """

    def __init__(
        self,
        snapshot: Callable[[str], Snapshot | None],
        analyze: Analyze,
        publish: Callable[[DocumentAnalysis], None],
        executor: Executor,
    ) -> None:
        self._snapshot = snapshot
        self._analyze = analyze
        self._publish = publish
        self._executor = executor
        self._entries: dict[str, DocumentAnalysis] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._running: dict[str, asyncio.Future[DocumentAnalysis]] = {}
        self._rerun: set[str] = set()
        # Bumped when settings change: entries of an older generation are not current.
        self.generation = 0

    # -- reading --

    def get(self, uri: str, version: int | None) -> DocumentAnalysis | None:
        """The entry for exactly this version (and the current settings), if analyzed."""
        entry = self._entries.get(uri)
        if entry is None or entry.version != version or entry.generation != self.generation:
            return None
        return entry

    def latest(self, uri: str) -> DocumentAnalysis | None:
        """The newest entry whatever its version (for "has this file had transformers")."""
        return self._entries.get(uri)

    async def current(self, uri: str, timeout: float = 10.0) -> DocumentAnalysis | None:
        """The analysis of the document's current version, analyzing it now if needed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            snap = self._snapshot(uri)
            if snap is None:
                return None
            entry = self.get(uri, snap.version)
            if entry is not None:
                return entry
            timer = self._timers.get(uri)
            future = self._running.get(uri)
            if future is None and timer is not None:
                # Edits are still arriving: wait for the debounced run rather than force one
                # per request (editors ask for lenses and hovers while the user types).
                loop = asyncio.get_running_loop()
                await asyncio.sleep(max(timer.when() - loop.time(), 0) + 0.001)
                continue
            if future is None:
                future = self._start(uri)
                if future is None:
                    return None
            try:
                await asyncio.wait_for(asyncio.shield(future), deadline - time.monotonic())
            except (TimeoutError, asyncio.TimeoutError):
                return None
            except Exception:  # the worker failed; `_finished` logged it
                return None
            await asyncio.sleep(0)  # let `_finished` store the entry and start a re-run
        return None

    # -- scheduling --

    def schedule(self, uri: str, delay: float) -> None:
        """Analyze `uri` after `delay` seconds of quiet (a later call restarts the wait)."""
        self._cancel_timer(uri)
        loop = asyncio.get_running_loop()
        self._timers[uri] = loop.call_later(max(delay, 0.0), self._start, uri)

    def invalidate(self, uri: str | None = None) -> None:
        """Forget the entry of `uri` (or of every URI after a settings change)."""
        if uri is None:
            self.generation += 1
        else:
            self._entries.pop(uri, None)

    def forget(self, uri: str) -> None:
        """The document was closed: drop its entry and any pending run."""
        self._cancel_timer(uri)
        self._entries.pop(uri, None)
        self._rerun.discard(uri)

    def close(self) -> None:
        for uri in list(self._timers):
            self._cancel_timer(uri)

    def _cancel_timer(self, uri: str) -> None:
        timer = self._timers.pop(uri, None)
        if timer is not None:
            timer.cancel()

    def _start(self, uri: str) -> asyncio.Future[DocumentAnalysis] | None:
        self._timers.pop(uri, None)
        running = self._running.get(uri)
        if running is not None:
            self._rerun.add(uri)
            return running
        snap = self._snapshot(uri)
        if snap is None:
            return None
        cached = self.get(uri, snap.version)
        if cached is not None:
            future: asyncio.Future[DocumentAnalysis] = asyncio.get_running_loop().create_future()
            future.set_result(cached)
            return future
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, self._analyze, snap, self.generation)
        self._running[uri] = future
        future.add_done_callback(lambda f: self._finished(uri, f))
        return future

    def _finished(self, uri: str, future: asyncio.Future[DocumentAnalysis]) -> None:
        self._running.pop(uri, None)
        rerun = uri in self._rerun
        self._rerun.discard(uri)
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            log.error("analysis of %s failed: %r", uri, exc)
            return
        entry = future.result()
        snap = self._snapshot(uri)
        if snap is None:  # closed meanwhile
            return
        stored = self._entries.get(uri)
        if stored is None or (stored.generation, stored.version) <= (
            entry.generation,
            entry.version,
        ):
            self._entries[uri] = entry
        if entry.version == snap.version and entry.generation == self.generation:
            self._publish(entry)
        elif rerun or uri not in self._timers:
            # Edited (or settings changed) while analyzing and no timer will pick it up.
            self._start(uri)
