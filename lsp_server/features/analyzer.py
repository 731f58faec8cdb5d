"""One document version -> `DocumentAnalysis` (runs on the analysis worker thread, never raises).

The text the client holds is analyzed (`services.analyze`, with the text), so unsaved edits count;
names imported from other files are resolved from disk. Text the analysis cannot take (too large,
lone surrogates from a client that forwarded undecodable bytes) is handled here, and any exception
is turned into a `Failure` so the server keeps serving.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable

from pygls.workspace.position_codec import PositionCodec

from cdit_runtime.contract import Problem, ProblemError

from ..analysis import AnalysisError
from ..services.analyze import CANNOT_ANALYZE, AnalyzeRequest, analyze_source
from .anchors import Anchors, build_anchors, build_pipeline_anchors
from .diagnostics import (
    build_diagnostics,
    file_diagnostic,
    paused_diagnostic,
    separate_cfg_diagnostic,
)
from .documents import DocumentAnalysis, Failure, Snapshot
from .positions import LineIndex
from .settings import Settings

log = logging.getLogger(__name__)


def analyze_snapshot(
    snapshot: Snapshot,
    generation: int,
    settings: Settings,
    codec: PositionCodec,
    had_transformers: bool = False,
) -> DocumentAnalysis:
    """Analyze `snapshot`. `had_transformers`: an earlier version of it defined a transformer."""
    started = time.perf_counter()
    lines = LineIndex(snapshot.text, codec)

    def done(
        report=None, failure=None, diagnostics=(), anchors=None, pipeline=None
    ) -> DocumentAnalysis:
        return DocumentAnalysis(
            uri=snapshot.uri,
            version=snapshot.version,
            generation=generation,
            path=snapshot.path,
            report=report,
            failure=failure,
            diagnostics=tuple(diagnostics),
            anchors=anchors or Anchors(),
            pipeline=pipeline,
            lines=lines,
            elapsed_ms=(time.perf_counter() - started) * 1000,
        )

    if snapshot.path is None:
        return done(failure=Failure("no-path", "not a file on disk"))
    if len(snapshot.text) > settings.max_file_kb * 1024:
        size_kb = len(snapshot.text) // 1024
        message = f"{size_kb} KB is above cdit.maxFileKb ({settings.max_file_kb}); not analyzed"
        return done(failure=Failure("too-large", message))
    text = encodable(snapshot.text)
    request = AnalyzeRequest(
        snapshot.path,
        pipeline=snapshot.sources.get("pipeline"),
        config=snapshot.sources.get("config"),
        model_index=snapshot.sources.get("modelIndex"),
        text=text,
        cp_sizes=settings.cp_sizes,
        tp_sizes=settings.tp_sizes,
    )
    try:
        report = analyze_source(request).to_json()
    except ProblemError as exc:
        if exc.problem.code != CANNOT_ANALYZE:
            return _not_analyzed(exc.problem, snapshot, text, lines, had_transformers, done)
        # the analysis raised ValueError or RecursionError on text it was given: a bug
        log.error("analysis of %s failed: %s", snapshot.path, exc, exc_info=exc.__cause__)
        return done(failure=Failure("internal", exc.problem.message))
    except Exception as exc:  # a bug in the analysis must not take the server down
        log.error("analysis of %s failed:\n%s", snapshot.path, traceback.format_exc())
        return done(failure=Failure("internal", f"{type(exc).__name__}: {exc}"))
    path = str(snapshot.path)
    try:
        diagnostics = build_diagnostics(report, path, lines, dict(settings.diagnostic_severity))
        anchors = build_anchors(report, path, lines)
    except Exception as exc:
        log.error("mapping the analysis of %s failed:\n%s", path, traceback.format_exc())
        return done(report=report, failure=Failure("internal", f"{type(exc).__name__}: {exc}"))
    return done(report=report, diagnostics=diagnostics, anchors=anchors)


def _not_analyzed(
    problem: Problem,
    snapshot: Snapshot,
    text: str,
    lines: LineIndex,
    had_transformers: bool,
    done: Callable[..., DocumentAnalysis],
) -> DocumentAnalysis:
    """A document the analysis refused: a pipeline file's own diagnostics and anchors, or the
    "analysis paused" diagnostic of a transformer file that no longer parses."""
    failure = Failure(problem.code, problem.located())
    if problem.code == "no-transformer" and "def __call__" in text:
        pipeline = _pipeline(snapshot.path, text, lines)
        imported = _import_diagnostics(snapshot.path, text, lines)
        if pipeline is not None:
            separate_cfg, diagnostics, anchors = pipeline
            return done(
                failure=failure,
                diagnostics=[*diagnostics, *imported],
                anchors=anchors,
                pipeline=separate_cfg,
            )
        if imported:
            return done(failure=failure, diagnostics=imported)
    diagnostics = []
    if problem.code == "syntax-error" and had_transformers:
        short = f"line {problem.line}: {problem.message}" if problem.line else problem.located()
        diagnostics.append(paused_diagnostic(short, problem.line or 1, lines))
    return done(failure=failure, diagnostics=diagnostics)


def _pipeline(path, text: str, lines: LineIndex):
    """A pipeline file: its `has_separate_cfg`, one diagnostic and the loop anchor (or None)."""
    from ..analysis.pipeline import infer_separate_cfg

    try:
        separate_cfg = infer_separate_cfg(path, text).to_json()
    except AnalysisError:
        return None
    except Exception:
        log.error("pipeline analysis of %s failed:\n%s", path, traceback.format_exc())
        return None
    if separate_cfg.get("value") is None or not separate_cfg.get("evidence"):
        return None
    diagnostic = separate_cfg_diagnostic(separate_cfg, str(path), lines)
    return separate_cfg, [diagnostic], build_pipeline_anchors(separate_cfg, str(path))


def _import_diagnostics(path, text: str, lines: LineIndex) -> list:
    """A pipeline file's unresolved imports and copied-module note (CDIT401-403)."""
    from ..analysis.imports import check_imports
    from ..analysis.sources import read_source

    try:
        report = check_imports(read_source(path, text))
    except AnalysisError:
        return []
    except Exception:
        log.error("import check of %s failed:\n%s", path, traceback.format_exc())
        return []
    return [file_diagnostic(d.to_json(), str(path), lines) for d in report.diagnostics()]


def encodable(text: str) -> str:
    """Text with lone surrogates replaced by `?` (one character each: lines and columns hold)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
