"""The cache-dit checkout target on a temporary copy of the installed cache-dit sources.

Three diffusers transformers cache-dit has no adapter for (Ideogram4 / Pattern_3, MotifVideo /
Pattern_0, NucleusMoEImage / Pattern_2) are analyzed, planned and generated into one copy laid out
like a git checkout (`src/cache_dit`, yapf-style `.style.yapf`: 2-space indent, 100 columns).
Then:

* every edited cache-dit file only gained lines (no unrelated byte changed), and the new code
  uses the file's 2-space indentation;
* a second run changes nothing;
* in a fresh interpreter that imports cache_dit from the copy, `cache_dit.enable_cache(pipe)`
  finds each new adapter by the pipeline's class name and caches steps, the output with caching
  disabled equals the baseline, and the CLI example and the CP/TP planners are registered.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("cache_dit")

from lsp_server.analysis import analyze_path
from lsp_server.codegen import build_plan, generate, parse_plan, write

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "codegen_fixtures"
_T = "diffusers.models.transformers."

MODELS = [
    (_T + "transformer_ideogram4", "Ideogram4Transformer2DModel", "Ideogram4Pipeline"),
    (_T + "transformer_motif_video", "MotifVideoTransformer3DModel", "MotifVideoPipeline"),
    (
        _T + "transformer_nucleusmoe_image",
        "NucleusMoEImageTransformer2DModel",
        "NucleusMoEImagePipeline",
    ),
]


def _installed_cache_dit() -> Path:
    spec = importlib.util.find_spec("cache_dit")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


# NucleusMoE-Image in its dense configuration (as the new-models suite builds it): with its
# expert-choice experts on, CP is refused (each rank's experts would pick among its own tokens)
CONFIGS = {"NucleusMoEImageTransformer2DModel": {"moe_enabled": False}}


def _plans(root: Path) -> list[Any]:
    plans = []
    for module, cls, pipeline in MODELS:
        config = None
        if cls in CONFIGS:
            config = root.parent / f"{cls}.config.json"
            config.write_text(json.dumps(CONFIGS[cls]))
        analysis = analyze_path(module, cls, None, config, registry=False).to_json()
        answers = {
            "target": {"kind": "cache-dit-checkout", "root": str(root)},
            "model": {"pipelineClass": pipeline, "defaultModelId": f"example-org/{pipeline}"},
        }
        plan, errors = parse_plan(build_plan(analysis, answers))
        assert plan is not None, errors
        plans.append(plan)
    return plans


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("checkout")
    root = base / "cache-dit"
    package = root / "src" / "cache_dit"
    shutil.copytree(
        _installed_cache_dit(), package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    (root / ".style.yapf").write_text(
        "[style]\nbased_on_style = google\nindent_width = 2\ncolumn_limit = 100\n"
    )
    before = {p: p.read_text() for p in package.rglob("*.py")}
    manifest = base / ".cdit" / "generated.json"
    plans = _plans(root)
    results = []
    for plan in plans:
        result = generate(plan, manifest_path=manifest)
        assert result.ok, result.to_json()
        assert result.style is not None and result.style.indent == "  "
        write(result)
        results.append(result)
    return {
        "root": root,
        "package": package,
        "before": before,
        "plans": plans,
        "results": results,
        "manifest": manifest,
    }


def test_names_are_new_and_not_shadowed(checkout: dict[str, Any]) -> None:
    assert [p.register_name for p in checkout["plans"]] == [
        "Ideogram4",
        "MotifVideo",
        "NucleusMoEImage",
    ]
    patterns = [p.cache.block_lists[0].forward_pattern for p in checkout["plans"]]
    assert patterns == ["Pattern_3", "Pattern_0", "Pattern_2"]


def test_existing_files_only_gain_lines_in_their_own_indentation(checkout: dict[str, Any]) -> None:
    package: Path = checkout["package"]
    changed = set()
    for path, old in checkout["before"].items():
        new = path.read_text()
        if new == old:
            continue
        changed.add(path.relative_to(package).as_posix())
        removed = [
            line
            for line in difflib.ndiff(old.splitlines(), new.splitlines())
            if line.startswith("- ")
        ]
        assert not removed, (path, removed[:3])
    assert changed == {
        "caching/block_adapters/adapters.py",
        "caching/block_adapters/__init__.py",
        "distributed/transformers/planners.py",
        "_utils/examples.py",
        "_utils/__init__.py",
    }
    created = {p.relative_to(package).as_posix() for p in package.rglob("*.py")} - {
        p.relative_to(package).as_posix() for p in checkout["before"]
    }
    assert created == {
        "distributed/transformers/ideogram4.py",
        "distributed/transformers/motif_video.py",
        "distributed/transformers/nucleus_moe_image.py",
    }
    adapters = (package / "caching/block_adapters/adapters.py").read_text()
    assert '\n@BlockAdapterRegister.register("MotifVideo")\ndef motif_video_adapter(' in adapters
    assert "\n  return BlockAdapter(\n    pipe=pipe,\n" in adapters
    for path in created:
        text = (package / path).read_text()
        assert "\n  def _apply(\n" in text and "\n    def _apply(" not in text
        indents = {len(line) - len(line.lstrip(" ")) for line in text.splitlines()}
        assert all(n % 2 == 0 for n in indents), sorted(indents)
        assert max(len(line) for line in text.splitlines()) <= 100


def test_second_run_changes_nothing(checkout: dict[str, Any]) -> None:
    for plan in checkout["plans"]:
        result = generate(plan, manifest_path=checkout["manifest"])
        assert result.ok and not result.edits.changes, result.diff()


def test_cache_dit_from_the_checkout_finds_and_caches_the_new_models(
    checkout: dict[str, Any],
) -> None:
    env = {
        **os.environ,
        "CACHE_DIT_LOG_LEVEL": "error",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, str(FIXTURES / "checkout_check.py"), str(checkout["root"] / "src")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(report["cache_dit"]).resolve().is_relative_to(checkout["package"].resolve())
    with_cp = {p.register_name: p.generates_cp for p in checkout["plans"]}
    # Motif-Video: its plan permutes the joint mask at every block (standalone only), so the
    # checkout refuses the CP part and its registered planner raises with the reason
    assert with_cp == {"Ideogram4": True, "MotifVideo": True, "NucleusMoEImage": True}
    motif = (checkout["package"] / "distributed/transformers/motif_video.py").read_text()
    assert "raise NotImplementedError(" in motif
    assert "all-to-all order" in motif
    assert "is not part of this integration: not generated for a cache-dit checkout" in "".join(
        line.strip().strip('"') for line in motif.splitlines()
    )
    # Ideogram 4's attention always gets its segment mask: the registered planner installs the
    # masked ring steps for ring runs (the suite's Ring-2 through the checkout passes with them)
    ideogram = (checkout["package"] / "distributed/transformers/ideogram4.py").read_text()
    assert "def _ring_attention_masks() -> None:" in ideogram
    assert "    if (parallelism_config.ring_size or 1) > 1:" in ideogram
    compile(ideogram, "ideogram4.py", "exec")
    for name, entry in report["models"].items():
        assert entry["supported"], name
        assert entry["adapter"] is not None, name
        assert all(steps for steps in entry["cached_steps"]), (name, entry["cached_steps"])
        assert entry["equal_after_disable"], name
        assert entry["example"], name
        # registered either way; without a plan its `_apply` raises with the analysis' reason
        assert entry["cp_planner"] == f"{name}ContextParallelismPlanner"
        assert entry["tp_planner"] == f"{name}TensorParallelismPlanner"
