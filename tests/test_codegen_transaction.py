"""Codegen writes all or nothing: the generated files and the manifest are one transaction.

A failure at any step (the manifest cannot be written, the third of five files cannot be
renamed, Ctrl-C) leaves every file as it was: the generated file not created, or with its
previous text, the manifest unchanged, no temporary files, no folders left behind. A generated
file the user made read-only is never replaced, and a plan target outside the workspace needs an
explicit flag (CLI) and is refused by the editor's generate command.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdit_runtime.contract import ProblemError
from lsp_server.cli_generate import cli_workspace, run_generate
from lsp_server.codegen import Workspace, generate, parse_plan, write
from lsp_server.codegen.edits import WriteError
from lsp_server.codegen.generate import GenerationResult
from lsp_server.features.generation import allowed_roots
from lsp_server.features.settings import Settings
from lsp_server.services.generate import generate_files

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "codegen_fixtures"


def _toy_plan(tmp: Path, kind: str = "standalone") -> dict[str, Any]:
    pkg = tmp / "toy_pkg"
    pkg.mkdir(exist_ok=True)
    shutil.copyfile(FIXTURES / "toy" / "toy_transformer.py.txt", pkg / "toy_transformer.py")
    shutil.copyfile(FIXTURES / "toy" / "toy_vae.py.txt", pkg / "toy_vae.py")
    text = (FIXTURES / "toy" / "plan.json").read_text()
    text = text.replace("{TOY}", (pkg / "toy_transformer.py").as_posix())
    text = text.replace("{TOY_VAE}", (pkg / "toy_vae.py").as_posix())
    text = text.replace("{ROOT}", (tmp / "cache-dit").as_posix())
    data = json.loads(text)
    if kind == "standalone":
        data["target"] = {"kind": "standalone", "path": (tmp / "out" / "cdit_toy.py").as_posix()}
    else:
        for path in (FIXTURES / "checkout" / "before").rglob("*"):
            if path.is_file():
                rel = path.relative_to(FIXTURES / "checkout" / "before")
                dest = tmp / "cache-dit" / rel.parent / rel.name.removesuffix(".txt")
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dest)
    return data


def _result(data: dict[str, Any], manifest: Path) -> GenerationResult:
    plan, errors = parse_plan(data)
    assert plan is not None, errors
    result = generate(plan, manifest_path=manifest)
    assert result.ok, result.to_json()
    return result


def _tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file and folder below `root` (content and permission bits)."""
    out = {}
    for path in sorted(root.rglob("*")):
        mode = path.stat().st_mode
        out[path.relative_to(root).as_posix()] = (
            path.read_bytes() if path.is_file() else b"<dir>",
            stat.S_IMODE(mode),
        )
    return out


def _failing_replace(
    monkeypatch: pytest.MonkeyPatch, fails: Callable[[Path, int], bool], error: BaseException
) -> list[Path]:
    """Make `os.replace(src, dst)` raise `error` when `fails(dst, call number)`."""
    real = os.replace
    calls: list[Path] = []

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(Path(dst))
        if fails(Path(dst), len(calls)):
            raise error
        real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return calls


def test_a_manifest_that_cannot_be_written_leaves_no_generated_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the module was written, then the manifest write raised; the module stayed."""
    manifest = tmp_path / ".cdit" / "generated.json"
    result = _result(_toy_plan(tmp_path), manifest)
    before = _tree(tmp_path)
    _failing_replace(monkeypatch, lambda dst, _: dst == manifest, OSError(28, "No space left"))
    with pytest.raises(WriteError, match=r"No space left.*nothing was changed"):
        write(result)
    assert not (tmp_path / "out" / "cdit_toy.py").exists()
    assert _tree(tmp_path) == before  # no temporary file, no `out/` or `.cdit/` folder


def test_a_failed_regeneration_keeps_the_previous_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = tmp_path / ".cdit" / "generated.json"
    data = _toy_plan(tmp_path)
    write(_result(data, manifest))
    module = tmp_path / "out" / "cdit_toy.py"
    module.chmod(0o640)  # kept across a regeneration, restored with the content
    before = _tree(tmp_path)
    data["registerName"] = "ToyTransformer2D"
    result = _result(data, manifest)
    assert [c.path for c in result.edits.changes] == [module]
    _failing_replace(monkeypatch, lambda dst, _: dst == manifest, OSError(5, "I/O error"))
    with pytest.raises(WriteError):
        write(result)
    assert _tree(tmp_path) == before
    monkeypatch.undo()
    assert write(_result(data, manifest)) == [module]  # and it still works afterwards
    assert "ToyTransformer2D" in module.read_text()
    assert stat.S_IMODE(module.stat().st_mode) == 0o640


@pytest.mark.parametrize("failing_call", [1, 2, 3, "last"])
def test_a_checkout_is_restored_whichever_rename_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_call: int | str
) -> None:
    """Many files (new and changed) plus the manifest: fail at the k-th rename, all restored."""
    manifest = tmp_path / ".cdit" / "generated.json"
    result = _result(_toy_plan(tmp_path, "checkout"), manifest)
    created = [c for c in result.edits.changes if c.created]
    assert len(result.edits.changes) >= 3 and created, "the toy checkout writes several files"
    before = _tree(tmp_path)
    total = len(result.edits.changes) + 1
    k = total if failing_call == "last" else failing_call
    calls = _failing_replace(monkeypatch, lambda _, n: n == k, PermissionError(13, "denied"))
    with pytest.raises(WriteError, match="nothing was changed"):
        write(result)
    assert _tree(tmp_path) == before
    assert len([c for c in calls if not c.name.endswith(".cdit-bak")]) >= k


def test_when_restoring_fails_too_the_previous_text_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manifest write fails, then putting the previous module back fails as well: the
    previous text stays in its backup (a hard link), which the error names; it is not deleted."""
    manifest = tmp_path / ".cdit" / "generated.json"
    data = _toy_plan(tmp_path)
    write(_result(data, manifest))
    module = tmp_path / "out" / "cdit_toy.py"
    previous = module.read_bytes()
    data["registerName"] = "ToyTransformer2D"
    result = _result(data, manifest)

    real = os.replace

    def replace(src: Any, dst: Any) -> None:
        if Path(dst) == manifest or str(src).endswith(".cdit-bak"):  # the restore fails too
            raise OSError(5, "I/O error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(WriteError, match="could not restore") as caught:
        write(result)
    (backup,) = module.parent.glob("*.cdit-bak")
    assert backup.read_bytes() == previous and str(backup) in str(caught.value)


def test_ctrl_c_while_renaming_rolls_back_and_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = tmp_path / ".cdit" / "generated.json"
    result = _result(_toy_plan(tmp_path), manifest)
    before = _tree(tmp_path)
    _failing_replace(monkeypatch, lambda dst, _: dst == manifest, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        write(result)
    assert _tree(tmp_path) == before


def test_a_real_failure_after_staging_restores_everything(tmp_path: Path) -> None:
    """No monkeypatch: between planning and writing, a file takes the place of the manifest's
    folder; the module is staged, the manifest cannot be, nothing is left."""
    manifest = tmp_path / ".cdit" / "generated.json"
    result = _result(_toy_plan(tmp_path), manifest)
    (tmp_path / ".cdit").write_text("a file where the folder should be\n")
    before = _tree(tmp_path)
    with pytest.raises(WriteError, match="nothing was changed"):
        write(result)
    assert _tree(tmp_path) == before


def test_cli_write_failure_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: a traceback, with the module already written."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_toy_plan(tmp_path)))
    manifest = tmp_path / ".cdit" / "generated.json"
    before = _tree(tmp_path)
    _failing_replace(
        monkeypatch, lambda dst, _: dst == manifest, OSError(30, "Read-only file system")
    )
    assert run_generate(str(plan)) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "Read-only file system" in err and "Traceback" not in err
    assert "nothing was changed" in err and "wrote" not in out
    assert _tree(tmp_path) == before


def test_a_read_only_generated_file_is_not_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `os.replace` swapped a new file in; the user's read-only flag was ignored."""
    plan = tmp_path / "plan.json"
    data = _toy_plan(tmp_path)
    plan.write_text(json.dumps(data))
    assert run_generate(str(plan)) == 0
    module = tmp_path / "out" / "cdit_toy.py"
    module.chmod(0o444)
    data["registerName"] = "ToyTransformer2D"
    plan.write_text(json.dumps(data))
    before = _tree(tmp_path)
    capsys.readouterr()
    assert run_generate(str(plan)) == 2
    err = capsys.readouterr().err
    assert "is read-only; it is not replaced" in err and err.count("\n") == 1, err
    assert run_generate(str(plan), dry_run=True) == 2  # reported before anything is written
    assert _tree(tmp_path) == before
    # the editor's generate command refuses it too (it never writes; the client would)
    with pytest.raises(ProblemError) as refused:
        generate_files(data, ["all"], tmp_path, (tmp_path,))
    assert any("read-only" in p.message for p in refused.value.parts or ())
    module.chmod(0o644)  # writable again: regenerated
    assert run_generate(str(plan)) == 0 and "ToyTransformer2D" in module.read_text()


def test_an_unchanged_read_only_file_is_fine(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_toy_plan(tmp_path)))
    assert run_generate(str(plan)) == 0
    (tmp_path / "out" / "cdit_toy.py").chmod(0o444)
    assert run_generate(str(plan)) == 0  # nothing to write: nothing to refuse


def test_targets_outside_the_workspace_need_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    data = _toy_plan(tmp_path)
    data["target"] = {"kind": "standalone", "path": "../../escaped/cdit_toy.py"}
    plan = project / ".cdit" / "plan.json"  # the editor keeps its plan there
    plan.parent.mkdir()
    plan.write_text(json.dumps(data))
    before = _tree(tmp_path)
    assert run_generate(str(plan)) == 2
    err = capsys.readouterr().err
    assert "is outside the workspace" in err and "--allow-outside-workspace" in err
    assert _tree(tmp_path) == before
    assert run_generate(str(plan), allow_outside_workspace=True) == 0
    assert (tmp_path / "escaped" / "cdit_toy.py").is_file()
    # a target inside the plan's workspace (the folder above `.cdit`) needs no flag
    data["target"] = {"kind": "standalone", "path": "../cdit_toy.py"}
    plan.write_text(json.dumps(data))
    assert run_generate(str(plan)) == 0 and (project / "cdit_toy.py").is_file()


def test_the_editor_refuses_targets_outside_the_workspace(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    data = _toy_plan(tmp_path)
    roots = allowed_roots(root, root / "model.py", Settings())
    for target in ("../elsewhere/cdit_toy.py", str(tmp_path / "cdit_toy.py")):
        data["target"] = {"kind": "standalone", "path": target}
        with pytest.raises(ProblemError) as refused:
            generate_files(data, ["all"], root, roots)
        assert "outside the workspace" in (refused.value.parts or ())[0].message
    # relative targets are taken from the workspace root, not the server's working folder
    data["target"] = {"kind": "standalone", "path": "cdit_toy.py"}
    made = generate_files(data, ["all"], root, roots)
    assert str(made.changes[0].path) == str(root / "cdit_toy.py")
    # the checkout the user's `cdit.cacheDitPath` names is theirs to write
    checkout = _toy_plan(tmp_path, "checkout")
    with pytest.raises(ProblemError):
        generate_files(checkout, ["all"], root, roots)
    settings = Settings(cache_dit_path=str(tmp_path / "cache-dit"))
    made = generate_files(checkout, ["all"], root, allowed_roots(root, None, settings))
    assert made.changes


def test_the_bundled_demo_needs_no_flag() -> None:
    """`make demo` runs `generate examples/demo/flux_answers.json` from the repository root;
    its target `.cdit/demo/flux_integration.py` is inside that workspace."""
    answers = REPO / "examples" / "demo" / "flux_answers.json"
    target = json.loads(answers.read_text())["target"]["path"]
    old = Path.cwd()
    try:
        os.chdir(REPO)
        workspace = cli_workspace(answers)
    finally:
        os.chdir(old)
    assert workspace.contains(answers.parent / target)
    assert (answers.parent / target).resolve() == REPO / ".cdit" / "demo" / "flux_integration.py"


def test_workspace_containment() -> None:
    ws = Workspace(roots=(Path("/a/b"),))
    assert ws.contains(Path("/a/b/c.py")) and ws.contains(Path("/a/b"))
    assert not ws.contains(Path("/a/bc/d.py")) and not ws.contains(Path("/a/b/../c.py"))
