"""Analyze a transformer source file: `AnalyzeRequest` -> `AnalysisResult`, or `ProblemError`.

The CLI's `analyze` and the server's `cdit.lsp.analyzeFile` call `analyze_source`; the editor's
per-document analysis (`features.analyzer`) too, with the text the client holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cdit_runtime.contract import Problem, ProblemError

from ..analysis import AnalysisError, AnalysisResult, PipelineCall, analyze_path
from ..files import InputError, load_json, os_problem, shown
from .problems import from_analysis_error

# Parallel degrees beyond this are not a machine anyone runs; larger values are typos.
MAX_PARALLEL_SIZE = 65536
BAD_INPUT = "bad-input"
# The analysis raised ValueError or RecursionError (the error is the ProblemError's cause).
CANNOT_ANALYZE = "cannot-analyze"


@dataclass(frozen=True)
class AnalyzeRequest:
    """What to analyze: the file (a path or a dotted module name), the class, the sources that
    inform it, the text when it differs from the disk, the parallel degrees to pre-flight."""

    path: str | Path
    class_name: str | None = None
    pipeline: str | None = None
    config: str | None = None
    model_index: str | None = None
    text: str | None = None
    cp_sizes: tuple[int, ...] = (2, 4, 8)
    tp_sizes: tuple[int, ...] = (2, 4, 8)
    registry: bool = True
    # how the pipeline is called (None: the default path)
    call: PipelineCall | None = None


def input_problem(request: AnalyzeRequest) -> Problem | None:
    """What is wrong with the inputs `analyze_path` would otherwise trip over (a FIFO given as a
    config blocks its read; a huge parallel degree), before anything is analyzed."""
    for flag, size in [
        *(("--cp-size", n) for n in request.cp_sizes),
        *(("--tp-size", n) for n in request.tp_sizes),
    ]:
        if size > MAX_PARALLEL_SIZE:
            return Problem(BAD_INPUT, f"{flag} {size}: too large (at most {MAX_PARALLEL_SIZE})")
    for flag, value in (("--config", request.config), ("--model-index", request.model_index)):
        if value:
            try:
                load_json(value, what=flag)
            except InputError as exc:
                if not (exc.missing or exc.syntax):  # those: the analysis' own message
                    return Problem(BAD_INPUT, str(exc))
    return None


def analyze_source(request: AnalyzeRequest) -> AnalysisResult:
    """The analysis of `request.path`. Raises `ProblemError`: the analysis' own error (its code,
    path and line), `unreadable` (a name the file system refuses), `bad-input`,
    `cannot-analyze`."""
    problem = input_problem(request)
    if problem is not None:
        raise ProblemError(problem)
    try:
        return analyze_path(
            request.path,
            request.class_name,
            request.pipeline,
            request.config,
            text=request.text,
            registry=request.registry,
            cp_sizes=request.cp_sizes,
            tp_sizes=request.tp_sizes,
            model_index_path=request.model_index,
            call=request.call,
        )
    except AnalysisError as exc:
        raise ProblemError(from_analysis_error(exc)) from None
    except OSError as exc:  # a name the file system refuses (too long, a loop of links)
        where = shown(exc.filename or request.path)
        raise ProblemError(Problem("unreadable", f"{where}: {os_problem(exc)}")) from None
    except (ValueError, RecursionError) as exc:  # a name with a NUL byte, an input too deep
        message = f"cannot analyze {shown(request.path)}: {type(exc).__name__}: {exc}"
        raise ProblemError(Problem(CANNOT_ANALYZE, message)) from exc
