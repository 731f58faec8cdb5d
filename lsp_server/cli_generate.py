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
manifest are written as one transaction: all of them, or none.

The steps are the services' (`services.plan.plan_from_file`, `services.generate.prepare` and
`write_generated`); every failure is their `ProblemError`, printed here one line per problem:
`error: <field>: <message>` (`<plan>` for the document as a whole), `conflict: <file>: ...`.

Exit codes: 0 done (or diff / plan printed), 1 refused (conflicts with edited code), 2 bad input,
one `error:` line each, never a traceback: an unreadable or invalid plan or answers file (not a
regular file, not UTF-8, not JSON, nested too deeply, wrong types, field-level errors), a target
or manifest that cannot be used (a folder, under a file, not UTF-8, read-only, outside the
workspace), a write that failed (everything restored), or no part that can be generated.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from cdit_runtime.contract import Problem, ProblemError

from .services import generate as generating
from .services import plan as planning
from .services.problems import CANNOT_EDIT, CONFLICT, FIELD

if TYPE_CHECKING:
    from .codegen import GenerationResult, Workspace

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2
OUTSIDE_HINT = "pass --allow-outside-workspace to write there"
# The order problems are printed in: the plan's, then the files', then the conflicts.
_ORDER = {FIELD: 0, CANNOT_EDIT: 1, CONFLICT: 2}


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
    try:
        plan = planning.plan_from_file(path)
        manifest_path = Path(manifest) if manifest else generating.manifest_beside(path)
        # --print-plan writes nothing: the plan is shown whatever its target
        workspace = None if allow_outside_workspace or print_plan else cli_workspace(path)
        result = generating.prepare(plan, manifest_path, workspace)
    except generating.GenerationFailed as exc:
        if print_plan:
            return _print_plan(exc.result, exc.parts or (), out, err)
        if as_json:
            _dump(exc.result.to_json(), out)
        return _failed(exc, err)
    except ProblemError as exc:
        return _failed(exc, err)
    if print_plan:
        return _print_plan(result, (), out, err)
    if dry_run:
        if as_json:
            _dump(result.to_json() | {"diff": result.diff()}, out)
        else:
            out.write(result.diff())
        _notes(result, err)
        return EXIT_OK
    try:
        written = generating.write_generated(result)
    except ProblemError as exc:
        return _failed(exc, err)
    if as_json:
        _dump(result.to_json(), out)
    else:
        for file in written:
            out.write(f"wrote {file}\n")
        if not written:
            out.write("nothing to do: the generated code is up to date\n")
    _notes(result, err)
    return EXIT_OK


def cli_workspace(plan_path: Path) -> Workspace:
    """Where `generate PLAN.json` may write without `--allow-outside-workspace`."""
    return generating.plan_file_workspace(plan_path, OUTSIDE_HINT)


def _print_plan(
    result: GenerationResult, parts: Sequence[Problem], out: TextIO, err: TextIO
) -> int:
    """The plan as generated (its refused parts included), its problems (a conflict with edited
    code is not one: nothing is written), the notes."""
    _dump(result.plan.to_json(), out)
    problems = [p for p in parts if p.code == FIELD]
    for problem in problems:
        print(_line(problem), file=err)
    _notes(result, err)
    return EXIT_BAD_INPUT if problems else EXIT_OK


def _failed(exc: ProblemError, err: TextIO) -> int:
    """One line per problem; exit 1 when only conflicts or files refused it, else 2."""
    parts = sorted(exc.parts or (exc.problem,), key=lambda p: _ORDER.get(p.code, 0))
    for problem in parts:
        print(_line(problem), file=err)
    refused = exc.parts and all(p.code in (CONFLICT, CANNOT_EDIT) for p in exc.parts)
    return EXIT_REFUSED if refused else EXIT_BAD_INPUT


def _line(problem: Problem) -> str:
    if problem.code == CONFLICT:
        return f"cdit-integrate: conflict: {problem.message}"
    if problem.code == FIELD:
        return f"cdit-integrate: error: {problem.path or '<plan>'}: {problem.message}"
    return f"cdit-integrate: error: {problem.located()}"


def _dump(data: Any, out: TextIO) -> None:
    json.dump(data, out, indent=1)
    out.write("\n")


def _notes(result: GenerationResult, err: TextIO) -> None:
    for warning in result.warnings:
        print(f"cdit-integrate: warning: {warning}", file=err)
    for item in result.review:
        print(f"cdit-integrate: review: {item}", file=err)
