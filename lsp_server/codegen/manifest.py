"""The record of what was generated: `.cdit/generated.json` next to the plan.

For every file it holds the sha256 of each generated region as it was written (`<file>` for a
whole generated file). A later run compares the file's current region text with that hash:
equal means "unchanged since generation" (safe to update), different means "edited by the
user" (refuse and report). Paths are stored relative to the manifest's folder when below it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..files import InputError, parse_json, read_text, shown

MANIFEST_VERSION = 1
WHOLE_FILE = "<file>"
MANIFEST_DIR = ".cdit"
MANIFEST_NAME = "generated.json"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def default_manifest_path(plan_path: str | Path) -> Path:
    return Path(plan_path).resolve().parent / MANIFEST_DIR / MANIFEST_NAME


@dataclass
class Manifest:
    path: Path | None = None
    files: dict[str, dict[str, str]] = field(default_factory=dict)
    problem: str | None = None  # why an existing manifest could not be read

    @classmethod
    def load(cls, path: Path | None) -> Manifest:
        """The record at `path` (empty when there is none). A manifest that exists but cannot
        be used (not a regular file, not UTF-8, not JSON, nested too deeply, a folder in its
        path that is a file) is kept as `problem`, a one-line reason: nothing is generated."""
        if path is None:
            return cls(path=path)
        try:
            data = parse_json(read_text(path, what="manifest"), what=f"manifest {shown(path)}")
            files = data.get("files", {})
            if not isinstance(files, dict):
                raise ValueError("`files` is not an object")
            clean = {
                str(k): {str(r): str(h) for r, h in (v.get("regions") or {}).items()}
                for k, v in files.items()
                if isinstance(v, dict)
            }
        except InputError as exc:
            if exc.missing:
                return cls(path=path)
            return cls(path=path, problem=str(exc))
        except (ValueError, AttributeError) as exc:
            return cls(path=path, problem=f"manifest {shown(path)}: unreadable ({exc})")
        return cls(path=path, files=clean)

    def key(self, file: Path) -> str:
        resolved = file.resolve()
        if self.path is not None:
            try:
                return resolved.relative_to(self.path.parent.parent).as_posix()
            except ValueError:
                pass
        return resolved.as_posix()

    def regions(self, file: Path) -> dict[str, str]:
        return dict(self.files.get(self.key(file), {}))

    def record(self, file: Path, regions: dict[str, str]) -> None:
        key = self.key(file)
        merged = {**self.files.get(key, {}), **regions}
        self.files[key] = merged

    def to_json(self) -> dict[str, object]:
        return {
            "schemaVersion": MANIFEST_VERSION,
            "generator": "cdit-integrate",
            "files": {
                k: {"regions": dict(sorted(v.items()))} for k, v in sorted(self.files.items())
            },
        }

    def text(self) -> str:
        return json.dumps(self.to_json(), indent=1) + "\n"
