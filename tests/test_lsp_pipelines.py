"""Pipeline files (has_separate_cfg on the denoising loop) and the gate check's sources feeding
the transformer's diagnostics."""

from __future__ import annotations

import json

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.conftest import diffusers_file
from tests.lsp_fixtures import diagnostics_for, line_of, open_file, server_config, start_session

pytestmark = pytest.mark.asyncio(loop_scope="module")

WAN = diffusers_file("models/transformers/transformer_wan.py")
WAN_PIPELINE = diffusers_file("pipelines/wan/pipeline_wan.py")


@pytest_lsp.fixture(config=server_config(), scope="module")
async def client(lsp_client: LanguageClient, tmp_path_factory):
    root = tmp_path_factory.mktemp("workspace")
    (root / ".cdit").mkdir()
    gate_check = {
        "model": {
            "transformerClass": "WanTransformer3DModel",
            "sources": {"transformer": str(WAN), "pipeline": str(WAN_PIPELINE)},
        },
        "target": {"kind": "standalone", "path": str(root / "wan_cdit.py")},
    }
    (root / ".cdit" / "integration.json").write_text(json.dumps(gate_check), encoding="utf-8")
    await start_session(lsp_client, root, settings={"debounceMs": 0})
    yield
    await lsp_client.shutdown_session()


async def test_pipeline_denoising_loop_says_has_separate_cfg(client: LanguageClient):
    text = WAN_PIPELINE.read_text(encoding="utf-8")
    uri = open_file(client, WAN_PIPELINE, text)
    (diagnostic,) = await diagnostics_for(client, uri, 1)
    assert diagnostic.code == "CDIT901"
    assert diagnostic.severity == types.DiagnosticSeverity.Information
    assert diagnostic.message.startswith("has_separate_cfg=True")
    assert "Fix: pass has_separate_cfg=True to the BlockAdapter" in diagnostic.message
    loop = diagnostic.range.start.line
    assert text.splitlines()[loop].lstrip().startswith("for ")
    assert len(diagnostic.related_information) >= 2  # the two calls and why the second runs
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(loop, 8)
        )
    )
    assert hover is not None and "has_separate_cfg=True" in hover.contents.value
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert [lens.command.title for lens in lenses] == ["has_separate_cfg: True"]


async def test_gate_check_pipeline_reaches_the_transformer_analysis(client: LanguageClient):
    text = WAN.read_text(encoding="utf-8")
    uri = open_file(client, WAN, text)
    await diagnostics_for(client, uri, 1)
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line_of(text, "class WanTransformer3DModel("), 6),
        )
    )
    assert hover is not None and "has_separate_cfg: **True**" in hover.contents.value
