"""Copied diffusers sources in the editor (a real server over stdio): the CDIT402/CDIT401
diagnostics on the import lines, the quick fix and `cdit.lsp.rewriteImports` (a previewed edit),
and `cdit.lsp.loadCheck`, which imports the sources in a subprocess as a run does: the copy with
relative imports fails, the rewritten copy and the installed module (a dotted name) load, and an
untrusted workspace is refused."""

from __future__ import annotations

import ast
import json
import shutil

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.conftest import diffusers_file
from tests.lsp_fixtures import (
    apply_workspace_edit,
    diagnostics_for,
    open_file,
    server_config,
    start_session,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

SANA_VIDEO = "models/transformers/transformer_sana_video.py"
SANA_PIPELINE = "pipelines/sana_video/pipeline_sana_video.py"
MODULE = "diffusers.models.transformers.transformer_sana_video"
CLASS = "SanaVideoTransformer3DModel"
NO_PARENT = "attempted relative import with no known parent package"


def relative_lines(text: str) -> list[int]:
    tree = ast.parse(text)
    return sorted(n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("copied")
    (root / "models").mkdir()
    (root / "pipelines").mkdir()
    shutil.copy(diffusers_file(SANA_VIDEO), root / "models")
    shutil.copy(diffusers_file(SANA_PIPELINE), root / "pipelines")
    (root / "rewritten").mkdir()
    shutil.copy(diffusers_file(SANA_VIDEO), root / "rewritten")
    return root


@pytest_lsp.fixture(config=server_config(), scope="module")
async def client(lsp_client: LanguageClient, workspace):
    await start_session(lsp_client, workspace, settings={"debounceMs": 0})
    yield
    await lsp_client.shutdown_session()


async def execute(client: LanguageClient, command: str, argument: dict) -> dict:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=command, arguments=[argument])
    )


def cdit(diagnostics: list[types.Diagnostic], code: str) -> list[types.Diagnostic]:
    return [d for d in diagnostics if d.source == "cdit" and d.code == code]


async def test_a_copied_transformer_says_where_its_imports_resolved(client, workspace):
    path = workspace / "models" / "transformer_sana_video.py"
    uri = open_file(client, path)
    diagnostics = await diagnostics_for(client, uri, 1, timeout=60)
    (note,) = cdit(diagnostics, "CDIT402")
    assert note.severity == types.DiagnosticSeverity.Information
    assert note.range.start.line == relative_lines(path.read_text())[0] - 1
    assert f"as {MODULE}" in note.message and "resolved against installed diffusers" in note.message
    assert cdit(diagnostics, "CDIT401") == []
    # the analysis read the block and attention classes through diffusers: TP hints are there
    assert cdit(diagnostics, "CDIT305") or cdit(diagnostics, "CDIT101")


async def test_a_copied_pipeline_too(client, workspace):
    path = workspace / "pipelines" / "pipeline_sana_video.py"
    uri = open_file(client, path)
    diagnostics = await diagnostics_for(client, uri, 1, timeout=60)
    (note,) = cdit(diagnostics, "CDIT402")
    assert "as diffusers.pipelines.sana_video.pipeline_sana_video" in note.message
    assert note.range.start.line == relative_lines(path.read_text())[0] - 1


async def test_an_unresolved_import_is_a_warning_on_its_line(client, workspace):
    path = workspace / "models" / "broken_copy.py"
    text = diffusers_file(SANA_VIDEO).read_text()
    text = text.replace("import torch\n", "import torch\nimport cdit_not_installed_pkg\n", 1)
    path.write_text(text)
    uri = open_file(client, path)
    diagnostics = await diagnostics_for(client, uri, 1, timeout=60)
    (warning,) = cdit(diagnostics, "CDIT401")
    assert warning.severity == types.DiagnosticSeverity.Warning
    assert warning.range.start.line == text.splitlines().index("import cdit_not_installed_pkg")
    assert "no module named 'cdit_not_installed_pkg'" in warning.message
    assert "The analysis lost: nothing the analysis reads uses it" in warning.message


async def test_the_quick_fix_rewrites_the_imports(client, workspace, tmp_path):
    path = workspace / "models" / "transformer_sana_video.py"
    diagnostics = await diagnostics_for(client, path.as_uri(), 1, timeout=60)
    (note,) = cdit(diagnostics, "CDIT402")
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=path.as_uri()),
            range=note.range,
            context=types.CodeActionContext(diagnostics=[note], only=["quickfix"]),
        )
    )
    titles = [a.title for a in actions or []]
    assert "cdit: Rewrite the relative imports as absolute diffusers imports" in titles
    action = next(a for a in actions if "Rewrite the relative imports" in a.title)
    resolved = await client.code_action_resolve_async(action)
    assert resolved.edit is not None
    # applied to a copy of the file, the edit leaves no relative import
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    edit = json.loads(json.dumps(client.protocol._converter.unstructure(resolved.edit)))
    edit = json.loads(json.dumps(edit).replace(path.as_uri(), copy.as_uri()))
    apply_workspace_edit(client.protocol._converter.structure(edit, types.WorkspaceEdit))
    assert relative_lines(copy.read_text()) == []
    assert relative_lines(path.read_text()) != []  # the user's file is untouched


async def test_the_load_check_fails_for_the_copy_and_offers_the_fixes(client, workspace):
    reply = await execute(
        client,
        "cdit.lsp.loadCheck",
        {"sources": ["models/transformer_sana_video.py", MODULE], "timeoutS": 300},
    )
    assert reply["status"] == "failed", reply
    copy, installed = reply["results"]
    assert copy["ok"] is False
    assert copy["error"] == NO_PARENT
    assert copy["errorType"] == "ImportError"
    assert copy["source"] == str(workspace / "models" / "transformer_sana_video.py")
    assert copy["installed"]["module"] == MODULE
    assert copy["installed"]["file"] == str(diffusers_file(SANA_VIDEO))
    assert copy["installed"]["identical"] is True
    assert copy["rewrite"]["command"] == "cdit.lsp.rewriteImports"
    assert copy["rewrite"]["arguments"] == [
        {"uri": (workspace / "models" / "transformer_sana_video.py").as_uri()}
    ]
    assert reply["message"].endswith(f": {NO_PARENT}")
    # the installed module, named by its dotted name, loads and defines the class
    assert installed["ok"] is True, installed
    assert installed["module"] == MODULE and CLASS in installed["classes"]


async def test_the_rewritten_copy_loads(client, workspace):
    path = workspace / "rewritten" / "transformer_sana_video.py"
    reply = await execute(client, "cdit.lsp.rewriteImports", {"uri": path.as_uri(), "apply": True})
    assert reply.get("applied") is True, reply
    assert reply["module"] == MODULE
    text = path.read_text()
    assert relative_lines(text) == []
    assert "from diffusers.models.attention import AttentionMixin" in text
    again = await execute(client, "cdit.lsp.rewriteImports", {"uri": path.as_uri()})
    assert again["error"]["code"] == "no-anchor"
    reply = await execute(client, "cdit.lsp.loadCheck", {"sources": [str(path)], "timeoutS": 300})
    assert reply["status"] == "ok", reply
    (result,) = reply["results"]
    assert result["ok"] is True
    assert result["module"] == "transformer_sana_video"
    assert CLASS in result["classes"]


async def test_the_load_check_times_out(client, workspace):
    reply = await execute(client, "cdit.lsp.loadCheck", {"sources": [MODULE], "timeoutS": 0.000001})
    assert reply["status"] == "timeout"
    assert "longer than 1 s" in reply["message"]


@pytest_lsp.fixture(config=server_config(), scope="module")
async def untrusted(lsp_client: LanguageClient, workspace):
    await start_session(lsp_client, workspace, settings={"debounceMs": 0}, trusted=False)
    yield
    await lsp_client.shutdown_session()


async def test_untrusted_workspaces_neither_load_nor_rewrite(untrusted, workspace):
    path = workspace / "models" / "transformer_sana_video.py"
    reply = await execute(untrusted, "cdit.lsp.loadCheck", {"sources": [str(path)]})
    assert reply == {
        "status": "not-run",
        "reason": "untrusted",
        "message": "not run: untrusted workspace",
        "results": [],
    }
    reply = await execute(untrusted, "cdit.lsp.rewriteImports", {"uri": path.as_uri()})
    assert reply["error"]["code"] == "untrusted"
    # the diagnostics still come (the analysis executes nothing)
    uri = open_file(untrusted, path)
    assert cdit(await diagnostics_for(untrusted, uri, 1, timeout=60), "CDIT402")
