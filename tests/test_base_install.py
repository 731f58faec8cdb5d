"""The base install (no `[runtime]` extra): the language server, `analyze` and `generate` work
without torch, diffusers, transformers or cache-dit, and what needs them says so in one line.

Each check runs in a fresh interpreter with an import hook (`BLOCKER`) that makes the runtime
packages unimportable: `import torch` raises ModuleNotFoundError, and `importlib.util.find_spec`
fails as it does for a package that is not installed. A module-level `import torch` anywhere on
these paths (analysis, codegen, the CLI, the server) fails these tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from lsp_server.runtime_deps import RUNTIME_MODULES
from tests.conftest import FIXTURES
from tests.lsp_fixtures import make_client, open_file, start_session

BLOCKED = tuple(RUNTIME_MODULES)  # torch, diffusers, transformers, cache_dit, einops, skimage

BLOCKER = textwrap.dedent(
    f"""
    import sys

    class _BlockRuntime:
        blocked = {BLOCKED!r}

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.blocked:
                raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
            return None

    sys.meta_path.insert(0, _BlockRuntime())
    for _name in list(sys.modules):
        if _name.split(".")[0] in _BlockRuntime.blocked:
            del sys.modules[_name]
    """
)

FIXTURE = FIXTURES / "models" / "demo_mmdit.py"


def run_blocked(code: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`cdit-integrate ARGS` under the hook (the console script's entry, `lsp_server.cli:main`)."""
    return run_blocked(
        f"from lsp_server.cli import main\nraise SystemExit(main({list(args)!r}))\n", cwd
    )


def test_the_hook_blocks_the_runtime(tmp_path):
    proc = run_blocked(
        """
        import importlib.util
        from lsp_server.runtime_deps import missing_runtime_modules
        try:
            import torch
        except ModuleNotFoundError:
            print("blocked")
        print(missing_runtime_modules())
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["blocked", repr(list(BLOCKED))]


def test_every_server_module_imports_without_the_runtime(tmp_path):
    """Analysis, codegen, the CLI, the features and the server: no module-level runtime import."""
    proc = run_blocked(
        """
        import importlib, pkgutil, sys
        import lsp_server
        failed = []
        for info in pkgutil.walk_packages(lsp_server.__path__, "lsp_server."):
            if info.name.endswith("__main__"):
                continue
            try:
                importlib.import_module(info.name)
            except Exception as exc:
                failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
        import cdit_runtime.cli  # what `cdit-integrate verify --help` reads
        print("\\n".join(failed) or "ok")
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_analyze_works_without_the_runtime(tmp_path):
    proc = run_cli(tmp_path, "analyze", str(FIXTURE), "--json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    (t,) = doc["transformers"]
    assert t["blockLists"] and all(b["forwardPattern"] for b in t["blockLists"])
    # the cache-dit registry cannot be read (no cache_dit): said as data, not a crash
    assert doc["transformers"][0]["registry"]["cacheDitVersion"] is None
    report = run_cli(tmp_path, "analyze", str(FIXTURE))
    assert report.returncode == 0 and t["className"] in report.stdout, report.stderr


def test_generate_works_without_the_runtime(tmp_path):
    answers = {
        "model": {
            "transformerClass": "DemoMMDiTTransformer2DModel",
            "sources": {"transformer": str(FIXTURE)},
        },
        "target": {"kind": "standalone", "path": "demo_integration.py"},
    }
    (tmp_path / "answers.json").write_text(json.dumps(answers), encoding="utf-8")
    proc = run_cli(tmp_path, "generate", "answers.json", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    generated = (tmp_path / "demo_integration.py").read_text(encoding="utf-8")
    compile(generated, "demo_integration.py", "exec")
    assert "def enable(" in generated and "BlockAdapter" in generated


def test_verify_says_in_one_line_that_it_needs_the_runtime_extra(tmp_path):
    proc = run_cli(tmp_path, "verify", "--tiny", "flux", "--phases", "baseline,cache")
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "[runtime]" in lines[0] and "cdit-integrator[runtime]" in lines[0]
    assert "torch" in lines[0] and "cache-dit" in lines[0]
    assert not (tmp_path / ".cdit").exists() and list(tmp_path.iterdir()) == []
    # printing the request needs no runtime
    printed = run_cli(tmp_path, "verify", "--tiny", "flux", "--print-request")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout)["model"]["family"] == "flux"


def test_the_verify_help_needs_no_runtime(tmp_path):
    proc = run_cli(tmp_path, "verify", "--help")
    assert proc.returncode == 0 and "[runtime]" in proc.stdout, proc.stderr


# -- the language server -------------------------------------------------------------------------

SERVER = BLOCKER + "import runpy\nrunpy.run_module('lsp_server', run_name='__main__')\n"


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=[sys.executable, "-c", SERVER], client_factory=make_client
    )
)
async def blocked_server(lsp_client: LanguageClient, tmp_path):
    # the runs use the server's own interpreter (no cdit.interpreter), which the hook blocks
    await start_session(lsp_client, tmp_path)
    yield
    await lsp_client.shutdown_session()


async def execute(client: LanguageClient, command: str, argument: dict) -> dict:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=command, arguments=[argument])
    )


@pytest.mark.asyncio
async def test_the_server_analyzes_and_explains_runs_need_the_runtime(
    blocked_server: LanguageClient, tmp_path
):
    client = blocked_server
    uri = open_file(client, FIXTURE)
    analysis = await execute(client, "cdit.lsp.analyzeFile", {"uri": uri})
    assert "error" not in analysis, analysis
    assert [t["className"] for t in analysis["transformers"]] == ["DemoMMDiTTransformer2DModel"]
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    titles = [(await client.code_lens_resolve_async(lens)).command.title for lens in lenses or []]
    assert "Run verification (needs the [runtime] extra)" in titles
    request = {
        "model": {"source": "tiny", "family": "flux"},
        "outputDir": str(tmp_path / "out"),
        "phases": [{"kind": "baseline"}],
        "device": "cpu",
    }
    reply = await execute(client, "cdit.lsp.runVerification", {"request": request})
    problem = reply["error"]
    assert problem["code"] == "runtime-missing"
    assert "[runtime]" in problem["message"] and "\n" not in problem["message"]
    assert problem["requirement"] == "cdit-integrator[runtime]"
    assert problem["missing"] == list(BLOCKED)
    assert not (tmp_path / "out").exists()
    # the gate check's load test: not run (a warning there), with the same install advice
    load = await execute(client, "cdit.lsp.loadCheck", {"sources": [str(FIXTURE)]})
    assert load["status"] == "not-run" and load["reason"] == "runtime-missing", load
    assert "[runtime]" in load["message"] and load["missing"] == list(BLOCKED)
