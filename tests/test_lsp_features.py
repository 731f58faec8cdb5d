"""Hover, code lens and code actions from a real server process over stdio."""

from __future__ import annotations

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.conftest import diffusers_file
from tests.lsp_fixtures import (
    REPO,
    diagnostics_for,
    line_of,
    open_file,
    server_config,
    start_session,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

FLUX = diffusers_file("models/transformers/transformer_flux.py")
TEXT = FLUX.read_text(encoding="utf-8")


@pytest_lsp.fixture(config=server_config(), scope="module")
async def client(lsp_client: LanguageClient):
    await start_session(lsp_client, REPO, settings={"debounceMs": 0})
    open_file(lsp_client, FLUX, TEXT)
    await diagnostics_for(lsp_client, FLUX.as_uri(), 1)
    yield
    await lsp_client.shutdown_session()


async def hover_at(client: LanguageClient, line: int, column: int = 8) -> str | None:
    result = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=FLUX.as_uri()),
            position=types.Position(line, column),
        )
    )
    if result is None:
        return None
    assert isinstance(result.contents, types.MarkupContent)
    assert result.contents.kind == types.MarkupKind.Markdown
    assert result.range is not None and result.range.start.line == line
    return result.contents.value


async def test_hover_on_the_block_list_attribute(client: LanguageClient):
    text = await hover_at(client, line_of(TEXT, "self.transformer_blocks = nn.ModuleList"))
    assert text is not None
    assert "`ForwardPattern.Pattern_1`" in text and "confidence 0.95" in text
    assert "FluxTransformerBlock" in text
    # Evidence lines are links into the file.
    decl = line_of(TEXT, "self.transformer_blocks = nn.ModuleList") + 1
    assert f"{FLUX.as_uri()}#L{decl}" in text
    assert "returns (encoder_hidden_states, hidden_states)" in text


async def test_hover_on_the_loop_lists_its_patch_functor_reasons(client: LanguageClient):
    start = line_of(TEXT, "class FluxTransformer2DModel")
    loop = line_of(TEXT, "for index_block, block in enumerate(self.transformer_blocks)", start)
    text = await hover_at(client, loop)
    assert text is not None
    assert "Loop over `self.transformer_blocks`" in text
    assert "PatchFunctor reasons" in text and "controlnet_block_samples" in text


async def test_hover_on_block_and_attention_classes(client: LanguageClient):
    block = await hover_at(client, line_of(TEXT, "class FluxTransformerBlock("), 6)
    assert block is not None and "block of `transformer_blocks`" in block
    assert "Tensor-parallel plan" in block and "`transformer_blocks.*.attn.to_q` | colwise" in block
    attention = await hover_at(client, line_of(TEXT, "class FluxAttention("), 6)
    assert attention is not None
    assert "Attention at `transformer_blocks.*.attn`" in attention
    assert "heads: 24" in attention


async def test_hover_on_the_transformer_class_and_elsewhere(client: LanguageClient):
    text = await hover_at(client, line_of(TEXT, "class FluxTransformer2DModel("), 6)
    assert text is not None
    assert "| `single_transformer_blocks` | FluxSingleTransformerBlock | 38 | Pattern_1 |" in text
    assert "Context parallel: **root_split**" in text
    assert await hover_at(client, 0, 0) is None


async def test_code_lenses_are_cheap_then_resolved(client: LanguageClient):
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=FLUX.as_uri()))
    )
    assert lenses is not None and len(lenses) == 3
    class_line = line_of(TEXT, "class FluxTransformer2DModel(")
    assert all(lens.range.start.line == class_line for lens in lenses)
    assert all(lens.command is None for lens in lenses)  # details come with resolve
    resolved = [await client.code_lens_resolve_async(lens) for lens in lenses]
    titles = [lens.command.title for lens in resolved if lens.command]
    assert titles[0] == (
        "ForwardPattern: transformer_blocks=Pattern_1, single_transformer_blocks=Pattern_1"
        " · PatchFunctor needed"
    )
    assert titles[1].startswith("Generate integration")
    assert titles[2].startswith("Run verification")
    commands = [lens.command.command for lens in resolved if lens.command]
    assert commands == ["cdit.lsp.analyzeFile", "cdit.lsp.generate", "cdit.lsp.runVerification"]
    assert list(resolved[0].command.arguments) == [
        {"uri": FLUX.as_uri(), "className": "FluxTransformer2DModel"}
    ]


async def test_analyze_command_returns_the_cli_json(client: LanguageClient):
    report = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="cdit.lsp.analyzeFile", arguments=[{"uri": FLUX.as_uri()}]
        )
    )
    assert report["schemaVersion"] == 1
    (t,) = report["transformers"]
    assert t["className"] == "FluxTransformer2DModel"
    assert [b["forwardPattern"] for b in t["blockLists"]] == ["Pattern_1", "Pattern_1"]
    with_class = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="cdit.lsp.analyzeFile",
            arguments=[{"uri": FLUX.as_uri(), "className": "NoSuchClass"}],
        )
    )
    assert with_class["error"]["code"] == "unknown-class"
