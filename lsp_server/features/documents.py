"""The analysis of open documents: one entry per URI, computed off the event loop.

`AnalysisCache` debounces edits per URI, analyzes a snapshot of the text on a single worker thread
(the analysis keeps module-level parse caches, so it is never run twice at once), and hands the
result to `publish` only when the document still is what was analyzed: a result for text the
client has since replaced is kept for nothing and never reaches the client. While one analysis of
a URI runs, newer edits wait for it and then start one more run for the latest text.

An entry is current when its version, its text (a digest, so a client that reuses a version
number for new text is not served the old analysis), the settings generation and the URI's
invalidation count all match. The client owns the text: a change to a lower version is taken as
the document's new state like any other, and each request starts at most one analysis.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import cached_property
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

    @cached_property
    def digest(self) -> str:
        """What the analysis depends on besides the version: the text and the other sources."""
        h = hashlib.blake2b(self.text.encode("utf-8", "surrogatepass"), digest_size=16)
        for name, value in sorted(self.sources.items()):
            h.update(f"\0{name}={value}".encode("utf-8", "surrogatepass"))
        return h.hexdigest()


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


@dataclass(frozen=True)
class _Key:
    """What an analysis was computed from: it is current while all four still hold."""

    version: int
    digest: str
    generation: int
    epoch: int


@dataclass
class _Run:
    future: asyncio.Future[DocumentAnalysis]
    key: _Key


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
        # The most recently finished analysis of each URI and what it was computed from (runs of
        # one URI never overlap, so the last to finish is of the newest text).
        self._entries: dict[str, tuple[DocumentAnalysis, _Key]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._running: dict[str, _Run] = {}
        self._rerun: set[str] = set()
        # Bumped per URI by `invalidate(uri)` (files it imports changed on disk).
        self._epochs: dict[str, int] = {}
        # Bumped when settings change: entries of an older generation are not current.
        self.generation = 0

    # -- reading --

    def _key(self, snap: Snapshot) -> _Key:
        return _Key(snap.version, snap.digest, self.generation, self._epochs.get(snap.uri, 0))

    def _current_entry(self, snap: Snapshot) -> DocumentAnalysis | None:
        stored = self._entries.get(snap.uri)
        if stored is None or stored[1] != self._key(snap):
            return None
        return stored[0]

    def get(self, uri: str, version: int | None) -> DocumentAnalysis | None:
        """The entry of the document as it is now, if analyzed and still at `version`."""
        snap = self._snapshot(uri)
        if snap is None or snap.version != version:
            return None
        return self._current_entry(snap)

    def latest(self, uri: str) -> DocumentAnalysis | None:
        """The newest entry whatever its version (for "has this file had transformers")."""
        stored = self._entries.get(uri)
        return stored[0] if stored else None

    async def current(self, uri: str, timeout: float = 10.0) -> DocumentAnalysis | None:
        """The analysis of the document as it is now, analyzing it now if needed.

        Waits for a debounced or running analysis; starts at most one itself.
        """
        deadline = time.monotonic() + timeout
        started = False
        while time.monotonic() < deadline:
            snap = self._snapshot(uri)
            if snap is None:
                return None
            entry = self._current_entry(snap)
            if entry is not None:
                return entry
            timer = self._timers.get(uri)
            run = self._running.get(uri)
            if run is None and timer is not None:
                # Edits are still arriving: wait for the debounced run rather than force one
                # per request (editors ask for lenses and hovers while the user types).
                loop = asyncio.get_running_loop()
                await asyncio.sleep(max(timer.when() - loop.time(), 0) + 0.001)
                continue
            if run is None:
                if started:  # not expected: `_finished` stores what it ran or starts a re-run
                    log.warning("analysis of %s is not current after a run; giving up", uri)
                    return None
                started = True
                run = self._start(uri)
                if run is None:
                    return None
            try:
                result = await asyncio.wait_for(
                    asyncio.shield(run.future), deadline - time.monotonic()
                )
            except (TimeoutError, asyncio.TimeoutError):
                return None
            except Exception:  # the worker failed; `_finished` logged it
                return None
            snap = self._snapshot(uri)
            if snap is not None and run.key == self._key(snap):
                return result
            await asyncio.sleep(0)  # let `_finished` start the re-run for the newer text
        return None

    # -- scheduling --

    def schedule(self, uri: str, delay: float) -> None:
        """Analyze `uri` after `delay` seconds of quiet (a later call restarts the wait)."""
        self._cancel_timer(uri)
        loop = asyncio.get_running_loop()
        self._timers[uri] = loop.call_later(max(delay, 0.0), self._start, uri)

    def invalidate(self, uri: str | None = None) -> None:
        """Make the entry of `uri` (or of every URI after a settings change) not current."""
        if uri is None:
            self.generation += 1
        else:
            self._epochs[uri] = self._epochs.get(uri, 0) + 1

    def forget(self, uri: str) -> None:
        """The document was closed: drop its entry and any pending run."""
        self._cancel_timer(uri)
        self._entries.pop(uri, None)
        self._epochs.pop(uri, None)
        self._rerun.discard(uri)

    def close(self) -> None:
        for uri in list(self._timers):
            self._cancel_timer(uri)

    def _cancel_timer(self, uri: str) -> None:
        timer = self._timers.pop(uri, None)
        if timer is not None:
            timer.cancel()

    def _start(self, uri: str) -> _Run | None:
        self._timers.pop(uri, None)
        running = self._running.get(uri)
        if running is not None:
            self._rerun.add(uri)
            return running
        snap = self._snapshot(uri)
        if snap is None:
            return None
        key = self._key(snap)
        loop = asyncio.get_running_loop()
        cached = self._current_entry(snap)
        if cached is not None:
            done: asyncio.Future[DocumentAnalysis] = loop.create_future()
            done.set_result(cached)
            return _Run(done, key)
        future = loop.run_in_executor(self._executor, self._analyze, snap, self.generation)
        run = _Run(future, key)
        self._running[uri] = run
        future.add_done_callback(lambda f: self._finished(uri, run))
        return run

    def _finished(self, uri: str, run: _Run) -> None:
        if self._running.get(uri) is run:
            del self._running[uri]
        rerun = uri in self._rerun
        self._rerun.discard(uri)
        future = run.future
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
        self._entries[uri] = (entry, run.key)
        if run.key == self._key(snap):
            self._publish(entry)
        elif rerun or uri not in self._timers:
            # Edited (or settings changed) while analyzing and no timer will pick it up.
            self._start(uri)
