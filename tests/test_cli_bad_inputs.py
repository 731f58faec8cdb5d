"""Bad input to `cdit-integrate analyze` and `generate`: exit 2, one line on stderr, no traceback,
no hang, nothing written.

Each case is built in `tmp_path` and run through `lsp_server.cli.main` in this process (an
exception escaping `main` is what prints a traceback, and fails the test); the cases that could
block (a FIFO where a file is read) and one of each command also run as a real process with a
timeout. Before the fixes these ended in a traceback (long file names, deeply nested JSON, non-
UTF-8 plans, wrong types in answers, unusable targets and manifests) or hung (a FIFO).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lsp_server.cli import main

REPO = Path(__file__).resolve().parents[1]
TOY = REPO / "tests" / "codegen_fixtures" / "toy"
DEMO = REPO / "tests" / "fixtures" / "models" / "demo_mmdit.py"
DEEP = "[" * 50_000 + "]" * 50_000
LONG = "n" * 300

Case = Callable[[Path], list[str]]


def _toy_plan(tmp: Path, target: str | None = None) -> dict[str, Any]:
    """The toy IntegrationPlan (standalone target `tmp/cdit_toy.py` unless `target`)."""
    pkg = tmp / "toy_pkg"
    pkg.mkdir(exist_ok=True)
    shutil.copyfile(TOY / "toy_transformer.py.txt", pkg / "toy_transformer.py")
    shutil.copyfile(TOY / "toy_vae.py.txt", pkg / "toy_vae.py")
    text = (TOY / "plan.json").read_text()
    text = text.replace("{TOY}", (pkg / "toy_transformer.py").as_posix())
    text = text.replace("{TOY_VAE}", (pkg / "toy_vae.py").as_posix())
    text = text.replace("{ROOT}", (tmp / "cache-dit").as_posix())
    data = json.loads(text)
    path = (tmp / "cdit_toy.py").as_posix() if target is None else target
    data["target"] = {"kind": "standalone", "path": path}
    return data


def _toy_answers(tmp: Path, **extra: Any) -> dict[str, Any]:
    _toy_plan(tmp)  # writes the toy package
    answers: dict[str, Any] = {
        "model": {
            "transformerClass": "ToyTransformer2DModel",
            "sources": {"transformer": str(tmp / "toy_pkg" / "toy_transformer.py")},
        },
        "target": {"kind": "standalone", "path": "cdit_toy.py"},
    }
    for key, value in extra.items():
        answers[key] = value
    return answers


def _json(tmp: Path, name: str, data: Any) -> str:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return str(path)


def _raw(tmp: Path, name: str, data: bytes) -> str:
    path = tmp / name
    path.write_bytes(data)
    return str(path)


def _plan(tmp: Path, target: str | None = None) -> str:
    return _json(tmp, "plan.json", _toy_plan(tmp, target))


def _generated(tmp: Path) -> str:
    """A toy module generated once, then a plan that changes it (another register name)."""
    plan = _plan(tmp)
    assert main(["generate", plan]) == 0
    data = _toy_plan(tmp)
    data["registerName"] = "ToyTransformer2D"
    return _json(tmp, "plan.json", data)


def _read_only_target(tmp: Path) -> list[str]:
    plan = _generated(tmp)
    (tmp / "cdit_toy.py").chmod(0o444)
    return ["generate", plan]


def _read_only_manifest(tmp: Path) -> list[str]:
    plan = _generated(tmp)
    (tmp / ".cdit" / "generated.json").chmod(0o444)
    return ["generate", plan]


def _answers_with(tmp: Path, dotted: str, value: Any) -> list[str]:
    answers = _toy_answers(tmp)
    node = answers
    *parents, last = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return ["generate", _json(tmp, "answers.json", answers)]


def _file_then(tmp: Path, name: str) -> Path:
    (tmp / "a_file").write_text("x\n")
    return tmp / "a_file" / name


def _checkout_plan(tmp: Path, root: str) -> list[str]:
    data = _toy_plan(tmp)
    data["target"] = {"kind": "cache-dit-checkout", "root": root}
    return ["generate", _json(tmp, "plan.json", data)]


def _symlink_out(tmp: Path) -> list[str]:
    (tmp / "ws").mkdir(exist_ok=True)
    (tmp / "elsewhere").mkdir()
    (tmp / "ws" / "link").symlink_to(tmp / "elsewhere")
    data = _toy_plan(tmp, str(tmp / "ws" / "link" / "cdit_toy.py"))
    return ["generate", _json(tmp, "ws/plan.json", data)]


# name -> (arguments built in tmp_path, text the one error line contains)
CASES: dict[str, tuple[Case, str]] = {
    # analyze
    "analyze: file name too long": (lambda t: ["analyze", LONG + ".py"], "file name too long"),
    "analyze: module name too long": (
        lambda t: ["analyze", ".".join([LONG] * 3)],
        "file name too long",
    ),
    "analyze: pipeline name too long": (
        lambda t: ["analyze", str(DEMO), "--pipeline", str(t / (LONG + ".py"))],
        "file name too long",
    ),
    "analyze: config nested too deeply": (
        lambda t: ["analyze", str(DEMO), "--config", _raw(t, "c.json", DEEP.encode())],
        "nested too deeply",
    ),
    "analyze: model index nested too deeply": (
        lambda t: ["analyze", str(DEMO), "--model-index", _raw(t, "m.json", DEEP.encode())],
        "nested too deeply",
    ),
    "analyze: config integer of 5000 digits": (
        lambda t: [
            "analyze",
            str(DEMO),
            "--config",
            _raw(t, "c.json", b'{"n": 1' + b"0" * 5000 + b"}"),
        ],
        "not usable JSON",
    ),
    "analyze: config is a device": (
        lambda t: ["analyze", str(DEMO), "--config", os.devnull],
        "is a device, not a regular file",
    ),
    "analyze: parallel size absurd": (
        lambda t: ["analyze", str(DEMO), "--cp-size", "9" * 40],
        "too large",
    ),
    # generate: the plan file
    "generate: plan not UTF-8": (
        lambda t: ["generate", _raw(t, "plan.json", b'{"a": "\xe9"}')],
        "not UTF-8 text (byte 7)",
    ),
    "generate: plan is binary": (
        lambda t: ["generate", _raw(t, "plan.json", b"\x00\xff\xfe\x01")],
        "not UTF-8",
    ),
    "generate: plan nested too deeply": (
        lambda t: ["generate", _raw(t, "plan.json", DEEP.encode())],
        "nested too deeply",
    ),
    "generate: plan is empty": (lambda t: ["generate", _raw(t, "plan.json", b"")], "not JSON"),
    "generate: plan is a folder": (lambda t: ["generate", str(t)], "is a folder"),
    "generate: plan is a device": (lambda t: ["generate", os.devnull], "is a device"),
    "generate: plan name too long": (
        lambda t: ["generate", str(t / (LONG + ".json"))],
        "file name too long",
    ),
    # generate: answers
    "generate: answers nested too deeply": (
        lambda t: ["generate", _raw(t, "a.json", ('{"model": ' + DEEP + "}").encode())],
        "nested too deeply",
    ),
    "generate: answers model is a string": (
        lambda t: _answers_with(t, "model", "flux"),
        "model: expected an object or null, got a string",
    ),
    "generate: answers sources is an array": (
        lambda t: _answers_with(t, "model.sources", ["a.py"]),
        "model.sources: expected an object or null, got an array",
    ),
    "generate: answers config is an array": (
        lambda t: _answers_with(t, "model.sources.config", [1]),
        "model.sources.config: expected a string or null, got an array",
    ),
    "generate: answers register name is a number": (
        lambda t: _answers_with(t, "registerName", 7),
        "registerName: expected a string or null, got a number",
    ),
    "generate: answers CP is an array": (
        lambda t: _answers_with(t, "contextParallel", [1]),
        "contextParallel: expected an object or null, got an array",
    ),
    "generate: answers TP strategy is an array": (
        lambda t: _answers_with(t, "tensorParallel.strategy", ["colwise"]),
        "tensorParallel.strategy: expected a string or null",
    ),
    "generate: answers CP enabled is a string": (
        lambda t: _answers_with(t, "contextParallel.enabled", "no"),
        "contextParallel.enabled: expected true or false or null",
    ),
    "generate: answers config nested too deeply": (
        lambda t: _answers_with(t, "model.sources.config", _raw(t, "cfg.json", DEEP.encode())),
        "nested too deeply",
    ),
    "generate: answers transformer name too long": (
        lambda t: _answers_with(t, "model.sources.transformer", LONG + ".py"),
        "file name too long",
    ),
    # generate: targets
    "generate: target with a NUL byte": (
        lambda t: ["generate", _plan(t, str(t / "a\x00b" / "cdit_toy.py"))],
        "target.path: contains a NUL byte",
    ),
    "generate: target is a folder": (
        lambda t: (t / "cdit_toy.py").mkdir() or ["generate", _plan(t)],
        "is a folder, not a regular file",
    ),
    "generate: target under a file": (
        lambda t: ["generate", _plan(t, str(_file_then(t, "cdit_toy.py")))],
        "a folder in its path is a file",
    ),
    "generate: target not UTF-8": (
        lambda t: (t / "cdit_toy.py").write_bytes(b"x = '\xe9'\n") and ["generate", _plan(t)],
        "not UTF-8 text",
    ),
    "generate: target read-only": (_read_only_target, "is read-only; it is not replaced"),
    "generate: target name too long": (
        lambda t: ["generate", _plan(t, str(t / (LONG + ".py")))],
        "file name too long",
    ),
    "generate: checkout root empty": (
        lambda t: _checkout_plan(t, ""),
        "target.root: must name the checkout's folder",
    ),
    # generate: the manifest
    "generate: manifest is a folder": (
        lambda t: ["generate", _plan(t), "--manifest", str(t)],
        "manifest",
    ),
    "generate: manifest under a file": (
        lambda t: ["generate", _plan(t), "--manifest", str(_file_then(t, "generated.json"))],
        "a folder in its path is a file",
    ),
    "generate: manifest nested too deeply": (
        lambda t: ["generate", _plan(t), "--manifest", _raw(t, "g.json", DEEP.encode())],
        "nested too deeply",
    ),
    "generate: manifest read-only": (_read_only_manifest, "is read-only"),
    # generate: outside the workspace (the current folder and the plan's folder)
    "generate: target ../..": (
        lambda t: [
            "generate",
            _json(t, "ws/deeper/plan.json", _toy_plan(t, "../../x/cdit_toy.py")),
        ],
        "is outside the workspace",
    ),
    "generate: target absolute elsewhere": (
        lambda t: ["generate", _json(t, "ws/plan.json", _toy_plan(t, str(t / "cdit_toy.py")))],
        "pass --allow-outside-workspace",
    ),
    "generate: target through a symlink": (_symlink_out, "is outside the workspace"),
}


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_exit_2_and_one_line(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    build, expected = CASES[case]
    work = tmp_path / "ws"
    work.mkdir(exist_ok=True)
    monkeypatch.chdir(work)  # the workspace of `generate` without --allow-outside-workspace
    args = build(tmp_path)
    capsys.readouterr()
    before = _files(tmp_path)
    assert main(args) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("cdit-integrate: error: "), err
    assert expected in lines[0], err
    assert "Traceback" not in err and out == ""
    assert _files(tmp_path) == before  # nothing written, nothing changed
    assert not list(tmp_path.rglob("*.cdit-tmp")) and not list(tmp_path.rglob("*.cdit-bak"))


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},  # this checkout, whatever the folder
    )


@pytest.mark.parametrize("where", ["analyze --config", "generate plan", "generate target"])
def test_a_fifo_is_refused_without_blocking(where: str, tmp_path: Path) -> None:
    """A FIFO where a file is read blocked forever; it is refused before it is opened."""
    fifo = tmp_path / ("cdit_toy.py" if where == "generate target" else "fifo.json")
    os.mkfifo(fifo)
    if where == "analyze --config":
        args = ["analyze", str(DEMO), "--config", str(fifo)]
    elif where == "generate plan":
        args = ["generate", str(fifo)]
    else:
        args = ["generate", _plan(tmp_path)]
    proc = _run(*args, cwd=tmp_path)  # a hang fails with TimeoutExpired
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "is a FIFO (named pipe), not a regular file" in lines[0], lines
    assert "Traceback" not in proc.stderr


def test_process_level_errors_have_no_traceback(tmp_path: Path) -> None:
    """The same as a real process: what used to print a RecursionError / OSError traceback."""
    deep = _raw(tmp_path, "deep.json", DEEP.encode())
    for args in (["analyze", str(DEMO), "--config", deep], ["generate", deep]):
        proc = _run(*args, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and "nested too deeply" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_an_import_with_a_too_long_module_name_is_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The analysis follows imports to other files; a module name the file system refuses
    (ENAMETOOLONG) is an import it cannot follow, not a failed analysis."""
    model = tmp_path / "model.py"
    model.write_text(
        "import torch\n"
        "from torch import nn\n"
        f"from {LONG} import Block\n"
        f"from .{LONG} import Other\n\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.blocks = nn.ModuleList([Block() for _ in range(2)])\n\n"
        "    def forward(self, hidden_states, encoder_hidden_states=None):\n"
        "        for block in self.blocks:\n"
        "            hidden_states = block(hidden_states)\n"
        "        return hidden_states\n"
    )
    assert main(["analyze", str(model), "--json"]) == 0, capsys.readouterr().err
    (found,) = json.loads(capsys.readouterr().out)["transformers"]
    assert found["className"] == "Model"


def test_outside_the_workspace_with_the_flag_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ws").mkdir()
    monkeypatch.chdir(tmp_path / "ws")
    plan = _json(tmp_path, "ws/plan.json", _toy_plan(tmp_path, "../out/cdit_toy.py"))
    assert main(["generate", plan]) == 2
    assert "is outside the workspace" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert main(["generate", plan, "--allow-outside-workspace"]) == 0
    assert (tmp_path / "out" / "cdit_toy.py").is_file()


def test_the_editor_skips_a_gate_check_file_that_is_a_fifo(tmp_path: Path) -> None:
    """The server reads `.cdit/integration.json` for diagnostics and generation: a FIFO there
    blocked it; it is now ignored (as an unreadable file is), as is JSON nested too deeply."""
    (tmp_path / ".cdit").mkdir()
    os.mkfifo(tmp_path / ".cdit" / "integration.json")
    deep = tmp_path / "deep"
    (deep / ".cdit").mkdir(parents=True)
    (deep / ".cdit" / "integration.json").write_text(DEEP)
    code = (
        "import sys; from pathlib import Path\n"
        "from lsp_server.features.generation import gate_check_answers\n"
        "print(gate_check_answers(Path(sys.argv[1])), gate_check_answers(Path(sys.argv[2])))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), str(deep)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "None None", proc.stderr


def _other_user() -> list[str]:
    """A command prefix that runs as an unprivileged user (root ignores permission bits)."""
    if os.geteuid() == 0:
        return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    return []


@pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None,
    reason="running as root without setpriv: permission bits are not enforced",
)
def test_permission_problems_are_one_line_and_change_nothing() -> None:
    """A plan nobody may read, a target folder or manifest folder that is not writable, and (as
    another user) a manifest in a sticky folder that belongs to someone else."""
    probe = subprocess.run(
        [*_other_user(), sys.executable, "-c", "import lsp_server.cli"],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    if probe.returncode != 0:  # a checkout in a private folder (`mktemp -d` makes it 0700)
        pytest.skip("the unprivileged user cannot read this checkout or its interpreter")
    base = Path(tempfile.mkdtemp(prefix="cdit-perm-"))
    try:
        base.chmod(0o777)
        ws = base / "ws"
        ws.mkdir(mode=0o777)
        data = _toy_plan(base, str(ws / "cdit_toy.py"))
        for path in base.rglob("*"):
            path.chmod(0o777 if path.is_dir() else 0o666)
        plan = ws / "plan.json"
        plan.write_text(json.dumps(data))
        plan.chmod(0o666)
        assert main(["generate", str(plan)]) == 0  # by the user running the tests
        for path in ws.rglob("*"):
            path.chmod(0o777 if path.is_dir() else 0o666)
        data["registerName"] = "ToyTransformer2D"
        plan.write_text(json.dumps(data))

        def run(expected: str) -> None:
            before = _files(base)
            proc = subprocess.run(
                [*_other_user(), sys.executable, "-m", "lsp_server.cli", "generate", str(plan)],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=ws,
                env={**os.environ, "PYTHONPATH": str(REPO), "HOME": str(base)},
            )
            lines = proc.stderr.splitlines()
            assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], proc.stderr
            assert _files(base) == before

        plan.chmod(0o000)
        run("permission denied")
        plan.chmod(0o666)
        ws.chmod(0o555)
        run(f"folder {ws} is not writable")
        ws.chmod(0o777)
        (ws / ".cdit").chmod(0o555)
        run(f"folder {ws / '.cdit'} is not writable")
        if os.geteuid() == 0:  # the manifest is root's, in a sticky folder: not replaceable
            (ws / ".cdit").chmod(0o1777)
            run("sticky bit")
    finally:
        for path in [base, *base.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)
