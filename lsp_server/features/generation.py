"""The bridge to code generation (`lsp_server.codegen`): plans and generated files.

The server never writes a file itself. It asks codegen for the edit set (`generate`: conflict
checks, parse checks, idempotence) and hands the files as a `WorkspaceEdit` to the client, which
previews and applies it. The edit also carries codegen's manifest (`.cdit/generated.json` in the
workspace, the record of what was generated), so a later run tells generated code from the
user's edits exactly as `cdit-integrate generate` does.

Where the answers come from, first found: the command's `plan`, its `answers`, the gate check's
`.cdit/integration.json` in the workspace, else defaults from the settings (`cdit.target`, a
standalone module `<transformer file stem>_cdit.py` at the workspace root, or the checkout at
`cdit.cacheDitPath`).

Relative paths in them are relative to the workspace root (not to the server's working folder),
and generated files go only inside the workspace folder or the checkout `cdit.cacheDitPath`
names (the user's own setting): a plan naming a target elsewhere (`../..`, an absolute path) is
refused, as `cdit-integrate generate` refuses it without `--allow-outside-workspace`.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ..files import MAX_JSON_DEPTH, InputError, depth, load_json
from .edits import DocumentChange
from .settings import Settings

GATE_CHECK = Path(".cdit") / "integration.json"
MANIFEST = Path(".cdit") / "generated.json"

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


class GenerationUnavailable(Exception):
    """Code generation cannot run here (the package is not part of this build)."""


@dataclass
class Generated:
    """What a generation produced: file changes (the manifest included) or the reasons why not."""

    changes: list[DocumentChange] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    conflicts: list[dict[str, str]] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors and not self.conflicts


def codegen_installed() -> bool:
    """Whether code generation is part of this build (without importing it: libcst is slow)."""
    try:
        return importlib.util.find_spec("lsp_server.codegen") is not None
    except ImportError:
        return False


def codegen_module() -> ModuleType | None:
    """`lsp_server.codegen` when it is part of this build, else None."""
    try:
        if importlib.util.find_spec("lsp_server.codegen") is None:
            return None
        return importlib.import_module("lsp_server.codegen")
    except ImportError:
        return None


def _codegen() -> ModuleType:
    module = codegen_module()
    if module is None:
        raise GenerationUnavailable("code generation (lsp_server.codegen) is not installed")
    return module


def gate_check_answers(root: Path | None) -> dict[str, Any] | None:
    """The gate check's answers (or plan) stored in the workspace, if any."""
    if root is None:
        return None
    try:  # a regular file only (a FIFO there would block the server), UTF-8 JSON, not too deep
        data = load_json(root / GATE_CHECK)
    except InputError:
        return None
    return data if isinstance(data, dict) else None


class GateCheckSources:
    """The sources the gate check names for a transformer file (pipeline, config, model index).

    Read from the workspace's `.cdit/integration.json` and re-read when it changes, so that the
    diagnostics of the transformer file use the real pipeline (has_separate_cfg, inputs it
    passes) and config (head counts, block counts).
    """

    def __init__(self) -> None:
        self._key: tuple[Path, int] | None = None
        self._answers: dict[str, Any] | None = None

    def for_transformer(self, root: Path | None, transformer: Path | None) -> dict[str, str]:
        if root is None or transformer is None:
            return {}
        file = root / GATE_CHECK
        try:
            key = (file, file.stat().st_mtime_ns)
        except OSError:
            return {}
        if key != self._key:
            self._key, self._answers = key, gate_check_answers(root)
        model = (self._answers or {}).get("model") or {}
        sources = model.get("sources") if isinstance(model, dict) else None
        if not isinstance(sources, dict) or not isinstance(sources.get("transformer"), str):
            return {}
        if _resolve(root, sources["transformer"]) != transformer.resolve():
            return {}
        return {
            name: str(_resolve(root, value))
            for name, value in sources.items()
            if name in ("pipeline", "config", "modelIndex") and isinstance(value, str) and value
        }


def _resolve(root: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return (path if path.is_absolute() else root / path).resolve()


def default_answers(
    settings: Settings, root: Path | None, transformer: Path, class_name: str | None
) -> dict[str, Any]:
    answers: dict[str, Any] = {"model": {"transformerClass": class_name} if class_name else {}}
    if settings.target == "cache-dit-checkout" and settings.cache_dit_path:
        answers["target"] = {"kind": "cache-dit-checkout", "root": settings.cache_dit_path}
    else:
        folder = root or transformer.parent
        answers["target"] = {
            "kind": "standalone",
            "path": str(folder / f"{transformer.stem}_cdit.py"),
        }
    return answers


def build_plan(answers: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """Gate-check answers + the analysis JSON -> `{"plan"}`, with `errors` when it is invalid."""
    codegen = _codegen()
    if "error" in report:
        return {
            "errors": [{"path": "model.sources.transformer", "message": report["error"]["message"]}]
        }
    if "cache" in answers:  # already a plan
        plan = answers
    else:
        problems = codegen.answer_errors(answers)  # wrong JSON types: one error each
        if problems:
            return {"errors": [e.to_json() for e in problems]}
        try:
            plan = codegen.build_plan(report, answers)
        except codegen.PlanBuildError as exc:
            return {"errors": [{"path": exc.path, "message": str(exc)}]}
    _, errors = codegen.parse_plan(plan)
    out: dict[str, Any] = {"plan": plan}
    found = [e.to_json() for e in errors]
    found += [
        {"path": "registerName", "message": message}
        for message in codegen.registry_name_errors(plan)
    ]
    if found:
        out["errors"] = found
    return out


OUTSIDE_HINT = (
    "the editor generates only inside the workspace folder (or the checkout cdit.cacheDitPath "
    "names): move the target there, or run `cdit-integrate generate --allow-outside-workspace`"
)


def allowed_roots(root: Path | None, document: Path | None, settings: Settings) -> tuple[Path, ...]:
    """Where generation may write: the workspace root (the document's folder without one) and
    the checkout the user's `cdit.cacheDitPath` setting names."""
    roots = [root] if root is not None else [document.parent] if document is not None else []
    if settings.cache_dit_path:
        roots.append(Path(settings.cache_dit_path).expanduser())
    return tuple(roots)


def generate(
    plan: dict[str, Any],
    parts: list[str],
    root: Path | None,
    allowed: tuple[Path, ...] | None = None,
) -> Generated:
    """Run codegen for `plan` and return the changed files plus the updated manifest. Relative
    paths in `plan` are taken from `root`; with `allowed`, a file to write outside those folders
    is an error."""
    codegen = _codegen()
    if depth(plan) > MAX_JSON_DEPTH:  # before anything recursive (deepcopy, the checks) sees it
        message = f"nested more than {MAX_JSON_DEPTH} levels deep"
        return Generated(errors=[{"path": "", "message": message}])
    plan = copy.deepcopy(plan)
    if root is not None:
        codegen.resolve_relative(plan, root)
    parsed, errors = codegen.parse_plan(plan)
    if parsed is None or errors:
        return Generated(errors=[e.to_json() for e in errors])
    manifest_path = (root / MANIFEST) if root is not None else None
    workspace = None if allowed is None else codegen.Workspace(allowed, hint=OUTSIDE_HINT)
    result = codegen.generate(parsed, manifest_path=manifest_path, workspace=workspace)
    report = result.to_json()
    if not result.ok:
        return Generated(errors=report["errors"], conflicts=report["conflicts"], report=report)
    changes = [c for c in result.edits.changes if _selected(c.path, parts, parsed.target.kind)]
    if not changes:
        return Generated(report=report)
    manifest = result.manifest
    for change in changes:
        manifest.record(change.path, change.regions)
    for path, regions in result.edits.recorded.items():
        manifest.record(path, regions)
    out = [DocumentChange(str(c.path), c.old, c.new) for c in changes]
    if manifest.path is not None:
        old = manifest.path.read_text(encoding="utf-8") if manifest.path.is_file() else None
        if old != manifest.text():
            out.append(DocumentChange(str(manifest.path), old, manifest.text()))
    return Generated(changes=out, report=report)


def _selected(path: Path, parts: list[str], target_kind: str) -> bool:
    if "all" in parts or target_kind == "standalone":
        return True
    text = path.as_posix()
    return any(f"/{prefix}" in text for part in parts for prefix in _PART_PATHS.get(part, ()))
