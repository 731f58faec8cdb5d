"""`workspace/executeCommand` handlers. Arguments are typed (attrs, camelCase on the wire);
results are JSON documents, and errors are data: `{"error": {"code", "message", "hint"}}`.

The ids live under `cdit.lsp.`: a language client registers the server's commands as editor
commands, so they must not collide with the extension's own `cdit.*` commands.

- `cdit.lsp.analyzeFile {uri, className?, pipelinePath?, configPath?, modelIndexPath?}`: the
  analyze JSON of the editor's text (or of the file on disk when it is not open).
- `cdit.lsp.buildPlan {uri, className?, answers}`: `{plan}` or `{errors}` (code generation).
- `cdit.lsp.generate {uri, className?, plan?, answers?, parts?, apply?}`: `{edit, files}`
  (+ `applied`).
- `cdit.lsp.runVerification {request, wait?}`: `{runId, progressToken, pid}`; with `wait`, also the
  final report (`exitCode`, `cancelled`, `result`).
- `cdit.lsp.cancelRun {runId}`: `{runId, cancelled}` once the run's process tree has ended.
- `cdit.lsp.loadCheck {sources, timeoutS?}`, `cdit.lsp.rewriteImports {uri, apply?}`: see
  `imports` (a load test of the sources in a subprocess; absolute imports for a copied module).
- `cdit.lsp.pipelineCandidates {className}`: `{candidates}`, the installed diffusers pipelines
  that declare the transformer class as a component (prefills without a model_index.json).

Generation and runs are refused in an untrusted workspace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
from lsprotocol import types

from cdit_runtime.contract import Problem, ProblemError, document_kind

from ..analysis import PipelineCall
from ..language_server import CditLanguageServer
from ..services import plan as planning
from ..services.analyze import AnalyzeRequest, analyze_source
from ..services.codegen_module import UNAVAILABLE, codegen_installed
from ..services.generate import PARTS, generate_files
from . import generation, imports
from .analyzer import encodable
from .edits import DocumentChange, apply_edit, workspace_edit
from .errors import error
from .positions import open_document, path_for, uri_for

ANALYZE_FILE = "cdit.lsp.analyzeFile"
BUILD_PLAN = "cdit.lsp.buildPlan"
GENERATE = "cdit.lsp.generate"
RUN_VERIFICATION = "cdit.lsp.runVerification"
CANCEL_RUN = "cdit.lsp.cancelRun"
LOAD_CHECK = "cdit.lsp.loadCheck"
REWRITE_IMPORTS = "cdit.lsp.rewriteImports"
PIPELINE_CANDIDATES = "cdit.lsp.pipelineCandidates"

UNTRUSTED = error(
    "untrusted",
    "this workspace is not trusted: cdit does not write files or run code in it",
    "trust the workspace (Manage Workspace Trust) to generate or verify",
)


@attrs.define
class ClassArgs:
    class_name: str


@attrs.define
class FileArgs:
    uri: str
    class_name: str | None = None
    pipeline_path: str | None = None
    config_path: str | None = None
    model_index_path: str | None = None
    # how the pipeline is called (the answers' `run`): None, the default path
    call: PipelineCall | None = None


@attrs.define
class PlanArgs:
    uri: str
    answers: dict[str, Any] = attrs.field(factory=dict)
    class_name: str | None = None


@attrs.define
class GenerateArgs:
    uri: str
    class_name: str | None = None
    plan: dict[str, Any] | None = None
    answers: dict[str, Any] | None = None
    parts: list[str] = attrs.field(factory=lambda: ["all"])
    apply: bool = False


@attrs.define
class RunArgs:
    request: dict[str, Any] | None = None
    uri: str | None = None
    class_name: str | None = None
    wait: bool = False


@attrs.define
class CancelArgs:
    run_id: str


# -- handlers: arguments -> a service -> the JSON result (a ProblemError as `{"error"}`) ------


async def analyze_file(ls: CditLanguageServer, args: FileArgs) -> dict[str, Any]:
    """The analyze JSON of a file: the editor's text when it is open, else the file on disk."""
    try:
        return await analysis_report(ls, args)
    except ProblemError as exc:
        return exc.error_json()


async def build_plan(ls: CditLanguageServer, args: PlanArgs) -> dict[str, Any]:
    """`{"plan"}` from the answers and the analysis of the file (plus `errors` when invalid)."""
    try:
        answers = resolve_answers(ls, args.uri, args.class_name, None, args.answers or None)
        planned = await planned_integration(ls, args.uri, args.class_name, answers)
    except ProblemError as exc:
        return exc.error_json()
    return planned.to_json()


async def generate(ls: CditLanguageServer, args: GenerateArgs) -> dict[str, Any]:
    if not ls.trusted:
        return UNTRUSTED
    edit, result = await generated_edit(
        ls, args.uri, args.class_name, args.plan, args.answers, args.parts
    )
    if edit is None or not args.apply:
        return result
    return await apply_edit(ls, edit, "cdit: generate", result)


async def run_verification(ls: CditLanguageServer, args: RunArgs) -> dict[str, Any]:
    if not ls.trusted:
        return UNTRUSTED
    if args.request is None:
        return error(
            "no-request",
            "a verification run needs a VerificationRequest",
            "complete the gate check; the extension builds the request from it",
        )
    root = ls.workspace.root_path
    cwd = Path(root) if root else None
    return await ls.runs.start(args.request, cwd=cwd, wait=args.wait)


async def cancel_run(ls: CditLanguageServer, args: CancelArgs) -> dict[str, Any]:
    return await ls.runs.cancel(args.run_id)


async def pipeline_candidates(ls: CditLanguageServer, args: ClassArgs) -> dict[str, Any]:
    from ..analysis.pipeline.candidates import pipelines_using

    return {"candidates": await ls.in_worker(lambda: pipelines_using(args.class_name))}


HANDLERS = {
    ANALYZE_FILE: analyze_file,
    BUILD_PLAN: build_plan,
    GENERATE: generate,
    RUN_VERIFICATION: run_verification,
    CANCEL_RUN: cancel_run,
    LOAD_CHECK: imports.load_check,
    REWRITE_IMPORTS: imports.rewrite_imports,
    PIPELINE_CANDIDATES: pipeline_candidates,
}


# -- the steps the handlers share (typed; a failure is a ProblemError) -----------------------


async def analysis_report(ls: CditLanguageServer, args: FileArgs) -> dict[str, Any]:
    """The analysis JSON of `args.uri`: the open document's cached analysis when nothing but
    the file is asked, else `analyze_source` on the worker. Raises `ProblemError`."""
    path = path_for(args.uri)
    if path is None:
        raise ProblemError(Problem("not-a-file", f"{args.uri} is not a file on disk"))
    extras = (args.pipeline_path, args.config_path, args.model_index_path, args.call)
    doc = open_document(ls.workspace, args.uri)
    if doc is not None and args.class_name is None and not any(extras):
        entry = await ls.documents.current(args.uri)
        if entry is not None and entry.report is not None:
            return entry.report
        if entry is not None and entry.failure is not None:
            raise ProblemError(Problem(entry.failure.code, entry.failure.message))
    request = AnalyzeRequest(
        path,
        args.class_name,
        args.pipeline_path,
        args.config_path,
        args.model_index_path,
        text=encodable(doc.source) if doc is not None else None,
        cp_sizes=ls.settings.cp_sizes,
        tp_sizes=ls.settings.tp_sizes,
        call=args.call,
    )

    def run() -> dict[str, Any]:
        try:
            return analyze_source(request).to_json()
        except ProblemError:
            raise
        except Exception as exc:  # never a stack trace across the boundary
            raise ProblemError(Problem("internal", f"{type(exc).__name__}: {exc}")) from exc

    return await ls.in_worker(run)


async def planned_integration(
    ls: CditLanguageServer, uri: str, class_name: str | None, answers: dict[str, Any]
) -> planning.PlannedIntegration:
    """The plan built from `answers` and the analysis of `uri`, with its problems."""
    if not codegen_installed():
        raise ProblemError(UNAVAILABLE)
    try:
        report = await analysis_report(ls, _plan_file_args(uri, class_name, answers))
    except ProblemError as exc:
        return planning.analysis_failed(exc.problem)
    return await ls.in_worker(lambda: planning.build_plan(answers, report))


def _plan_file_args(uri: str, class_name: str | None, answers: dict[str, Any]) -> FileArgs:
    """What to analyze for a plan: the open document's own analysis, unless the answers say
    how the pipeline is called (`run`): then the sources they name, for that call."""
    call = planning.pipeline_call(answers)
    if call is None:
        return FileArgs(uri, class_name)
    sources = (answers.get("model") or {}).get("sources") or {}
    return FileArgs(
        uri,
        class_name,
        sources.get("pipeline"),
        sources.get("config"),
        sources.get("modelIndex"),
        call,
    )


def resolve_answers(
    ls: CditLanguageServer,
    uri: str,
    class_name: str | None,
    plan: dict[str, Any] | None,
    answers: dict[str, Any] | None,
) -> dict[str, Any]:
    """The plan or answers to generate from (see `generation` for the order)."""
    if plan is not None:
        return plan
    if answers:
        return answers
    root = workspace_root(ls)
    stored = generation.gate_check_answers(root)
    if stored is not None:
        return stored
    path = path_for(uri) or Path("model.py")
    return generation.default_answers(ls.settings, root, path, class_name)


def workspace_root(ls: CditLanguageServer) -> Path | None:
    root = ls.workspace.root_path
    return Path(root) if root else None


async def generated_edit(
    ls: CditLanguageServer,
    uri: str,
    class_name: str | None,
    plan: dict[str, Any] | None,
    answers: dict[str, Any] | None,
    parts: list[str],
) -> tuple[types.WorkspaceEdit | None, dict[str, Any]]:
    """The edit and `{"edit": JSON, "files", "review", "warnings"}`, or (None, an error)."""
    try:
        return await _generated_edit(ls, uri, class_name, plan, answers, parts)
    except ProblemError as exc:
        return None, exc.error_json()


async def _generated_edit(
    ls: CditLanguageServer,
    uri: str,
    class_name: str | None,
    plan: dict[str, Any] | None,
    answers: dict[str, Any] | None,
    parts: list[str],
) -> tuple[types.WorkspaceEdit, dict[str, Any]]:
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        message = f"unknown parts {unknown}; use {sorted(PARTS)}"
        raise ProblemError(Problem("bad-parts", message))
    source = resolve_answers(ls, uri, class_name, plan, answers)
    if document_kind(source) == "answers":
        planned = await planned_integration(ls, uri, class_name, source)
        if planned.problems or planned.plan is None:
            raise ProblemError.joined("invalid-plan", planned.problems, "correct these answers")
        source = planned.plan
    plan_json = source
    root = workspace_root(ls)
    allowed = generation.allowed_roots(root, path_for(uri), ls.settings)
    generated = await ls.in_worker(
        lambda: generate_files(plan_json, parts, root, allowed, generation.OUTSIDE_HINT)
    )
    if not generated.changes:
        message = "the generated code is up to date: nothing to change"
        raise ProblemError(Problem("up-to-date", message))
    changes = [_document_change(ls, str(c.path), c.old, c.new) for c in generated.changes]
    edit = _workspace_edit(ls, changes)
    return edit, {
        "edit": ls.protocol._converter.unstructure(edit),
        "files": [{"path": c.path, "created": c.old is None} for c in changes],
        "review": generated.report.get("review", []),
        "warnings": generated.report.get("warnings", []),
    }


def _document_change(
    ls: CditLanguageServer, path: str, old: str | None, new: str
) -> DocumentChange:
    """A generated file as the editor will change it; refused when its open document holds
    unsaved changes."""
    doc = open_document(ls.workspace, uri_for(path))
    if doc is not None and old is not None and doc.source != old:
        raise ProblemError(Problem("unsaved", f"{path} has unsaved changes", "save it first"))
    return DocumentChange(path, old, new, doc.version if doc is not None else None)


def _workspace_edit(ls: CditLanguageServer, changes: list[DocumentChange]) -> types.WorkspaceEdit:
    capabilities = ls.client_capabilities.workspace
    edit_caps = capabilities.workspace_edit if capabilities else None
    try:
        return workspace_edit(
            changes,
            ls.workspace.position_codec,
            document_changes=bool(edit_caps and edit_caps.document_changes),
            annotations=bool(edit_caps and edit_caps.change_annotation_support),
        )
    except ValueError as exc:
        raise ProblemError(Problem("client-cannot-create-files", str(exc))) from None
