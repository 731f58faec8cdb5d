"""IntegrationPlan -> checked file edits, for either target; the entry point of codegen.

`generate(plan, manifest_path=...)` computes everything without writing: the edits, the unified
diff, conflicts with code the user changed after generation, plan errors that only show against
the target (register name shadowing, missing checkout), items left for review, and formatting
warnings. `write(result)` writes the edits atomically and records them in the manifest;
`to_workspace_edit(result)` turns them into LSP WorkspaceEdit data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checkout import checkout_files
from .edits import EditSet, FileSpec, plan_edits, write_edits
from .manifest import Manifest
from .naming import names_for
from .plan import FieldError, IntegrationPlan
from .standalone import render_standalone
from .style import CodeStyle, detect_style, format_snippet, long_lines


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
) -> GenerationResult:
    manifest = Manifest.load(manifest_path)
    result = GenerationResult(plan=plan, manifest=manifest)
    if manifest.problem:
        result.plan_errors.append(FieldError("", manifest.problem))
        return result
    names = names_for(plan.register_name, plan.model_slug)
    specs: list[FileSpec]
    if plan.target.kind == "standalone":
        assert plan.target.path is not None
        path = Path(plan.target.path)
        existing = next((p for p in path.resolve().parents if p.exists()), Path.cwd())
        style = style or detect_style(existing)
        rendered = render_standalone(plan, names, width=style.line_length)
        code = format_snippet(rendered.code, style, filename=str(path))
        result.review += rendered.review
        result.applied += rendered.applied
        result.warnings += rendered.warnings
        specs = [FileSpec(path=path, content=code, must_exist=False)]
        result.root = path.parent
    else:
        files = checkout_files(plan, names, style)
        result.plan_errors += files.errors
        result.review += files.review
        result.applied += files.applied
        result.warnings += files.warnings
        style = files.style
        specs = files.specs
        if files.package is not None:
            result.root = Path(plan.target.root or files.package)
    result.style = style
    if result.plan_errors:
        return result
    result.edits = plan_edits(specs, manifest)
    if style is not None:
        for change in result.edits.changes:
            long = _long_generated_lines(change.old, change.new, style.line_length)
            if long:
                result.warnings.append(
                    f"{change.path}: {len(long)} generated line(s) exceed {style.line_length} "
                    f"columns (first: line {long[0]}); no formatter could wrap them"
                )
    return result


def _long_generated_lines(old: str | None, new: str, width: int) -> list[int]:
    before = set((old or "").splitlines())
    return [n for n in long_lines(new, width) if new.splitlines()[n - 1] not in before]


def write(result: GenerationResult) -> list[Path]:
    """Write the edits (all or nothing on conflicts) and update the manifest."""
    return write_edits(result.edits, result.manifest)
