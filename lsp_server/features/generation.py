"""What the editor's generation reads from the workspace and the settings: the answers, the
sources the gate check names, the folders it may write to. Building the plan and generating the
files are services (`lsp_server.services.plan`, `.generate`); the server hands the files as a
`WorkspaceEdit` to the client, which previews and applies it.

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

from pathlib import Path
from typing import Any

from ..files import InputError, load_json
from .settings import Settings

GATE_CHECK = Path(".cdit") / "integration.json"


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
