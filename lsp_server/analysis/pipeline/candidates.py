"""Installed diffusers pipelines that take a transformer class: prefills when there is no model.

A user without a ``model_index.json`` still has the transformer class; the pipelines of the
installed diffusers that declare it in their ``__init__`` (``transformer: FluxTransformer2DModel``)
are the candidates for the pipeline class and source. Read as text (no import), once per diffusers
folder.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path
from typing import Any

__all__ = ["pipelines_using"]

_CLASS = re.compile(r"^class (\w+)\(([^)]*)\):", re.MULTILINE)
# a component annotation in a signature: `transformer: X`, `transformer_2: X | None`
_COMPONENT = re.compile(r"\btransformer\w*\s*:\s*(?:Optional\[)?([A-Za-z_][\w.]*)")


def _diffusers_pipelines() -> Path | None:
    try:
        spec = importlib.util.find_spec("diffusers")  # top level: nothing is executed
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "pipelines"
    return folder if folder.is_dir() else None


@functools.lru_cache(maxsize=4)
def _index(folder: Path) -> dict[str, list[dict[str, str]]]:
    """transformer class -> the pipeline classes whose module declares it as a component."""
    out: dict[str, list[dict[str, str]]] = {}
    root = folder.parent.parent
    for path in sorted(folder.rglob("pipeline_*.py")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        pipelines = [m.group(1) for m in _CLASS.finditer(text) if "Pipeline" in m.group(1)]
        if not pipelines:
            continue
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        for name in dict.fromkeys(m.group(1).rsplit(".", 1)[-1] for m in _COMPONENT.finditer(text)):
            for pipeline in pipelines:
                out.setdefault(name, []).append(
                    {"className": pipeline, "module": module, "path": str(path)}
                )
    return out


def pipelines_using(transformer_class: str, limit: int = 8) -> list[dict[str, Any]]:
    """Installed diffusers pipelines declaring ``transformer_class`` as a component (plain
    text-to-X pipelines first: the shortest class names), at most ``limit``."""
    folder = _diffusers_pipelines()
    if folder is None:
        return []
    found = _index(folder).get(transformer_class, [])
    return sorted(found, key=lambda c: (len(c["className"]), c["className"]))[:limit]
