"""Generate an integration: a plan -> the files to change and the updated manifest.

`prepare` computes codegen's edits without writing (or raises `GenerationFailed`, carrying what
codegen computed); `write_generated` writes them and the manifest as one transaction. The CLI's
`generate` calls both. The server never writes a file itself: `generate_files` returns the
changes (codegen's `FileChange`: path, old text, new text) for the client to preview and apply,
the manifest among them, so a later run tells generated code from the user's edits exactly as
`cdit-integrate generate` does. Failures are a `ProblemError` joining one `Problem` per plan
field or edited region.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdit_runtime.contract import Problem, ProblemError

from ..files import MAX_JSON_DEPTH, depth
from .codegen_module import require_codegen
from .problems import CONFLICT, cannot_edit, field_problem, from_conflict, from_field_error

if TYPE_CHECKING:
    from ..codegen import FileChange, GenerationResult, IntegrationPlan, Workspace

MANIFEST = Path(".cdit") / "generated.json"
NOTHING_CHANGED = "nothing was changed"
GENERATION_FAILED = "generation-failed"
WRITE_FAILED = "write-failed"

# The integration parts a code action can generate. Parts other than "all" select files of the
# cache-dit checkout target; a standalone module holds every part in one file.
PARTS = {
    "all": "the integration (everything)",
    "adapter": "BlockAdapter",
    "patch_functor": "PatchFunctor skeleton",
    "planners": "CP and TP planners",
    "components": "text-encoder / VAE planners",
    "cli_example": "CLI example",
}
_PART_PATHS = {
    "adapter": ("caching/block_adapters/",),
    "patch_functor": ("caching/patch_functors/",),
    "planners": ("distributed/transformers/",),
    "components": ("distributed/text_encoders/", "distributed/autoencoders/"),
    "cli_example": ("_utils/",),
}


@dataclass
class GeneratedFiles:
    """The file changes (the manifest included; none: up to date) and codegen's report."""

    changes: list[FileChange] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)


def generate_files(
    plan: dict[str, Any],
    parts: Sequence[str],
    root: Path | None,
    allowed: tuple[Path, ...] | None = None,
    outside_hint: str = "",
) -> GeneratedFiles:
    """Run codegen for `plan` (`parts` of it) and return the changed files plus the manifest.
    Relative paths in `plan` are taken from `root`; with `allowed`, a file to write outside those
    folders is an error (`outside_hint` says what to do). Raises `ProblemError`: `conflict`
    (generated code the user edited), `generation-failed` (plan problems), `codegen-unavailable`.
    """
    codegen = require_codegen()
    if depth(plan) > MAX_JSON_DEPTH:  # before anything recursive (deepcopy, the checks) sees it
        message = f"nested more than {MAX_JSON_DEPTH} levels deep"
        raise ProblemError.joined(
            GENERATION_FAILED, [field_problem("plan", message)], NOTHING_CHANGED
        )
    plan = copy.deepcopy(plan)
    if root is not None:
        codegen.resolve_relative(plan, root)
    parsed, errors = codegen.parse_plan(plan)
    if parsed is None or errors:
        parts_ = [from_field_error(e, "plan") for e in errors]
        raise ProblemError.joined(GENERATION_FAILED, parts_, NOTHING_CHANGED)
    manifest_path = (root / MANIFEST) if root is not None else None
    workspace = None if allowed is None else codegen.Workspace(allowed, hint=outside_hint)
    result = prepare(parsed, manifest_path, workspace, default_path="plan")
    report = result.to_json()
    changes = [c for c in result.edits.changes if _selected(c.path, parts, parsed.target.kind)]
    if not changes:
        return GeneratedFiles(report=report)
    manifest = result.manifest
    for change in changes:
        manifest.record(change.path, change.regions)
    for path, regions in result.edits.recorded.items():
        manifest.record(path, regions)
    if manifest.path is not None:
        old = manifest.path.read_text(encoding="utf-8") if manifest.path.is_file() else None
        if old != manifest.text():
            changes.append(codegen.FileChange(manifest.path, old, manifest.text()))
    return GeneratedFiles(changes=changes, report=report)


class GenerationFailed(ProblemError):
    """codegen cannot generate the plan as asked: one part per problem (`invalid-field`: the
    plan's and the target's, `cannot-edit`: a file it cannot edit, `conflict`: generated code
    the user changed); `result` is what codegen computed (the plan with its refused parts, the
    report, the warnings), for a caller that shows it anyway."""

    def __init__(self, result: GenerationResult, default_path: str = "") -> None:
        problems = [from_conflict(c) for c in result.edits.conflicts]
        problems += [from_field_error(e, default_path) for e in result.plan_errors]
        problems += [cannot_edit(m, default_path) for m in result.edits.errors]
        code = CONFLICT if result.edits.conflicts else GENERATION_FAILED
        joined = ProblemError.joined(code, problems, NOTHING_CHANGED)
        super().__init__(joined.problem, joined.parts)
        self.result = result


def prepare(
    plan: IntegrationPlan,
    manifest_path: Path | None,
    workspace: Workspace | None = None,
    default_path: str = "",
) -> GenerationResult:
    """codegen's edits for `plan`, computed without writing anything (`write_generated` writes
    them). Raises `GenerationFailed` (a problem without a field takes `default_path`)."""
    result = require_codegen().generate(plan, manifest_path=manifest_path, workspace=workspace)
    if not result.ok:
        raise GenerationFailed(result, default_path)
    return result


def write_generated(result: GenerationResult) -> list[Path]:
    """Write the generated files and the manifest as one transaction: all of them, or none.
    Returns the files written. Raises `ProblemError`: `conflict` (a file changed since it was
    read), `write-failed` (everything restored)."""
    codegen = require_codegen()
    try:
        return codegen.write(result)
    except codegen.ConflictError as exc:
        parts = [from_conflict(c) for c in exc.conflicts] + [cannot_edit(m) for m in exc.errors]
        raise ProblemError.joined(CONFLICT, parts, NOTHING_CHANGED) from None
    except codegen.WriteError as exc:
        raise ProblemError(Problem(WRITE_FAILED, str(exc))) from None


def manifest_beside(plan_path: Path) -> Path:
    """The manifest of a plan file's generated code: `.cdit/generated.json` in its folder."""
    return require_codegen().default_manifest_path(plan_path)


def plan_file_workspace(plan_path: Path, hint: str) -> Workspace:
    """Where generation from a plan file may write without the user's permission (`hint` says
    how to give it): below the current folder, or below the plan's own workspace (its folder;
    the folder above `.cdit` for a plan kept there, as the editor's plans are)."""
    codegen = require_codegen()
    folder = Path(os.path.abspath(plan_path)).parent
    if folder.name == MANIFEST.parent.name:
        folder = folder.parent
    return codegen.Workspace(roots=(Path.cwd(), folder), hint=hint)


def _selected(path: Path, parts: Sequence[str], target_kind: str) -> bool:
    if "all" in parts or target_kind == "standalone":
        return True
    text = path.as_posix()
    return any(f"/{prefix}" in text for part in parts for prefix in _PART_PATHS.get(part, ()))
