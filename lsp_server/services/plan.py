"""Build an IntegrationPlan: gate-check answers + the analysis -> `PlannedIntegration`.

The server's `cdit.lsp.buildPlan` and code generation from answers call `build_plan`; every
problem of the answers or the plan is a `Problem` about one field (its `path`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cdit_runtime.contract import Problem

from .codegen_module import require_codegen
from .problems import TRANSFORMER_FIELD, field_problem, from_field_error


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
    """Answers (or a plan: a document with `cache`) and the analysis JSON -> the plan, checked.
    Raises `ProblemError` (`codegen-unavailable`) when code generation is not installed."""
    codegen = require_codegen()
    if "cache" in answers:  # already a plan
        plan = answers
    else:
        problems = codegen.answer_errors(answers)  # wrong JSON types: one error each
        if problems:
            return PlannedIntegration(None, tuple(from_field_error(e) for e in problems))
        try:
            plan = codegen.build_plan(report, answers)
        except codegen.PlanBuildError as exc:
            return PlannedIntegration(None, (field_problem(exc.path, str(exc)),))
    _, errors = codegen.parse_plan(plan)
    found = [from_field_error(e) for e in errors]
    found += [field_problem("registerName", m) for m in codegen.registry_name_errors(plan)]
    return PlannedIntegration(plan, tuple(found))
