"""Settings: typed parsing with fallbacks, the `workspace/configuration` round trip, settings that
change the analysis, and workspace trust (no run, no write when the client says untrusted)."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from lsp_server.features.generation import default_answers
from lsp_server.features.settings import TARGETS, Settings, Thresholds, parse_settings
from tests.conftest import diffusers_file
from tests.lsp_fixtures import REPO, diagnostics_for, open_file, server_config, start_session

FLUX = diffusers_file("models/transformers/transformer_flux.py")


# -- parsing (pure) --


def test_defaults_and_valid_values():
    assert parse_settings(None).settings == Settings()
    parsed = parse_settings(
        {
            "interpreter": "/opt/py/bin/python",
            "cpSizes": [4, 2, 2],
            "tpSizes": [8],
            "target": "cache-dit-checkout",
            "cacheDitPath": "/src/cache-dit",
            "debounceMs": 100,
            "thresholds": {"parallelPsnrDb": 40, "ssimMin": 0.95},
            "unknownKey": 1,
        }
    )
    assert parsed.problems == ()
    s = parsed.settings
    assert s.cp_sizes == (2, 4) and s.tp_sizes == (8,)
    assert s.target == "cache-dit-checkout" and s.debounce_ms == 100
    assert s.thresholds == Thresholds(parallel_psnr_db=40.0, ssim_min=0.95)
    assert s.thresholds.to_json() == {"parallelPsnrDb": 40.0, "ssimMin": 0.95}


def test_the_target_setting_uses_the_plans_names():
    """`cdit.target` names the plan's target kinds; the earlier "checkout" is still read (a
    user's saved settings) as "cache-dit-checkout", and never comes back out."""
    codegen = pytest.importorskip("lsp_server.codegen.plan_model")
    assert TARGETS == codegen.TARGET_KINDS
    parsed = parse_settings({"target": "checkout", "cacheDitPath": "/src/cache-dit"})
    assert parsed.problems == () and parsed.settings.target == "cache-dit-checkout"
    answers = default_answers(parsed.settings, None, Path("/w/model.py"), "Model")
    assert answers["target"] == {"kind": "cache-dit-checkout", "root": "/src/cache-dit"}


def test_invalid_values_keep_the_previous_ones_with_a_message():
    base = parse_settings({"cpSizes": [2, 4]}).settings
    parsed = parse_settings(
        {
            "cpSizes": [1, "x"],
            "target": "cloud",
            "debounceMs": -5,
            "workspaceTrusted": "yes",
            "thresholds": {"ssimMin": 3, "cachePsnrDb": 20, "cacheWarnPsnrDb": 28},
        },
        base,
    )
    s = parsed.settings
    assert s.cp_sizes == (2, 4) and s.target == "standalone" and s.debounce_ms == 250
    assert s.workspace_trusted is True
    assert s.thresholds == Thresholds()
    text = "\n".join(parsed.problems)
    for key in ("cdit.cpSizes", "cdit.target", "cdit.debounceMs", "cdit.workspaceTrusted"):
        assert key in text
    assert "ssimMin must be a number from 0 to 1" in text
    assert "cacheWarnPsnrDb is above cachePsnrDb" in text
    assert parse_settings([1, 2]).problems == ("cdit settings must be an object, got list",)


def test_prefixed_keys_are_accepted():
    assert parse_settings({"cdit.tpSizes": [2]}).settings.tp_sizes == (2,)


# -- over the protocol --


@pytest_lsp.fixture(config=server_config())
async def untrusted(lsp_client: LanguageClient):
    settings = {"debounceMs": 0, "cpSizes": "all of them"}
    await start_session(lsp_client, REPO, settings=settings, trusted=False)
    yield
    await lsp_client.shutdown_session()


@pytest.mark.asyncio
async def test_untrusted_workspace_refuses_runs_and_writes(untrusted: LanguageClient, tmp_path):
    client = untrusted
    uri = open_file(client, FLUX)
    assert await diagnostics_for(client, uri, 1)  # analysis itself runs: it executes nothing
    # The invalid setting was reported once, in words.
    messages = [m.message for m in client.messages if m.type == types.MessageType.Warning]
    assert any("cdit.cpSizes" in m for m in messages)
    for command, argument in (
        ("cdit.lsp.runVerification", {"request": {"model": {"source": "tiny"}}}),
        ("cdit.lsp.generate", {"uri": uri}),
    ):
        result = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=command, arguments=[argument])
        )
        assert result["error"]["code"] == "untrusted"
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    titles = [(await client.code_lens_resolve_async(lens)).command.title for lens in lenses]
    assert titles[1].endswith("(disabled: untrusted workspace)")
    assert titles[2].endswith("(disabled: untrusted workspace)")
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(0, 0), types.Position(0, 0)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    assert actions and all(a.disabled and "not trusted" in a.disabled.reason for a in actions)
    assert all(a.edit is None for a in actions)
    # A workspace setting cannot trust the workspace the client distrusts.
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"cdit": {"workspaceTrusted": True}})
    )
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cdit.lsp.generate", arguments=[{"uri": uri}])
    )
    assert result["error"]["code"] == "untrusted"


@pytest_lsp.fixture(config=server_config())
async def configurable(lsp_client: LanguageClient):
    await start_session(lsp_client, REPO, settings={"debounceMs": 0})
    yield
    await lsp_client.shutdown_session()


@pytest.mark.asyncio
async def test_changed_sizes_reanalyze_open_files(configurable: LanguageClient):
    client = configurable
    uri = open_file(client, FLUX)
    before = {d.code for d in await diagnostics_for(client, uri, 1)}
    assert "CDIT301" not in before  # 24 heads divide by 2, 4 and 8
    count = len(client.cdit_published)
    client.set_configuration({"cdit": {"debounceMs": 0, "cpSizes": [5], "tpSizes": [5]}})
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    for _ in range(100):
        if len(client.cdit_published) > count:
            break
        await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    after = {d.code for d in client.cdit_published[-1].diagnostics}
    assert {"CDIT211", "CDIT301"} <= after


def test_threshold_settings_are_the_contracts_and_package_jsons():
    """One set of threshold names: the server's settings, the `cdit.thresholds` properties of
    package.json and the runtime contract's fields (camelCase) agree, so no setting a user writes
    is dropped on the way (the server once read four of the seven)."""
    import dataclasses
    import json
    from pathlib import Path

    from cdit_runtime.contract.codec import camel
    from cdit_runtime.contract.request import Thresholds as ContractThresholds

    root = Path(__file__).resolve().parents[1]
    package = json.loads((root / "package.json").read_text())
    props = package["contributes"]["configuration"]["properties"]["cdit.thresholds"]["properties"]
    names = [f.name for f in dataclasses.fields(Thresholds)]
    assert set(props) == {camel(n) for n in names}
    contract = {camel(f.name) for f in dataclasses.fields(ContractThresholds)}
    assert {camel(n) for n in names} <= contract
    every = {camel(n): 0.5 for n in names}
    parsed = parse_settings({"thresholds": every})
    assert parsed.problems == () and parsed.settings.thresholds.to_json() == every
