"""`cdit-integrate generate PLAN.json [--dry-run]`: read a plan, generate, print or write.

PLAN.json is an IntegrationPlan. A document without `cache` is taken as gate-check answers
(`target`, `model.sources.transformer`, `model.transformerClass`, ...): the transformer file is
analyzed first and the plan is built from the analysis and those answers. Relative target paths
(and source files that exist there) are relative to the folder of PLAN.json.

Parts of the plan (cache, CP, TP, TE-P / VAE-P) are generated independently: a part with an
error is refused with its reason (a `warning:` line; `refused` in `--json`) and the others are
still generated; a disabled part is neither checked nor generated. `--print-plan` prints the
built plan (with the parts refused against the target) as JSON and writes nothing.

Exit codes: 0 done (or diff / plan printed), 1 refused (conflicts with edited code), 2 bad input
(unreadable or invalid plan, with field-level errors, or no part that can be generated).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

from .edits import ConflictError
from .generate import GenerationResult, generate, write
from .manifest import default_manifest_path
from .plan import FieldError, IntegrationPlan, parse_plan
from .plan_builder import PlanBuildError, build_plan

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2


def load_plan_document(path: Path) -> tuple[IntegrationPlan | None, list[FieldError]]:
    """Read PLAN.json (a plan, or answers to complete with the analysis) and check it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        return None, [FieldError("", f"cannot read {path}: {exc.strerror or exc}")]
    except json.JSONDecodeError as exc:
        return None, [FieldError("", f"{path} is not JSON: {exc}")]
    if isinstance(data, dict):
        _resolve_target(data, path.parent)
        _resolve_sources(data, path.parent)
    if isinstance(data, dict) and "cache" not in data:
        try:
            data = complete_answers(data, path.parent)
        except (PlanBuildError, ValueError) as exc:
            return None, [FieldError("model.sources.transformer", str(exc))]
    return parse_plan(data)


def _resolve_target(data: dict[str, Any], base: Path) -> None:
    """Relative target paths in a plan file are relative to the plan file's folder."""
    target = data.get("target")
    if not isinstance(target, dict):
        return
    for key in ("path", "root"):
        value = target.get(key)
        if isinstance(value, str) and value and not Path(value).is_absolute():
            target[key] = str((base / value).resolve())


def _resolve_sources(data: dict[str, Any], base: Path) -> None:
    """Relative source files that exist next to the plan file are taken from there (made
    absolute, so later steps do not depend on the working directory); dotted module names and
    other values are left for the analysis' resolver (`source_files.source_path`)."""
    model = data.get("model")
    sources = model.get("sources") if isinstance(model, dict) else None
    if not isinstance(sources, dict):
        return
    for key, value in sources.items():
        if isinstance(value, str) and value and not Path(value).is_absolute():
            candidate = base / value
            if candidate.exists():
                sources[key] = str(candidate.resolve())


def complete_answers(answers: dict[str, Any], base: Path) -> dict[str, Any]:
    """Analyze the transformer named by the answers and build the full plan."""
    from ..analysis import AnalysisError, analyze_path

    model = answers.get("model") or {}
    sources = model.get("sources") or {}
    transformer = sources.get("transformer")
    if not transformer:
        raise PlanBuildError("is required to analyze the model (no `cache` section in the plan)")

    _resolve_sources(answers, base)
    try:
        result = analyze_path(
            sources["transformer"],
            model.get("transformerClass"),
            sources.get("pipeline"),
            sources.get("config"),
            model_index_path=sources.get("modelIndex"),
        )
    except AnalysisError as exc:
        raise PlanBuildError(exc.message) from exc
    return build_plan(result.to_json(), answers)


def run_generate(
    plan_path: str,
    *,
    dry_run: bool = False,
    manifest: str | None = None,
    as_json: bool = False,
    print_plan: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    path = Path(plan_path)
    plan, errors = load_plan_document(path)
    if plan is None:
        for error in errors:
            print(f"cdit-integrate: error: {error}", file=err)
        return EXIT_BAD_INPUT
    manifest_path = Path(manifest) if manifest else default_manifest_path(path)
    result = generate(plan, manifest_path=manifest_path)
    if print_plan:
        json.dump(result.plan.to_json(), out, indent=1)
        out.write("\n")
        for error in result.plan_errors:
            print(f"cdit-integrate: error: {error}", file=err)
        _notes(result, err)
        return EXIT_BAD_INPUT if result.plan_errors else EXIT_OK
    if not result.ok:
        _report(result, out if as_json else None, err)
        return EXIT_BAD_INPUT if result.plan_errors else EXIT_REFUSED
    if dry_run:
        if as_json:
            json.dump(result.to_json() | {"diff": result.diff()}, out, indent=1)
            out.write("\n")
        else:
            out.write(result.diff())
        _notes(result, err)
        return EXIT_OK
    try:
        written = write(result)
    except ConflictError as exc:
        for conflict in exc.conflicts:
            print(f"cdit-integrate: conflict: {conflict}", file=err)
        for error in exc.errors:
            print(f"cdit-integrate: error: {error}", file=err)
        return EXIT_REFUSED
    if as_json:
        json.dump(result.to_json(), out, indent=1)
        out.write("\n")
    else:
        for file in written:
            out.write(f"wrote {file}\n")
        if not written:
            out.write("nothing to do: the generated code is up to date\n")
    _notes(result, err)
    return EXIT_OK


def _report(result: GenerationResult, out: TextIO | None, err: TextIO) -> None:
    if out is not None:
        json.dump(result.to_json(), out, indent=1)
        out.write("\n")
    for error in result.plan_errors:
        print(f"cdit-integrate: error: {error}", file=err)
    for message in result.edits.errors:
        print(f"cdit-integrate: error: {message}", file=err)
    for conflict in result.edits.conflicts:
        print(f"cdit-integrate: conflict: {conflict}", file=err)


def _notes(result: GenerationResult, err: TextIO) -> None:
    for warning in result.warnings:
        print(f"cdit-integrate: warning: {warning}", file=err)
    for item in result.review:
        print(f"cdit-integrate: review: {item}", file=err)
