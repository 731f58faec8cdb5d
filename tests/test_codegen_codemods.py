"""Codemods against before/after sources, idempotence, conflicts, refusals, edit data.

`tests/codegen_fixtures/checkout/before` holds trimmed copies of the cache-dit files an
integration touches (2-space yapf style, `.style.yapf`); `.../after` holds what the generator must
make of them for the toy plan (`codegen_fixtures/toy/plan.json`: two block lists, every
PatchFunctor fix kind, a CP plan with `<each>`/`<last>`/tuple gathers and a processor patch, a TP
plan with conditional layers, regrouped weights, a distributed norm, a text encoder and a VAE
without planners, an image-editing CLI example). `codegen_fixtures/standalone` holds the
standalone module for the same plan. Fixture files end in `.txt` so linters leave them alone.

Formatting is fixed to the built-in layout (no external formatter) so the goldens do not depend
on which formatter is installed. Set `CDIT_UPDATE_GOLDEN=1` to rewrite the goldens.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import libcst as cst
import pytest

from lsp_server.cli_generate import run_generate
from lsp_server.codegen import build_plan, generate, parse_plan, write
from lsp_server.codegen.edits import ConflictError, FileSpec, plan_edits, write_edits
from lsp_server.codegen.manifest import Manifest
from lsp_server.codegen.plan import IntegrationPlan
from lsp_server.codegen.regions import Anchor, ImportNeed, Region, add_imports, put_region
from lsp_server.codegen.style import CodeStyle, detect_style, reindent

FIXTURES = Path(__file__).resolve().parent / "codegen_fixtures"
BEFORE = FIXTURES / "checkout" / "before"
AFTER = FIXTURES / "checkout" / "after"
STANDALONE = FIXTURES / "standalone"
UPDATE = os.environ.get("CDIT_UPDATE_GOLDEN") == "1"

CHECKOUT_STYLE = CodeStyle(
    line_length=100, indent="  ", formatter="builtin", allow_external=False, source="test"
)
STANDALONE_STYLE = CodeStyle(allow_external=False, source="test")


def _materialize(source: Path, target: Path) -> None:
    """Copy a fixture tree, dropping the `.txt` suffix of fixture sources."""
    for path in source.rglob("*"):
        if path.is_file():
            rel = path.relative_to(source)
            name = rel.name[:-4] if rel.name.endswith(".txt") else rel.name
            dest = target / rel.parent / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)


def _plan_json(tmp: Path, kind: str) -> dict[str, Any]:
    toy_dir = tmp / "toy_pkg"
    toy_dir.mkdir(exist_ok=True)
    toy = toy_dir / "toy_transformer.py"
    shutil.copyfile(FIXTURES / "toy" / "toy_transformer.py.txt", toy)
    vae = toy_dir / "toy_vae.py"
    shutil.copyfile(FIXTURES / "toy" / "toy_vae.py.txt", vae)
    text = (FIXTURES / "toy" / "plan.json").read_text()
    text = text.replace("{TOY}", toy.as_posix()).replace("{ROOT}", (tmp / "cache-dit").as_posix())
    text = text.replace("{TOY_VAE}", vae.as_posix())
    data = json.loads(text)
    if kind == "standalone":
        data["target"] = {"kind": "standalone", "path": (tmp / "cdit_toy.py").as_posix()}
    return data


def _plan(data: dict[str, Any]) -> IntegrationPlan:
    plan, errors = parse_plan(data)
    assert plan is not None, errors
    return plan


@pytest.fixture
def toy_checkout(tmp_path: Path) -> dict[str, Any]:
    root = tmp_path / "cache-dit"
    _materialize(BEFORE, root)
    data = _plan_json(tmp_path, "checkout")
    return {
        "root": root,
        "package": root / "src" / "cache_dit",
        "data": data,
        "plan": _plan(data),
        "manifest": tmp_path / ".cdit" / "generated.json",
    }


def _snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.py")}


def _compare_with_golden(produced: dict[str, str], golden: Path) -> None:
    if UPDATE:
        shutil.rmtree(golden, ignore_errors=True)
        for rel, text in produced.items():
            dest = golden / (rel + ".txt")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
    expected = {
        p.relative_to(golden).as_posix()[:-4]: p.read_text()
        for p in golden.rglob("*.txt")
        if p.is_file()
    }
    assert sorted(produced) == sorted(expected)
    for rel, text in produced.items():
        if text != expected[rel]:
            diff = "".join(
                difflib.unified_diff(
                    expected[rel].splitlines(True), text.splitlines(True), "golden", "produced"
                )
            )
            pytest.fail(f"{rel} differs from its golden file:\n{diff[:6000]}")


# ----------------------------------------------------------------------------- golden files


def test_checkout_files_match_the_goldens(toy_checkout: dict[str, Any]) -> None:
    root, package = toy_checkout["root"], toy_checkout["package"]
    before = _snapshot(package)
    result = generate(
        toy_checkout["plan"], manifest_path=toy_checkout["manifest"], style=CHECKOUT_STYLE
    )
    assert result.ok, result.to_json()
    write(result)
    after = _snapshot(package)
    changed = {rel: text for rel, text in after.items() if before.get(rel) != text}
    _compare_with_golden(changed, AFTER / "src" / "cache_dit")
    assert (root / ".style.yapf").exists()
    # every file kind of the integration is covered
    assert set(changed) == {
        "caching/block_adapters/adapters.py",
        "caching/block_adapters/__init__.py",
        "caching/patch_functors/__init__.py",
        "caching/patch_functors/functor_toy.py",
        "distributed/transformers/planners.py",
        "distributed/transformers/toy.py",
        "distributed/text_encoders/planners.py",
        "distributed/text_encoders/toy_text_encoder_model.py",
        "distributed/autoencoders/planners.py",
        "distributed/autoencoders/autoencoder_kl_toy.py",
        "_utils/examples.py",
        "_utils/__init__.py",
    }


def test_standalone_module_matches_its_golden(tmp_path: Path) -> None:
    plan = _plan(_plan_json(tmp_path, "standalone"))
    result = generate(
        plan, manifest_path=tmp_path / ".cdit" / "generated.json", style=STANDALONE_STYLE
    )
    assert result.ok, result.to_json()
    write(result)
    _compare_with_golden({"cdit_toy.py": (tmp_path / "cdit_toy.py").read_text()}, STANDALONE)


def test_existing_files_keep_every_unrelated_byte(toy_checkout: dict[str, Any]) -> None:
    package = toy_checkout["package"]
    before = _snapshot(package)
    result = generate(
        toy_checkout["plan"], manifest_path=toy_checkout["manifest"], style=CHECKOUT_STYLE
    )
    write(result)
    for rel, old in before.items():
        new = (package / rel).read_text()
        removed = [d for d in difflib.ndiff(old.splitlines(), new.splitlines()) if d[:2] == "- "]
        if rel == "_utils/examples.py":
            # the only rewritten line: libcst's import handling adds `argparse` to the imports
            assert "import argparse" in new and "import argparse" not in old
        assert not removed, (rel, removed[:3])


def test_new_code_is_inserted_next_to_related_code(toy_checkout: dict[str, Any]) -> None:
    package = toy_checkout["package"]
    result = generate(
        toy_checkout["plan"], manifest_path=toy_checkout["manifest"], style=CHECKOUT_STYLE
    )
    write(result)
    planners = (package / "distributed/transformers/planners.py").read_text()
    cp = planners.index("def _activate_cp_planners")
    nunchaku = planners.index("  try:\n    import nunchaku")
    toy_cp = planners.index("ToyContextParallelismPlanner = _safe_import(")
    wan = planners.index("WanContextParallelismPlanner = _safe_import(")
    assert cp < wan < toy_cp < nunchaku  # after the last activation, before the optional block
    exports = (package / "caching/block_adapters/__init__.py").read_text().splitlines()
    assert exports[-1] == 'toy_adapter = _safe_import(".adapters", "toy_adapter")'
    examples = (package / "_utils/examples.py").read_text()
    assert '  "bria_fibo_example",\n  "toy_example",\n]' in examples
    assert '  "FIBO_DIR": "briaai/FIBO",\n  "TOY_DIR": "toy-org/Toy-1",\n}' in examples


# ----------------------------------------------------------------------------- idempotence


def test_second_run_is_a_no_op(toy_checkout: dict[str, Any]) -> None:
    plan, manifest = toy_checkout["plan"], toy_checkout["manifest"]
    write(generate(plan, manifest_path=manifest, style=CHECKOUT_STYLE))
    snapshot = _snapshot(toy_checkout["package"])
    manifest_text = manifest.read_text()
    again = generate(plan, manifest_path=manifest, style=CHECKOUT_STYLE)
    assert again.ok and not again.edits.changes and again.diff() == ""
    assert write(again) == []
    assert _snapshot(toy_checkout["package"]) == snapshot
    assert manifest.read_text() == manifest_text


def test_no_op_without_a_manifest_when_the_code_is_identical(toy_checkout: dict[str, Any]) -> None:
    plan = toy_checkout["plan"]
    write(generate(plan, manifest_path=toy_checkout["manifest"], style=CHECKOUT_STYLE))
    toy_checkout["manifest"].unlink()
    again = generate(plan, manifest_path=toy_checkout["manifest"], style=CHECKOUT_STYLE)
    assert again.ok and not again.edits.changes


def test_changed_plan_updates_unedited_generated_code(toy_checkout: dict[str, Any]) -> None:
    data, manifest = toy_checkout["data"], toy_checkout["manifest"]
    write(generate(_plan(data), manifest_path=manifest, style=CHECKOUT_STYLE))
    data["cache"]["hasSeparateCfg"] = False
    result = generate(_plan(data), manifest_path=manifest, style=CHECKOUT_STYLE)
    assert result.ok, result.to_json()
    assert [c.path.name for c in result.edits.changes] == ["adapters.py"]
    assert "-    has_separate_cfg=True,\n+    has_separate_cfg=False," in result.diff()
    write(result)


# ----------------------------------------------------------------------------- conflicts


def test_user_edit_of_a_generated_region_is_a_conflict(toy_checkout: dict[str, Any]) -> None:
    data, manifest, package = (
        toy_checkout["data"],
        toy_checkout["manifest"],
        toy_checkout["package"],
    )
    write(generate(_plan(data), manifest_path=manifest, style=CHECKOUT_STYLE))
    adapters = package / "caching/block_adapters/adapters.py"
    mine = "patch_functor=ToyPatchFunctor(),  # mine"
    adapters.write_text(adapters.read_text().replace("patch_functor=ToyPatchFunctor(),", mine))
    data["cache"]["hasSeparateCfg"] = False
    snapshot = _snapshot(package)
    result = generate(_plan(data), manifest_path=manifest, style=CHECKOUT_STYLE)
    assert not result.ok
    assert [(Path(c.path).name, c.region) for c in result.edits.conflicts] == [
        ("adapters.py", "def:toy_adapter")
    ]
    assert "changed since it was generated" in result.edits.conflicts[0].reason
    with pytest.raises(ConflictError):
        write(result)
    assert _snapshot(package) == snapshot  # nothing written, not even the other files


def test_user_edit_of_a_generated_file_is_a_conflict(toy_checkout: dict[str, Any]) -> None:
    manifest, package = toy_checkout["manifest"], toy_checkout["package"]
    write(generate(toy_checkout["plan"], manifest_path=manifest, style=CHECKOUT_STYLE))
    planner = package / "distributed/transformers/toy.py"
    planner.write_text(planner.read_text() + "\n# tuned by hand\n")
    data = toy_checkout["data"]
    data["contextParallel"]["plan"]["proj_out"]["outputs"] = 1
    result = generate(_plan(data), manifest_path=manifest, style=CHECKOUT_STYLE)
    assert [(Path(c.path).name, c.region) for c in result.edits.conflicts] == [("toy.py", "<file>")]


def test_unrelated_existing_code_under_our_name_is_a_conflict(toy_checkout: dict[str, Any]) -> None:
    package = toy_checkout["package"]
    adapters = package / "caching/block_adapters/adapters.py"
    adapters.write_text(
        adapters.read_text() + "\n\ndef toy_adapter(pipe, **kwargs):\n  return None\n"
    )
    result = generate(
        toy_checkout["plan"], manifest_path=toy_checkout["manifest"], style=CHECKOUT_STYLE
    )
    assert [c.region for c in result.edits.conflicts] == ["def:toy_adapter"]
    assert "not generated by cdit-integrate" in result.edits.conflicts[0].reason


def test_region_deleted_after_generation_is_not_added_back(toy_checkout: dict[str, Any]) -> None:
    manifest, package = toy_checkout["manifest"], toy_checkout["package"]
    write(generate(toy_checkout["plan"], manifest_path=manifest, style=CHECKOUT_STYLE))
    init = package / "_utils/__init__.py"
    init.write_text(
        init.read_text().replace('toy_example = _safe_import(".examples", "toy_example")\n', "")
    )
    result = generate(toy_checkout["plan"], manifest_path=manifest, style=CHECKOUT_STYLE)
    assert [c.region for c in result.edits.conflicts] == ["assign:toy_example"]
    assert "removed after generation" in result.edits.conflicts[0].reason


def test_existing_standalone_file_not_generated_here_is_a_conflict(tmp_path: Path) -> None:
    plan = _plan(_plan_json(tmp_path, "standalone"))
    (tmp_path / "cdit_toy.py").write_text("# my own module\n")
    result = generate(
        plan, manifest_path=tmp_path / ".cdit" / "generated.json", style=STANDALONE_STYLE
    )
    assert [c.region for c in result.edits.conflicts] == ["<file>"]
    assert (tmp_path / "cdit_toy.py").read_text() == "# my own module\n"


# ----------------------------------------------------------------------------- refusals


def test_text_that_does_not_parse_is_never_written(tmp_path: Path) -> None:
    target = tmp_path / "broken.py"
    edits = plan_edits(
        [FileSpec(path=target, content="def broken(:\n", must_exist=False)], Manifest()
    )
    assert not edits.ok and "does not parse" in edits.errors[0]
    with pytest.raises(ConflictError):
        write_edits(edits, Manifest())
    assert not target.exists()


def test_a_target_file_that_does_not_parse_is_refused(toy_checkout: dict[str, Any]) -> None:
    init = toy_checkout["package"] / "_utils/__init__.py"
    init.write_text(init.read_text() + "\ndef (:\n")
    result = generate(
        toy_checkout["plan"], manifest_path=toy_checkout["manifest"], style=CHECKOUT_STYLE
    )
    assert not result.ok and any("does not parse" in e for e in result.edits.errors)


def test_a_file_changed_after_planning_is_not_overwritten(toy_checkout: dict[str, Any]) -> None:
    result = generate(
        toy_checkout["plan"], manifest_path=toy_checkout["manifest"], style=CHECKOUT_STYLE
    )
    init = toy_checkout["package"] / "_utils/__init__.py"
    init.write_text(init.read_text() + "# concurrent edit\n")
    with pytest.raises(ConflictError, match="changed while generating"):
        write(result)
    assert init.read_text().endswith("# concurrent edit\n")


def test_writes_leave_no_temporary_files_and_keep_the_mode(toy_checkout: dict[str, Any]) -> None:
    adapters = toy_checkout["package"] / "caching/block_adapters/adapters.py"
    adapters.chmod(0o640)
    write(
        generate(toy_checkout["plan"], manifest_path=toy_checkout["manifest"], style=CHECKOUT_STYLE)
    )
    assert adapters.stat().st_mode & 0o777 == 0o640
    assert not list(toy_checkout["root"].rglob("*.cdit-tmp"))


def test_missing_checkout_is_a_field_error(tmp_path: Path) -> None:
    data = _plan_json(tmp_path, "checkout")
    result = generate(_plan(data), style=CHECKOUT_STYLE)
    assert [e.path for e in result.plan_errors] == ["target.root"]


# ----------------------------------------------------------------------------- regions


def _module(code: str) -> cst.Module:
    return cst.parse_module(code)


def test_dict_entry_follows_the_existing_layout() -> None:
    region = Region(id="e", kind="dict_entry", name="B", container="m", code='"B": "b"')
    multi = put_region(_module('m = {\n  "A": "a",\n}\n'), region).code
    assert multi == 'm = {\n  "A": "a",\n  "B": "b",\n}\n'
    no_trailing = put_region(_module('m = {\n  "A": "a"\n}\n'), region).code
    assert no_trailing == 'm = {\n  "A": "a",\n  "B": "b"\n}\n'
    one_line = put_region(_module('m = {"A": "a"}\n'), region).code
    assert one_line == 'm = {"A": "a", "B": "b"}\n'
    replaced = put_region(_module('m = {"B": "old", "A": "a"}\n'), region).code
    assert replaced == 'm = {"B": "b", "A": "a"}\n'


def test_list_entry_and_function_body_statement() -> None:
    listed = put_region(
        _module('__all__ = [\n    "a",\n    "b",\n]\n'),
        Region(id="l", kind="list_entry", name="c", container="__all__", code='"c"'),
    ).code
    assert listed == '__all__ = [\n    "a",\n    "b",\n    "c",\n]\n'
    body = put_region(
        _module("def act():\n  A = _safe_import('.a')\n\n  if x:\n    pass\n"),
        Region(
            id="f",
            kind="function_assign",
            name="B",
            container="act",
            code="B = _safe_import('.b')\n",
            anchor=Anchor(call="_safe_import"),
        ),
    ).code
    assert (
        body
        == "def act():\n  A = _safe_import('.a')\n  B = _safe_import('.b')\n\n  if x:\n    pass\n"
    )


def test_def_goes_after_the_last_registered_definition() -> None:
    source = "@R.register('a')\ndef a():\n  pass\n\n\ndef helper():\n  pass\n"
    code = put_region(
        _module(source),
        Region(
            id="d",
            kind="def",
            name="b",
            code="@R.register('b')\ndef b():\n  pass\n",
            anchor=Anchor(decorator="R.register"),
        ),
    ).code
    assert code == (
        "@R.register('a')\ndef a():\n  pass\n\n\n@R.register('b')\ndef b():\n  pass\n\n\n"
        "def helper():\n  pass\n"
    )


def test_imports_are_added_through_libcst_only_when_missing() -> None:
    module = _module("import os\nfrom .registers import Example\n\nx = 1\n")
    same = add_imports(module, [ImportNeed("registers", "Example", 1)], "pkg._utils.examples")
    assert same.code == module.code
    added = add_imports(
        module,
        [ImportNeed("argparse"), ImportNeed("registers", "ExampleType", 1)],
        "pkg._utils.examples",
    ).code
    assert "import argparse" in added and "ExampleType" in added and "x = 1" in added


# ----------------------------------------------------------------------------- style


def test_style_detection(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    assert detect_style(tmp_path).line_length == 79 and detect_style(tmp_path).indent == "    "
    (tmp_path / "setup.cfg").write_text("[flake8]\nmax-line-length = 120\n")
    assert detect_style(tmp_path).line_length == 120
    (tmp_path / ".style.yapf").write_text("[style]\nindent_width = 2\ncolumn_limit = 100\n")
    yapf = detect_style(tmp_path)
    assert (yapf.indent, yapf.line_length, yapf.formatter) == ("  ", 100, "yapf")
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 110\nindent-width = 4\n")
    ruff = detect_style(tmp_path / "sub" if (tmp_path / "sub").mkdir() is None else tmp_path)
    assert (ruff.indent, ruff.line_length, ruff.formatter) == ("    ", 110, "ruff")


def test_reindent_keeps_strings_and_scales_continuation_lines() -> None:
    code = (
        'def f(\n    a,\n):\n    """Doc\n    text."""\n    s = """keep\n    this"""\n'
        "    return [\n        a,\n    ]\n"
    )
    assert reindent(code, "  ") == (
        'def f(\n  a,\n):\n  """Doc\n  text."""\n  s = """keep\n    this"""\n'
        "  return [\n    a,\n  ]\n"
    )


def test_configured_ruff_formats_the_standalone_module(tmp_path: Path) -> None:
    from lsp_server.codegen.style import find_ruff

    if find_ruff() is None:
        pytest.skip("ruff is not installed")
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 88\n")
    plan = _plan(_plan_json(tmp_path, "standalone"))
    result = generate(plan, manifest_path=tmp_path / ".cdit" / "generated.json")
    assert result.style is not None and result.style.formatter == "ruff"
    write(result)
    import subprocess

    check = subprocess.run(
        [find_ruff(), "format", "--check", str(tmp_path / "cdit_toy.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert check.returncode == 0, check.stdout + check.stderr


# ----------------------------------------------------------------------------- CLI


def test_cli_dry_run_prints_a_diff_and_writes_nothing(
    toy_checkout: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(toy_checkout["data"]))
    snapshot = _snapshot(toy_checkout["package"])
    assert run_generate(str(plan_file), dry_run=True) == 0
    out = capsys.readouterr().out
    assert "+++ b/src/cache_dit/caching/block_adapters/adapters.py" in out
    assert "+def toy_adapter(pipe, **kwargs) -> BlockAdapter:" in out
    assert _snapshot(toy_checkout["package"]) == snapshot
    assert not (tmp_path / ".cdit").exists()

    assert run_generate(str(plan_file)) == 0
    assert "wrote " in capsys.readouterr().out
    assert (tmp_path / ".cdit" / "generated.json").is_file()
    assert run_generate(str(plan_file)) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_cli_rejects_an_invalid_plan_with_field_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _plan_json(tmp_path, "standalone")
    data["cache"]["blockLists"][0]["forwardPattern"] = "Pattern_9"
    data["target"] = {"kind": "elsewhere"}
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(data))
    assert run_generate(str(plan_file)) == 2
    err = capsys.readouterr().err
    assert "cache.blockLists[0].forwardPattern: 'Pattern_9' is not one of" in err
    assert "target.kind: 'elsewhere' is not one of standalone, cache-dit-checkout" in err


def test_cli_reports_conflicts_with_exit_code_1(
    toy_checkout: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(toy_checkout["data"]))
    assert run_generate(str(plan_file)) == 0
    adapters = toy_checkout["package"] / "caching/block_adapters/adapters.py"
    adapters.write_text(adapters.read_text().replace("has_separate_cfg=True", "has_separate_cfg=1"))
    toy_checkout["data"]["example"]["prompt"] = "Another prompt"
    plan_file.write_text(json.dumps(toy_checkout["data"]))
    capsys.readouterr()
    assert run_generate(str(plan_file)) == 1
    assert "conflict:" in capsys.readouterr().err


def test_cli_generate_subcommand_is_wired(tmp_path: Path) -> None:
    from lsp_server.cli import main

    data = _plan_json(tmp_path, "standalone")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(data))
    assert main(["generate", str(plan_file), "--dry-run"]) == 0
    assert main(["generate", str(plan_file)]) == 0
    assert (tmp_path / "cdit_toy.py").is_file()


def test_answers_only_plan_is_completed_from_the_analysis(tmp_path: Path) -> None:
    from tests.conftest import diffusers_file

    answers = {
        "target": {"kind": "standalone", "path": str(tmp_path / "cdit_mochi.py")},
        "model": {
            "transformerClass": "MochiTransformer3DModel",
            "sources": {
                "transformer": str(diffusers_file("models/transformers/transformer_mochi.py"))
            },
        },
    }
    plan_file = tmp_path / "answers.json"
    plan_file.write_text(json.dumps(answers))
    assert run_generate(str(plan_file), dry_run=True) == 0


def test_build_plan_joins_analysis_and_answers() -> None:
    analysis = {
        "source": {"path": "/x/transformer_acme.py", "sha256": "0"},
        "transformers": [
            {
                "className": "AcmeTransformer2DModel",
                "isDiffusersModel": False,
                "blockLists": [{"attr": "layers", "forwardPattern": "Pattern_3"}],
                "patchFunctor": {"needed": False, "reasons": []},
                "separateCfg": {"value": None},
                "contextParallel": {"approach": "root_split", "plan": {"": {}}},
                "tensorParallel": {"layers": {}},
                "registry": {"proposedName": "Acme"},
            }
        ],
    }
    plan = build_plan(analysis, {"target": {"kind": "standalone", "path": "/p/cdit_acme.py"}})
    assert plan["registerName"] == "Acme" and plan["modelSlug"] == "acme"
    assert plan["cache"]["hasSeparateCfg"] is False
    assert plan["provenance"]["notes"]
    assert plan["tensorParallel"]["enabled"] is False
    chosen = build_plan(
        analysis,
        {
            "target": {"kind": "cache-dit-checkout", "root": "/r"},
            "registerName": "AcmeX",
            "contextParallel": {"enabled": False},
        },
    )
    assert chosen["registerName"] == "AcmeX" and chosen["contextParallel"]["enabled"] is False
    assert chosen["example"]["envVar"] == "ACMEX_DIR"


def test_cli_runs_are_idempotent_across_processes(tmp_path: Path) -> None:
    """The analysis orders some sets by hash; the plan and the code must not depend on it."""
    import subprocess
    import sys

    answers = {
        "target": {"kind": "standalone", "path": "cdit_wan.py"},
        "model": {
            "transformerClass": "WanTransformer3DModel",
            "sources": {"transformer": "diffusers.models.transformers.transformer_wan"},
        },
    }
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    outputs = []
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-m", "lsp_server.cli", "generate", str(tmp_path / "answers.json")],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs == [
        f"wrote {tmp_path.resolve() / 'cdit_wan.py'}\n",  # relative to the plan's folder
        "nothing to do: the generated code is up to date\n",
    ]
