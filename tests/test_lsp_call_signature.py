"""The server's `cdit.lsp.analyzeFile` with a pipeline file carries the pipeline's `__call__`
signature (`pipeline.callSignature`): what the gate check's "Pipeline call arguments" read."""

from __future__ import annotations

import json

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.conftest import diffusers_file
from tests.lsp_fixtures import REPO, server_config, start_session

pytestmark = pytest.mark.asyncio(loop_scope="module")

E2E = REPO / "e2e" / "workspace"
SANA_VIDEO = diffusers_file("models/transformers/transformer_sana_video.py")
SANA_VIDEO_PIPELINE = diffusers_file("pipelines/sana_video/pipeline_sana_video.py")


@pytest_lsp.fixture(config=server_config(), scope="module")
async def client(lsp_client: LanguageClient):
    await start_session(lsp_client, REPO, settings={"debounceMs": 0})
    yield
    await lsp_client.shutdown_session()


async def analyze(client: LanguageClient, **args) -> dict:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cdit.lsp.analyzeFile", arguments=[args])
    )


async def test_analyze_file_with_a_pipeline_returns_its_call_signature(
    client: LanguageClient, tmp_path
):
    index = tmp_path / "model_index.json"
    index.write_text(json.dumps({"_class_name": "SanaVideoPipeline"}))
    report = await analyze(
        client,
        uri=SANA_VIDEO.as_uri(),
        pipelinePath=str(SANA_VIDEO_PIPELINE),
        modelIndexPath=str(index),
    )
    assert "error" not in report, report
    sig = report["pipeline"]["callSignature"]
    assert sig["className"] == "SanaVideoPipeline"
    frames = next(p for p in sig["parameters"] if p["name"] == "frames")
    assert (frames["role"], frames["default"]) == ("frames", 81)
    assert [c["avoid"] for c in sig["checks"] if c["avoid"]] == [{"use_resolution_binning": False}]


async def test_analyze_file_without_a_pipeline_has_none(client: LanguageClient):
    report = await analyze(client, uri=(E2E / "models" / "demo_mmdit.py").as_uri())
    assert report["pipeline"] is None
