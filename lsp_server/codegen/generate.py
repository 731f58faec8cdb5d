"""IntegrationPlan -> checked file edits, for either target; the entry point of codegen.

`generate(plan, manifest_path=...)` computes everything without writing: the edits, the unified
diff, conflicts with code the user changed after generation, plan errors that only show against
the target (missing checkout), parts refused against the target (a shadowed register or planner
name, a forward that cannot be copied: that part is left out with its reason, the others are
generated), items left for review, and formatting warnings. A plan of which no part can be
generated is an error, and so is a target that cannot be used (a folder, not UTF-8, read-only:
`EditSet.unusable`) or, given a `Workspace`, a file to write outside it. `write(result)` writes
the edits and the manifest as one transaction (all or nothing); the language server turns the
changes into an LSP WorkspaceEdit (`features/edits.workspace_edit`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..files import os_problem, shown
from .checkout import checkout_files
from .edits import EditSet, FileSpec, plan_edits, write_edits
from .manifest import Manifest
from .naming import names_for
from .plan import FieldError, IntegrationPlan
from .standalone import render_standalone
from .style import CodeStyle, detect_style, format_snippet, long_lines

# Each pass refuses at least one more part; there are a few parts, so this bound is never hit.
_MAX_PASSES = 16


@dataclass(frozen=True)
class Workspace:
    """Where generated files may go without the user's explicit permission: below one of
    `roots`. A plan naming a target elsewhere (`../..`, an absolute path) is refused with `hint`
    (how to permit it: a CLI flag, a setting)."""

    roots: tuple[Path, ...]
    hint: str = "move the target into the workspace"

    def contains(self, path: Path) -> bool:
        resolved = _resolved(path)
        return any(resolved.is_relative_to(_resolved(root)) for root in self.roots)

    def outside(self, paths: Iterable[Path]) -> FieldError | None:
        """The error for the paths not inside the workspace, or None when all are."""
        away = [p for p in paths if not self.contains(p)]
        if not away:
            return None
        where = " or ".join(shown(_resolved(r)) for r in dict.fromkeys(self.roots))
        files = shown(_resolved(away[0]))
        if len(away) > 1:
            files += f" and {len(away) - 1} more file(s)"
        return FieldError("target", f"{files} is outside the workspace ({where}); {self.hint}")


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(os.path.abspath(path)))


@dataclass
class GenerationResult:
    plan: IntegrationPlan
    edits: EditSet = field(default_factory=EditSet)
    manifest: Manifest = field(default_factory=Manifest)
    plan_errors: list[FieldError] = field(default_factory=list)
    review: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    style: CodeStyle | None = None
    root: Path | None = None  # diff paths are shown relative to it

    @property
    def ok(self) -> bool:
        return not self.plan_errors and self.edits.ok

    @property
    def refused(self) -> dict[str, tuple[str, ...]]:
        """Parts not generated because of an error (the plan's and the target's) -> why."""
        return dict(self.plan.refused)

    def diff(self) -> str:
        return self.edits.diff(self.root)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "files": [{"path": str(c.path), "created": c.created} for c in self.edits.changes],
            "unchanged": [str(p) for p in self.edits.unchanged],
            "conflicts": [c.to_json() for c in self.edits.conflicts],
            "errors": [e.to_json() for e in self.plan_errors]
            + [{"path": "", "message": m} for m in self.edits.errors],
            "refused": [
                {"part": part, "label": self.plan.part_label(part), "reasons": list(reasons)}
                for part, reasons in self.plan.refused.items()
            ],
            "review": self.review,
            "applied": self.applied,
            "warnings": self.warnings,
            "style": None
            if self.style is None
            else {
                "lineLength": self.style.line_length,
                "indent": len(self.style.indent),
                "formatter": self.style.formatter,
                "source": self.style.source,
            },
        }


def generate(
    plan: IntegrationPlan,
    *,
    manifest_path: Path | None = None,
    style: CodeStyle | None = None,
    workspace: Workspace | None = None,
) -> GenerationResult:
    """Everything `write` needs, computed without writing. With a `workspace`, a target outside
    it is an error (checked on the plan's target first, then on every file to write)."""
    manifest = Manifest.load(manifest_path)
    result = GenerationResult(plan=plan, manifest=manifest)
    if manifest.problem:
        result.plan_errors.append(FieldError("", manifest.problem))
        return result
    target = plan.target.path if plan.target.kind == "standalone" else plan.target.root
    if workspace is not None and target:
        away = workspace.outside([Path(target)])
        if away is not None:
            result.plan_errors.append(away)
            return result
    try:
        _generate(result, style)
    except (OSError, UnicodeDecodeError) as exc:  # a file read while rendering
        if isinstance(exc, OSError) and exc.filename:
            why = f"cannot read {shown(exc.filename)}: {os_problem(exc)}"
        elif isinstance(exc, OSError):
            why = f"cannot read a file it names: {os_problem(exc)}"
        else:
            why = f"a file it names (a source or the target's) is not UTF-8 (byte {exc.start})"
        result.plan_errors.append(FieldError("", why))
        return result
    if workspace is not None and result.edits.changes:
        away = workspace.outside([c.path for c in result.edits.changes])
        if away is not None:
            result.plan_errors.append(away)
            result.edits = EditSet()
            return result
    result.plan_errors += [FieldError("target", problem) for problem in result.edits.unusable]
    return result


def _generate(result: GenerationResult, style: CodeStyle | None) -> None:
    plan = result.plan
    manifest = result.manifest
    names = names_for(plan.register_name, plan.model_slug)
    specs: list[FileSpec] = []
    if plan.target.kind == "standalone":
        assert plan.target.path is not None
        path = Path(plan.target.path)
        existing = next((p for p in path.resolve().parents if p.exists()), Path.cwd())
        style = style or detect_style(existing)
        rendered = render_standalone(plan, names, width=style.line_length)
        for _ in range(_MAX_PASSES):  # refused while rendering: render again without them
            if not rendered.refused:
                break
            plan = plan.with_refused(rendered.refused)
            rendered = render_standalone(plan, names, width=style.line_length)
        result.plan = plan
        result.root = path.parent
        if _nothing_generated(result):
            return
        code = format_snippet(rendered.code, style, filename=str(path))
        result.review += rendered.review
        result.applied += rendered.applied
        result.warnings += rendered.warnings
        result.warnings += _shadowing_warnings(plan, None)
        specs = [FileSpec(path=path, content=code, must_exist=False)]
    else:
        files = checkout_files(plan, names, style)
        for _ in range(_MAX_PASSES):  # refused against the checkout: again without them
            if not files.refused or files.errors:
                break
            plan = plan.with_refused(files.refused)
            files = checkout_files(plan, names, style)
        result.plan = plan
        result.plan_errors += files.errors
        style = files.style
        if files.package is not None:
            result.root = Path(plan.target.root or files.package)
        if files.errors or _nothing_generated(result):
            return
        result.review += files.review
        result.applied += files.applied
        result.warnings += files.warnings
        if files.package is not None:
            result.warnings += _shadowing_warnings(plan, files.package)
        specs = files.specs
    result.warnings = [
        f"{plan.part_label(part)} not generated: " + "; ".join(reasons)
        for part, reasons in plan.refused.items()
    ] + result.warnings
    result.style = style
    if result.plan_errors:
        return
    result.edits = plan_edits(specs, manifest)
    if style is not None:
        for change in result.edits.changes:
            long = _long_generated_lines(change.old, change.new, style.line_length)
            if long:
                result.warnings.append(
                    f"{change.path}: {len(long)} generated line(s) exceed {style.line_length} "
                    f"columns (first: line {long[0]}); no formatter could wrap them"
                )


def _nothing_generated(result: GenerationResult) -> bool:
    """Record an error when no part of the plan can be generated (True then)."""
    plan = result.plan
    if plan.generates_cache or plan.generates_cp or plan.generates_tp:
        return False
    if plan.target.kind == "cache-dit-checkout" and plan.generated_components():
        return False
    why = "; ".join(f"{plan.part_label(p)}: {r}" for p, r in plan.not_generated().items())
    result.plan_errors.append(FieldError("", f"nothing to generate ({why})"))
    return True


def _shadowing_warnings(plan: IntegrationPlan, package: Path | None) -> list[str]:
    """What cache-dit's name-based registry lookups would do with this pipeline/transformer,
    with advice for the plan's target (the checkout's own registries for a checkout)."""
    if not plan.generates_cache:
        return []
    from ..analysis.registry_facts import read_registries, shadowing_warnings

    example = plan.example if plan.target.kind == "cache-dit-checkout" else None
    if example is not None and example.enable_separate_cfg is not None:
        return []  # the example sets it: nothing is decided by name
    return list(
        shadowing_warnings(
            plan.model.transformer_class,
            plan.model.pipeline_class,
            target=plan.target.kind,
            registries=read_registries(package) if package is not None else None,
            separate_cfg=plan.cache.has_separate_cfg,
        )
    )


def _long_generated_lines(old: str | None, new: str, width: int) -> list[int]:
    before = set((old or "").splitlines())
    return [n for n in long_lines(new, width) if new.splitlines()[n - 1] not in before]


def write(result: GenerationResult) -> list[Path]:
    """Write the edits (all or nothing on conflicts) and update the manifest."""
    return write_edits(result.edits, result.manifest)
