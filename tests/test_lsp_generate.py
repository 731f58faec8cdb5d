"""Generation from the editor: a code action's WorkspaceEdit, applied to a copy, equals what
`cdit-integrate generate` writes; `cdit.lsp.generate` applies it through the client; a second run is
a no-op; code the user changed is never overwritten."""

from __future__ import annotations

import json
import subprocess
import sys

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

FLUX = diffusers_file("models/transformers/transformer_flux.py")
CLASS = "FluxTransformer2DModel"


def answers(target: str) -> dict:
    return {
        "model": {"transformerClass": CLASS, "sources": {"transformer": str(FLUX)}},
        "target": {"kind": "standalone", "path": target},
    }


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    editor = tmp_path_factory.mktemp("editor")
    (editor / ".cdit").mkdir()
    gate_check = answers(str(editor / "flux_cdit.py"))
    (editor / ".cdit" / "integration.json").write_text(json.dumps(gate_check), encoding="utf-8")
    cli = tmp_path_factory.mktemp("cli")
    (cli / "plan.json").write_text(json.dumps(answers(str(cli / "flux_cdit.py"))), "utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "generate", str(cli / "plan.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return editor, cli


@pytest_lsp.fixture(config=server_config(), scope="module")
async def client(lsp_client: LanguageClient, folders):
    editor, _ = folders
    await start_session(lsp_client, editor, settings={"debounceMs": 0})
    open_file(lsp_client, FLUX)
    await diagnostics_for(lsp_client, FLUX.as_uri(), 1)
    yield
    await lsp_client.shutdown_session()


def same_output(editor, cli) -> None:
    assert (editor / "flux_cdit.py").read_text() == (cli / "flux_cdit.py").read_text()
    assert (editor / ".cdit" / "generated.json").read_text() == (
        cli / ".cdit" / "generated.json"
    ).read_text()


async def test_code_action_edit_equals_the_cli_output(client: LanguageClient, folders):
    editor, cli = folders
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=FLUX.as_uri()),
            range=types.Range(types.Position(0, 0), types.Position(0, 0)),
            context=types.CodeActionContext(diagnostics=[], only=["source.cdit.generate"]),
        )
    )
    assert actions is not None
    (everything,) = [a for a in actions if a.kind == "source.cdit.generate.all"]
    assert everything.edit is None and everything.disabled is None  # the edit comes on resolve
    resolved = await client.code_action_resolve_async(everything)
    edit = resolved.edit
    assert edit is not None and edit.document_changes
    # VS Code previews edits whose annotation needs confirmation.
    assert edit.change_annotations and all(
        a.needs_confirmation for a in edit.change_annotations.values()
    )
    assert not (editor / "flux_cdit.py").exists()  # the server wrote nothing itself
    apply_workspace_edit(edit)
    same_output(editor, cli)


async def test_a_second_generation_changes_nothing(client: LanguageClient, folders):
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cdit.lsp.generate", arguments=[{"uri": FLUX.as_uri()}])
    )
    assert result["error"]["code"] == "up-to-date"


async def test_generate_command_applies_through_the_client(client: LanguageClient, folders):
    editor, cli = folders
    (editor / "flux_cdit.py").unlink()
    (editor / ".cdit" / "generated.json").unlink()
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="cdit.lsp.generate", arguments=[{"uri": FLUX.as_uri(), "apply": True}]
        )
    )
    assert result["applied"] is True
    assert {f["path"] for f in result["files"]} == {
        str(editor / "flux_cdit.py"),
        str(editor / ".cdit" / "generated.json"),
    }
    # without a pipeline the ControlNet residuals count: added per block inside each step
    text = (editor / "flux_cdit.py").read_text()
    assert "def _transformer_blocks_step(" in text
    assert "controlnet_block_samples[index_block // interval_control]" in text
    assert "CDIT-REVIEW" not in text and result["review"] == []
    same_output(editor, cli)


async def test_user_edits_are_never_overwritten(client: LanguageClient, folders):
    editor, _ = folders
    module = editor / "flux_cdit.py"
    module.write_text(module.read_text() + "\n# my change\n")
    changed = answers(str(module)) | {"registerName": "FluxTransformer2D"}
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="cdit.lsp.generate", arguments=[{"uri": FLUX.as_uri(), "answers": changed}]
        )
    )
    assert result["error"]["code"] == "conflict"
    (problem,) = result["error"]["problems"]
    assert problem["path"] == "" and problem["message"] in result["error"]["message"]
    assert (
        "your edits are kept" in result["error"]["message"]
        or "changed" in result["error"]["message"]
    )
    assert module.read_text().endswith("# my change\n")


async def test_build_plan_reports_field_errors(client: LanguageClient, folders):
    bad = {"target": {"kind": "standalone", "path": "not a module.txt"}}
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="cdit.lsp.buildPlan", arguments=[{"uri": FLUX.as_uri(), "answers": bad}]
        )
    )
    assert result["plan"]["model"]["transformerClass"] == CLASS
    assert any(e["path"] == "target.path" for e in result["errors"])


async def test_build_plan_decides_separate_cfg_for_the_runs_call(client: LanguageClient, folders):
    """Flux's second call runs only with `true_cfg_scale > 1` and a negative prompt: the plan's
    flag follows the answers' `run` (the gate check's call arguments), not the default path."""
    editor, _ = folders
    plan_answers = answers(str(editor / "flux_cdit.py"))
    plan_answers["model"]["sources"]["pipeline"] = str(
        diffusers_file("pipelines/flux/pipeline_flux.py")
    )

    async def separate(extra: dict) -> bool:
        result = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(
                command="cdit.lsp.buildPlan",
                arguments=[{"uri": FLUX.as_uri(), "answers": {**plan_answers, **extra}}],
            )
        )
        assert not result.get("errors"), result
        return result["plan"]["cache"]["hasSeparateCfg"]

    assert await separate({}) is False
    negatives = {"negative_prompt_embeds": "n.npy", "negative_pooled_prompt_embeds": "p.npy"}
    run = {"callArgs": {"true_cfg_scale": 4.0}, "inputs": negatives}
    assert await separate({"run": run}) is True
    # Flux wants both negative embeddings: one of them is not a negative prompt
    run = {"callArgs": {"true_cfg_scale": 4.0}, "inputs": {"negative_prompt_embeds": "n.npy"}}
    assert await separate({"run": run}) is False


async def test_patch_functor_diagnostics_offer_a_quick_fix(client: LanguageClient):
    diagnostics = [d for d in client.diagnostics[FLUX.as_uri()] if d.code == "CDIT101"]
    assert diagnostics
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=FLUX.as_uri()),
            range=diagnostics[0].range,
            context=types.CodeActionContext(diagnostics=diagnostics, only=["quickfix"]),
        )
    )
    assert actions is not None and len(actions) == len(diagnostics)
    for action, diagnostic in zip(actions, diagnostics, strict=True):
        assert action.kind == types.CodeActionKind.QuickFix
        assert action.title == "cdit: Generate the integration (its PatchFunctor included)"
        assert list(action.diagnostics) == [diagnostic]


@pytest_lsp.fixture(config=server_config())
async def emacs(lsp_client: LanguageClient, tmp_path):
    # Emacs (eglot/lsp-mode capabilities): no codeAction/resolve, no change annotations.
    await start_session(lsp_client, tmp_path, settings={"debounceMs": 0}, client_name="emacs")
    yield
    await lsp_client.shutdown_session()


@pytest.mark.asyncio
async def test_clients_without_resolve_get_edits_in_the_list(emacs: LanguageClient, tmp_path):
    open_file(emacs, FLUX)
    await diagnostics_for(emacs, FLUX.as_uri(), 1)
    actions = await emacs.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=FLUX.as_uri()),
            range=types.Range(types.Position(0, 0), types.Position(0, 0)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    (everything,) = [a for a in actions if a.kind == "source.cdit.generate.all"]
    edit = everything.edit
    assert edit is not None and not edit.change_annotations
    # Without gate-check answers: a standalone module at the workspace root.
    created = [c for c in edit.document_changes if isinstance(c, types.CreateFile)]
    assert created[0].uri == (tmp_path / "transformer_flux_cdit.py").as_uri()
    apply_workspace_edit(edit)
    compile((tmp_path / "transformer_flux_cdit.py").read_text(), "generated", "exec")
