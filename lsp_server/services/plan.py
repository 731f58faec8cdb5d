"""Build an IntegrationPlan: gate-check answers + the analysis -> the plan codegen reads.

Two callers, one path: the server's `cdit.lsp.buildPlan` (and generation from answers) calls
`build_plan` with the analysis it holds and gets `PlannedIntegration`, the plan and its problems
side by side; `cdit-integrate generate PLAN.json` calls `plan_from_file`, which reads the file,
analyzes the transformer the answers name (`services.analyze`), builds the plan the same way and
checks it, or raises. Every problem of the answers or the plan is a `Problem` about one field (its
`path`; ``""``: the document as a whole).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdit_runtime.contract import Problem, ProblemError, document_kind

from ..analysis import PipelineCall
from ..files import InputError, parse_json, read_text, shown
from .analyze import AnalyzeRequest, analyze_source
from .codegen_module import require_codegen
from .problems import TRANSFORMER_FIELD, field_problem, from_field_error

if TYPE_CHECKING:
    from ..codegen import IntegrationPlan

INVALID_PLAN = "invalid-plan"
NO_TRANSFORMER = "is required to analyze the model (no `cache` section in the plan)"


@dataclass(frozen=True)
class PlannedIntegration:
    """The plan (None when the answers could not be built into one) and its problems."""

    plan: dict[str, Any] | None
    problems: tuple[Problem, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """`{"plan"}` (when built) and `{"errors": [{path, message}]}` (when any)."""
        out: dict[str, Any] = {} if self.plan is None else {"plan": self.plan}
        if self.problems:
            out["errors"] = [{"path": p.path, "message": p.message} for p in self.problems]
        return out


def analysis_failed(problem: Problem) -> PlannedIntegration:
    """No plan: the transformer named by the answers could not be analyzed."""
    return PlannedIntegration(None, (field_problem(TRANSFORMER_FIELD, problem.located()),))


def build_plan(answers: dict[str, Any], report: dict[str, Any]) -> PlannedIntegration:
    """Answers (or a plan, `document_kind`) and the analysis JSON -> the plan, checked
    (its fields, and the register name against the checkout's adapters).
    Raises `ProblemError` (`codegen-unavailable`) when code generation is not installed."""
    codegen = require_codegen()
    if document_kind(answers) == "plan":
        plan = answers
    else:
        try:
            plan = plan_json(answers, report)
        except ProblemError as exc:
            return PlannedIntegration(None, exc.parts or (exc.problem,))
    _, errors = codegen.parse_plan(plan)
    found = [from_field_error(e) for e in errors]
    found += [field_problem("registerName", m) for m in codegen.registry_name_errors(plan)]
    return PlannedIntegration(plan, tuple(found))


def plan_json(answers: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """The plan document built from answers and the analysis JSON (not checked as a plan yet).
    Raises `ProblemError` (`invalid-plan`): wrong JSON types in the answers, one part each; what
    the answers select and the analysis lacks."""
    codegen = require_codegen()
    problems = codegen.answer_errors(answers)
    if problems:
        raise invalid([from_field_error(e) for e in problems])
    try:
        return codegen.build_plan(report, answers)
    except codegen.PlanBuildError as exc:
        raise invalid([field_problem(exc.path, str(exc))]) from None


def plan_from_file(path: Path) -> IntegrationPlan:
    """PLAN.json as codegen's `IntegrationPlan`: a plan, or gate-check answers (no `cache`)
    completed with the analysis of the transformer they name. Relative paths are taken from the
    file's folder (`resolve_relative`). Raises `ProblemError` (`invalid-plan`, one part per
    field; `codegen-unavailable`)."""
    data = read_plan_document(path)
    if isinstance(data, dict) and document_kind(data) == "answers":
        data = complete_answers(data)
    return checked_plan(data)


def read_plan_document(path: Path) -> Any:
    """The JSON of a plan or answers file, relative paths resolved against its folder. Only a
    regular file is read (a FIFO or a device is refused before it is opened, so nothing
    blocks), as UTF-8 JSON nested at most `MAX_JSON_DEPTH` levels. Raises `ProblemError`."""
    codegen = require_codegen()
    try:
        data = parse_json(read_text(path), what=shown(path))
    except InputError as exc:
        raise invalid([field_problem("", str(exc))]) from None
    if isinstance(data, dict):
        codegen.resolve_relative(data, path.parent)
    return data


def complete_answers(answers: dict[str, Any]) -> dict[str, Any]:
    """Answers type-checked, the transformer they name analyzed, the plan built from both.
    Raises `ProblemError` (`invalid-plan`); an analysis failure is a problem of
    `model.sources.transformer`."""
    codegen = require_codegen()
    problems = codegen.answer_errors(answers) or codegen.answer_file_errors(answers)
    if problems:
        raise invalid([from_field_error(e) for e in problems])
    model = answers.get("model") or {}
    sources = model.get("sources") or {}
    if not sources.get("transformer"):
        raise invalid([field_problem(TRANSFORMER_FIELD, NO_TRANSFORMER)])
    request = AnalyzeRequest(
        sources["transformer"],
        model.get("transformerClass"),
        sources.get("pipeline"),
        sources.get("config"),
        sources.get("modelIndex"),
        call=pipeline_call(answers),
    )
    try:
        report = analyze_source(request).to_json()
    except ProblemError as exc:
        raise invalid(analysis_failed(exc.problem).problems) from None
    return plan_json(answers, report)


def pipeline_call(answers: dict[str, Any]) -> PipelineCall | None:
    """The answers' `run` (how the verification runs call the pipeline) as the call the
    analysis decides `has_separate_cfg` for; None without one (the default path)."""
    run = answers.get("run") or {}
    args, inputs = run.get("callArgs") or {}, run.get("inputs") or {}
    if not args and not inputs:
        return None
    return PipelineCall(dict(args), tuple(inputs))


def checked_plan(data: Any) -> IntegrationPlan:
    """A plan document as codegen's `IntegrationPlan`. Raises `ProblemError` (`invalid-plan`:
    every field problem; a part with an error is not one: it is refused in the plan)."""
    plan, errors = require_codegen().parse_plan(data)
    if plan is None:
        raise invalid([from_field_error(e) for e in errors])
    return plan


def invalid(parts: list[Problem] | tuple[Problem, ...]) -> ProblemError:
    """`invalid-plan`: field problems of a plan or answers document, joined."""
    return ProblemError.joined(INVALID_PLAN, parts, "correct these fields")
