"""The cache-dit checkout target for one new model (``suite.py --checkout``).

A fresh copy of the installed cache-dit package, laid out like a git checkout
(``<out>/checkout/cache-dit/src/cache_dit`` with a yapf ``.style.yapf``, as
``tests/test_codegen_checkout.py`` builds it), gets the model's integration from the same
analysis the standalone target used: ``build_plan`` with the checkout target answers -> ``generate``
-> ``write``. Nothing is edited between the steps; what refuses is reported, not worked around.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._common import NewModel

STYLE_YAPF = "[style]\nbased_on_style = google\nindent_width = 2\ncolumn_limit = 100\n"


@dataclass
class CheckoutGeneration:
    """``root``: the checkout (None when generation refused as a whole); ``refused``: what was
    refused, with the reason (parts, or the whole plan / generation); ``files``: the edited or
    created files, relative to ``root``."""

    root: Path | None
    refused: str = ""
    register_name: str = ""
    files: list[str] = field(default_factory=list)
    review: list[str] = field(default_factory=list)


def installed_cache_dit() -> Path:
    spec = importlib.util.find_spec("cache_dit")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("cache_dit is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def fresh_checkout(base: Path) -> Path:
    """``base/cache-dit`` (``base`` emptied first): ``src/cache_dit`` and ``.style.yapf``."""
    if base.exists():
        shutil.rmtree(base)
    root = base / "cache-dit"
    shutil.copytree(
        installed_cache_dit(),
        root / "src" / "cache_dit",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    (root / ".style.yapf").write_text(STYLE_YAPF)
    return root


def pipeline_class(model_dir: Path, pipeline_source: str | None) -> str | None:
    """The pipeline class ``cache_dit.enable_cache(pipe)`` must find: ``_class_name`` of the
    built ``model_index.json``, or, when that is a subclass saved by the suite (e.g.
    ``NucleusMoEImagePipelineWithEmbeds``), the longest class of the analyzed pipeline source
    whose name prefixes it (what the CLI example can import from diffusers)."""
    index = model_dir / "model_index.json"
    if not index.is_file():
        return None
    name = json.loads(index.read_text()).get("_class_name")
    if not isinstance(name, str) or not pipeline_source:
        return name if isinstance(name, str) else None
    try:
        tree = ast.parse(Path(pipeline_source).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return name
    defined = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    prefixes = [c for c in defined if name.startswith(c)]
    return max(prefixes, key=len) if prefixes else name


def _first_line(text: Any, limit: int = 160) -> str:
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def generate_checkout(model: NewModel, out: Path, analysis: dict[str, Any]) -> CheckoutGeneration:
    """Fresh checkout under ``out/checkout`` -> plan (cache-dit-checkout target) -> generate ->
    write. ``analysis``: the JSON of the analysis the standalone target was generated from."""
    from lsp_server.codegen import build_plan, generate, parse_plan, write

    root = fresh_checkout(out / "checkout")
    pipeline = pipeline_class(out / "model", (analysis.get("pipeline") or {}).get("path"))
    answers: dict[str, Any] = {
        "target": {"kind": "cache-dit-checkout", "root": str(root)},
        "model": {
            "transformerClass": model.transformer_class,
            "pipelineClass": pipeline,
            "defaultModelId": f"example-org/{pipeline or model.name}",
        },
    }
    try:
        plan, errors = parse_plan(build_plan(analysis, answers))
    except Exception as exc:
        return CheckoutGeneration(None, f"plan: {_first_line(exc)}")
    if plan is None:
        reasons = "; ".join(f"{e.path}: {e.message}" for e in errors)[:300]
        return CheckoutGeneration(None, f"plan: {reasons}")
    result = generate(plan, manifest_path=out / "checkout" / ".cdit" / "generated.json")
    data = result.to_json()
    refused = "; ".join(
        f"{r['label']}: {_first_line(' / '.join(r['reasons']))}" for r in data["refused"]
    )
    outcome = CheckoutGeneration(
        root,
        refused,
        plan.register_name,
        review=[_first_line(item) for item in result.review],
    )
    if not result.ok:
        errors = "; ".join(_first_line(e["message"]) for e in data["errors"])
        outcome.root = None
        outcome.refused = (refused + "; " if refused else "") + f"generate: {errors}"
        return outcome
    write(result)
    base = root.resolve()
    outcome.files = [Path(f["path"]).resolve().relative_to(base).as_posix() for f in data["files"]]
    return outcome
