"""`cdit-integrate generate PLAN.json [--dry-run]`: read a plan, generate, print or write.

PLAN.json is an IntegrationPlan. A document without `cache` is taken as gate-check answers
(`target`, `model.sources.transformer`, `model.transformerClass`, ...): the transformer file is
analyzed first and the plan is built from the analysis and those answers. Relative target paths
(and source files that exist there) are relative to the folder of PLAN.json.

Parts of the plan (cache, CP, TP, TE-P / VAE-P) are generated independently: a part with an
error is refused with its reason (a `warning:` line; `refused` in `--json`) and the others are
still generated; a disabled part is neither checked nor generated. `--print-plan` prints the
built plan (with the parts refused against the target) as JSON and writes nothing.

Targets are written only inside the workspace (the current folder, or the plan's own folder:
the one above `.cdit` for a plan kept there) unless `--allow-outside-workspace` is given: a plan
naming `../../x.py` or an absolute path elsewhere is refused. The generated files and the
manifest are written as one transaction (`edits.write_all`): all of them, or none.

Exit codes: 0 done (or diff / plan printed), 1 refused (conflicts with edited code), 2 bad input,
one `error:` line each, never a traceback: an unreadable or invalid plan or answers file (not a
regular file, not UTF-8, not JSON, nested too deeply, wrong types, field-level errors), a target
or manifest that cannot be used (a folder, under a file, not UTF-8, read-only, outside the
workspace), a write that failed (everything restored), or no part that can be generated.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from ..files import InputError, load_json, os_problem, parse_json, read_text, shown
from .edits import ConflictError, WriteError
from .generate import GenerationResult, Workspace, generate, write
from .manifest import MANIFEST_DIR, default_manifest_path
from .plan import FieldError, IntegrationPlan, parse_plan
from .plan_builder import PlanBuildError, build_plan

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2


def load_plan_document(path: Path) -> tuple[IntegrationPlan | None, list[FieldError]]:
    """Read PLAN.json (a plan, or answers to complete with the analysis) and check it.

    Only a regular file is read (a FIFO or a device is refused before it is opened, so nothing
    blocks), as UTF-8 JSON nested at most `MAX_JSON_DEPTH` levels; answers are type-checked
    before the analysis runs. Every problem is a `FieldError` with a one-line message."""
    try:
        data = parse_json(read_text(path), what=shown(path))
    except InputError as exc:
        return None, [FieldError("", str(exc))]
    if isinstance(data, dict):
        resolve_relative(data, path.parent)
    if isinstance(data, dict) and "cache" not in data:
        problems = answer_errors(data) or answer_file_errors(data)
        if problems:
            return None, problems
        try:
            data = complete_answers(data, path.parent)
        except (PlanBuildError, ValueError) as exc:
            return None, [FieldError("model.sources.transformer", str(exc))]
    return parse_plan(data)


def resolve_relative(data: dict[str, Any], base: Path) -> None:
    """Make the relative paths of a plan or answers document absolute against `base` (the plan
    file's folder; the workspace root in the editor): target paths always, source files when
    they exist there (other values may be dotted module names)."""
    _resolve_target(data, base)
    _resolve_sources(data, base)


def _usable(value: object) -> bool:
    return isinstance(value, str) and bool(value) and "\x00" not in value


def _resolve_target(data: dict[str, Any], base: Path) -> None:
    """Relative target paths in a plan file are relative to the plan file's folder."""
    target = data.get("target")
    if not isinstance(target, dict):
        return
    for key in ("path", "root"):
        value = target.get(key)
        if _usable(value) and not Path(value).is_absolute():
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
        if _usable(value) and not Path(value).is_absolute():
            candidate = base / value
            try:
                found = candidate.exists()
            except (OSError, ValueError):  # a name the file system refuses: left as it is
                found = False
            if found:
                sources[key] = str(candidate.resolve())


# Gate-check answers: the fields `complete_answers` / `build_plan` read, with the JSON types they
# accept (None: absent or null). The rest of the document is checked as a plan afterwards.
_STR = (str, type(None))
_OBJ = (dict, type(None))
_BOOL = (bool, type(None))
_ANSWER_FIELDS: dict[str, tuple[type, ...]] = {
    "model": _OBJ,
    "model.transformerClass": _STR,
    "model.pipelineClass": _STR,
    "model.transformerModule": _STR,
    "model.localPath": _STR,
    "model.defaultModelId": _STR,
    "model.sources": _OBJ,
    "model.sources.transformer": _STR,
    "model.sources.pipeline": _STR,
    "model.sources.config": _STR,
    "model.sources.modelIndex": _STR,
    "registerName": _STR,
    "modelSlug": _STR,
    "target": _OBJ,
    "contextParallel": _OBJ,
    "contextParallel.enabled": _BOOL,
    "contextParallel.ulyssesAnything": _BOOL,
    "tensorParallel": _OBJ,
    "tensorParallel.enabled": _BOOL,
    "tensorParallel.strategy": _STR,
    "example": _OBJ,
}
_JSON_TYPE = {str: "a string", dict: "an object", bool: "true or false", type(None): "null"}


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    return _JSON_TYPE.get(type(value), type(value).__name__)


def answer_file_errors(answers: dict[str, Any]) -> list[FieldError]:
    """Problems with the JSON files the analysis of the answers would read (`model.sources.
    config`, `modelIndex`) that it does not report itself: a FIFO (its read would block), a
    folder, nesting too deep. A missing file or bad JSON is left to the analysis' message."""
    sources = (answers.get("model") or {}).get("sources") or {}
    errors = []
    for key in ("config", "modelIndex"):
        if sources.get(key):
            try:
                load_json(sources[key])
            except InputError as exc:
                if not (exc.missing or exc.syntax):
                    errors.append(FieldError(f"model.sources.{key}", str(exc)))
    return errors


def answer_errors(answers: dict[str, Any]) -> list[FieldError]:
    """Type errors in gate-check answers (before they are analyzed and built into a plan)."""
    errors = []
    for dotted, allowed in _ANSWER_FIELDS.items():
        value: Any = answers
        for key in dotted.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if not isinstance(value, allowed):
            wanted = " or ".join(_JSON_TYPE[t] for t in allowed)
            errors.append(FieldError(dotted, f"expected {wanted}, got {_json_type(value)}"))
        elif isinstance(value, str) and "\x00" in value:
            errors.append(FieldError(dotted, "contains a NUL byte"))
    return errors


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
    except OSError as exc:  # a name the file system refuses (too long, a loop of links)
        raise PlanBuildError(f"{shown(exc.filename or transformer)}: {os_problem(exc)}") from None
    except RecursionError:
        raise PlanBuildError(f"{shown(transformer)}: input nested too deeply") from None
    return build_plan(result.to_json(), answers)


def run_generate(
    plan_path: str,
    *,
    dry_run: bool = False,
    manifest: str | None = None,
    as_json: bool = False,
    print_plan: bool = False,
    allow_outside_workspace: bool = False,
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
    # --print-plan writes nothing: the plan is shown whatever its target
    workspace = None if allow_outside_workspace or print_plan else cli_workspace(path)
    result = generate(plan, manifest_path=manifest_path, workspace=workspace)
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
    except WriteError as exc:  # nothing was changed: every file written so far is restored
        print(f"cdit-integrate: error: {exc}", file=err)
        return EXIT_BAD_INPUT
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


def cli_workspace(plan_path: Path) -> Workspace:
    """Where `generate PLAN.json` may write without `--allow-outside-workspace`: below the
    current folder, or below the plan's own workspace (its folder; the folder above `.cdit`
    when the plan lives in one, as the editor's plans do)."""
    folder = Path(os.path.abspath(plan_path)).parent
    if folder.name == MANIFEST_DIR:
        folder = folder.parent
    return Workspace(
        roots=(Path.cwd(), folder),
        hint="pass --allow-outside-workspace to write there",
    )


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
