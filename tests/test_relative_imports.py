"""A diffusers module copied into a project keeps its relative imports (`from ..attention import
...`): the analysis resolves them against the installed diffusers package where the file's layout
matches (`sources.Anchor`), reports unresolved imports (CDIT401), the anchoring (CDIT402) and
relative imports Python refuses (CDIT403), and offers a rewrite to absolute imports. Real diffusers
sources copied into temporary folders; nothing is imported."""

from __future__ import annotations

import ast
import difflib
import json
import shutil
from pathlib import Path

import pytest

from cdit_runtime.contract import load_request
from cdit_runtime.preflight import preflight
from lsp_server.analysis import analyze_path, sources
from lsp_server.analysis.imports import (
    ANCHORED,
    NO_PARENT,
    OUTSIDE_PACKAGE,
    UNRESOLVED,
    absolute_imports,
    check_imports,
)
from lsp_server.analysis.sources import read_source
from lsp_server.features import commands
from lsp_server.features import imports as import_commands
from tests.conftest import diffusers_file, diffusers_root

SANA_VIDEO = "models/transformers/transformer_sana_video.py"
MODELS = [
    SANA_VIDEO,
    "models/transformers/transformer_flux.py",
    "models/transformers/transformer_wan.py",
]
SANA_PIPELINE = "pipelines/sana_video/pipeline_sana_video.py"


def diffusers_version() -> str:
    text = (diffusers_root() / "__init__.py").read_text(encoding="utf-8")
    return text.split('__version__ = "', 1)[1].split('"', 1)[0]


def copy_into(folder: Path, relative: str, name: str | None = None) -> Path:
    target = folder / (name or Path(relative).name)
    shutil.copy(diffusers_file(relative), target)
    return target


def comparable(report: dict, path: Path, installed: Path) -> dict:
    """The analysis JSON with the copy's path spelled as the installed one, without the parts
    that name the file itself (its path and hash, its import report and CDIT40x notes)."""
    doc = json.loads(json.dumps(report).replace(str(path), str(installed)))
    doc.pop("source")
    doc.pop("imports")
    for t in doc["transformers"]:
        t["diagnostics"] = [d for d in t["diagnostics"] if not d["code"].startswith("CDIT40")]
    return doc


def summary(report: dict) -> list:
    return [
        (
            t["className"],
            [(b["attr"], b["blockClass"], b["forwardPattern"]) for b in t["blockLists"]],
            sorted((t["tensorParallel"] or {}).get("layers", {}).items()),
            (t["contextParallel"] or {}).get("approach"),
        )
        for t in report["transformers"]
    ]


@pytest.mark.parametrize("relative", MODELS)
def test_a_copied_module_is_analyzed_as_the_installed_one(tmp_path, relative):
    installed = diffusers_file(relative)
    copy = copy_into(tmp_path, relative)
    expected = analyze_path(installed).to_json()
    got = analyze_path(copy).to_json()
    assert got["imports"]["anchor"]["module"] == "diffusers." + relative[:-3].replace("/", ".")
    assert summary(got) == summary(expected)
    assert expected["transformers"][0]["tensorParallel"]["layers"], "a TP plan to compare"
    # everything else too: block lists, patterns, PatchFunctor, CP and TP plans, diagnostics
    assert comparable(got, copy, installed) == comparable(expected, installed, installed)


def test_without_the_anchor_the_copy_loses_findings(tmp_path, monkeypatch):
    """The control: with no installed package to anchor on, the copy's analysis is poorer (the
    failure this feature fixes: Sana-Video's TP plan came back empty)."""
    installed = diffusers_file(SANA_VIDEO)
    copy = copy_into(tmp_path, SANA_VIDEO)
    monkeypatch.setattr(sources, "ANCHOR_PACKAGES", ())
    got = analyze_path(copy).to_json()
    assert got["imports"]["anchor"] is None
    assert got["transformers"][0]["tensorParallel"]["layers"] == {}
    assert summary(got) != summary(analyze_path(installed).to_json())


def test_a_copied_pipeline_is_anchored_in_its_pipeline_package(tmp_path):
    copy = copy_into(tmp_path, SANA_PIPELINE)
    anchor = read_source(copy).anchor
    assert anchor is not None
    assert anchor.module == "diffusers.pipelines.sana_video.pipeline_sana_video"
    assert anchor.installed_file == diffusers_file(SANA_PIPELINE)
    # its `from .pipeline_output import ...` resolves to that package's module, not another's
    assert sources.module_path("pipeline_output", 1, copy) == diffusers_file(
        "pipelines/sana_video/pipeline_output.py"
    )


def test_a_renamed_copy_is_anchored_by_its_imports(tmp_path):
    """No installed module of that name: the package whose modules import the same relative
    modules wins; the analysis still equals the installed module's."""
    installed = diffusers_file(SANA_VIDEO)
    copy = copy_into(tmp_path, SANA_VIDEO, "my_video_dit.py")
    anchor = read_source(copy).anchor
    assert anchor is not None and anchor.installed_file is None
    assert anchor.module == "diffusers.models.transformers.my_video_dit"
    assert summary(analyze_path(copy).to_json()) == summary(analyze_path(installed).to_json())


def test_files_that_resolve_where_they_lie_get_no_anchor_and_no_diagnostics():
    for relative in [*MODELS, SANA_PIPELINE, "models/transformers/transformer_ltx.py"]:
        source = read_source(diffusers_file(relative))
        assert source.anchor is None, relative
        report = check_imports(source)
        assert report.diagnostics() == [], (relative, report.to_json())
        assert report.runtime_importable


def relative_lines(text: str) -> list[int]:
    return [
        n.lineno for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom) and n.level
    ]


def test_the_anchored_note_is_an_information_on_the_first_relative_import(tmp_path):
    copy = copy_into(tmp_path, SANA_VIDEO)
    report = analyze_path(copy).to_json()
    notes = [d for d in report["transformers"][0]["diagnostics"] if d["code"].startswith("CDIT40")]
    assert [(d["code"], d["severity"]) for d in notes] == [(ANCHORED, "info")]
    (note,) = notes
    assert note["line"] == min(relative_lines(copy.read_text()))
    assert note["path"] == str(copy)
    assert (
        f"resolved against installed diffusers {diffusers_version()} as "
        "diffusers.models.transformers.transformer_sana_video" in note["message"]
    )
    assert NO_PARENT in note["message"]
    assert (
        "use the installed module diffusers.models.transformers.transformer_sana_video"
        in (note["message"])
    )
    imports = report["imports"]
    assert imports["runtimeImportable"] is False
    assert imports["importError"] == NO_PARENT
    assert imports["anchor"]["installedFile"] == str(diffusers_file(SANA_VIDEO))
    assert imports["anchor"]["identical"] is True
    copy.write_text(copy.read_text() + "\n# edited\n")
    assert analyze_path(copy).to_json()["imports"]["anchor"]["identical"] is False


def test_an_unresolved_import_says_what_the_analysis_lost(tmp_path):
    """One relative import that resolves nowhere: no installed package resolves ALL of them, so
    none is anchored; each is a warning naming what the analysis lost (here the TP plan)."""
    copy = copy_into(tmp_path, SANA_VIDEO)
    text = copy.read_text()
    text = text.replace(
        "from ..normalization import AdaLayerNormSingle, RMSNorm\n",
        "from ..normalization import AdaLayerNormSingle, RMSNorm\n"
        "from ..no_such_module import GLUMBConvTemp\n",
    )
    text = text.replace("class GLUMBTempConv(nn.Module):", "class _Unused(nn.Module):", 1)
    copy.write_text(text.replace("GLUMBTempConv(", "GLUMBConvTemp("))
    lines = copy.read_text().splitlines()
    report = analyze_path(copy).to_json()
    assert report["imports"]["anchor"] is None
    assert report["transformers"][0]["tensorParallel"]["layers"] == {}
    found = {
        d["line"]: d for d in report["transformers"][0]["diagnostics"] if d["code"] == UNRESOLVED
    }
    assert sorted(found) == relative_lines(copy.read_text())
    assert all(d["severity"] == "warning" for d in found.values())
    bogus = found[lines.index("from ..no_such_module import GLUMBConvTemp") + 1]["message"]
    assert bogus.startswith("unresolved import `from ..no_such_module import GLUMBConvTemp`: ")
    assert NO_PARENT in bogus
    assert "GLUMBConvTemp, built as a sub-module in SanaVideoTransformerBlock" in bogus
    assert "missing from the tensor-parallel plan" in bogus
    mixin = found[lines.index("from ..attention import AttentionMixin") + 1]["message"]
    assert "AttentionMixin, a base class of SanaVideoTransformer3DModel" in mixin
    assert "Importing this file fails at this line" in mixin


def test_a_missing_package_next_to_anchored_imports(tmp_path):
    copy = copy_into(tmp_path, SANA_VIDEO)
    text = copy.read_text().replace(
        "import torch\n", "import torch\nimport cdit_no_such_package\n", 1
    )
    copy.write_text(text)
    report = analyze_path(copy).to_json()
    assert report["imports"]["anchor"]["module"].endswith("transformer_sana_video")
    line = text.splitlines().index("import cdit_no_such_package") + 1
    (diagnostic,) = [d for d in report["transformers"][0]["diagnostics"] if d["code"] == UNRESOLVED]
    assert (diagnostic["line"], diagnostic["severity"]) == (line, "warning")
    assert (
        "no module named 'cdit_no_such_package' in the workspace or installed"
        in (diagnostic["message"])
    )
    assert "nothing the analysis reads uses it" in diagnostic["message"]
    assert report["imports"]["importError"] == "No module named 'cdit_no_such_package'"


def test_a_loose_relative_import_that_resolves_nowhere(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(
        "import torch\n"
        "from .helpers import Block\n"
        "\n\n"
        "class Model(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.blocks = torch.nn.ModuleList([Block() for _ in range(4)])\n"
    )
    report = check_imports(read_source(model))
    (diagnostic,) = report.diagnostics()
    assert (diagnostic.code, diagnostic.severity, diagnostic.line) == (UNRESOLVED, "warning", 2)
    assert NO_PARENT in diagnostic.message
    assert "Block, built as a sub-module in Model" in diagnostic.message
    assert report.import_error == NO_PARENT and not report.runtime_importable


def test_relative_imports_python_refuses_outside_a_package(tmp_path):
    """Both files copied into a folder without __init__.py: the analysis follows `.attention` by
    folder, the runtime cannot import it (CDIT403)."""
    (tmp_path / "attention.py").write_text("class Attn:\n    pass\n")
    model = tmp_path / "model.py"
    model.write_text("import os\nfrom .attention import Attn\n")
    report = check_imports(read_source(model))
    (diagnostic,) = report.diagnostics()
    assert (diagnostic.code, diagnostic.severity, diagnostic.line) == (
        OUTSIDE_PACKAGE,
        "warning",
        2,
    )
    assert NO_PARENT in diagnostic.message
    (tmp_path / "__init__.py").write_text("")
    sources.clear_caches()
    assert check_imports(read_source(model)).diagnostics() == []


def test_optional_imports_are_not_reported(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(
        "try:\n    import cdit_missing_a\nexcept ImportError:\n    cdit_missing_a = None\n"
        "if False:\n    import cdit_missing_b\n"
        "def f():\n    import cdit_missing_c\n"
    )
    report = check_imports(read_source(model))
    assert [d.line for d in report.diagnostics()] == [8]  # only the one inside the function
    assert report.runtime_importable  # a function's import does not run at import time


def test_the_rewrite_changes_only_the_module_of_each_relative_import(tmp_path):
    copy = copy_into(tmp_path, SANA_VIDEO)
    old = copy.read_text()
    source = read_source(copy)
    new = absolute_imports(old, source.anchor)
    assert relative_lines(new) == []
    changed = [
        line[1:]
        for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed and all(line.startswith("from ") for line in changed)
    assert "from diffusers.models.attention import AttentionMixin" in new
    assert "from diffusers.configuration_utils import ConfigMixin, register_to_config" in new
    assert "from diffusers.utils import apply_lora_scale, logging" in new
    # the rewritten copy needs no anchor and is analyzed as the installed module
    copy.write_text(new)
    rewritten = read_source(copy)
    assert rewritten.anchor is None and check_imports(rewritten).diagnostics() == []
    installed = diffusers_file(SANA_VIDEO)
    assert comparable(analyze_path(copy).to_json(), copy, installed) == comparable(
        analyze_path(installed).to_json(), installed, installed
    )


def test_the_rewrite_keeps_nested_and_odd_spellings(tmp_path):
    copy = copy_into(tmp_path, SANA_VIDEO)
    anchor = read_source(copy).anchor
    text = (
        "from . import transformer_flux  # a sibling\n"
        "from .. import attention as a; x = 1\n"
        "def f():\n"
        "    from ...utils import (\n        logging,\n    )\n"
        "    return logging\n"
        "s = 'from ..attention import nothing'\n"
    )
    assert absolute_imports(text, anchor) == (
        "from diffusers.models.transformers import transformer_flux  # a sibling\n"
        "from diffusers.models import attention as a; x = 1\n"
        "def f():\n"
        "    from diffusers.utils import (\n        logging,\n    )\n"
        "    return logging\n"
        "s = 'from ..attention import nothing'\n"
    )


def test_command_ids_agree():
    assert commands.LOAD_CHECK == "cdit.lsp.loadCheck"
    assert commands.REWRITE_IMPORTS == import_commands.REWRITE_COMMAND
    assert commands.HANDLERS[commands.LOAD_CHECK] is import_commands.load_check


def test_a_run_request_may_name_an_installed_module(tmp_path):
    """A source may be a dotted module name (as the analysis and codegen accept it): the
    runtime's pre-flight lets it through (a missing file is still refused)."""
    model = {
        "source": "tiny",
        "family": "flux",
        "sourceFiles": ["diffusers.models.transformers.transformer_sana_video"],
    }
    request = {"model": model, "outputDir": str(tmp_path / "out"), "phases": [{"kind": "baseline"}]}
    preflight(load_request(request))
    model["sourceFiles"] = [str(tmp_path / "missing.py")]
    with pytest.raises(ValueError, match="does not exist"):
        preflight(load_request(request))
