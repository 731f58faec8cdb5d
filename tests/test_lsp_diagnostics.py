"""Diagnostics from a real server process over stdio: diffusers' Flux / Wan / QwenImage sources,
malformed and half-typed files, stale versions, huge and non-UTF-8 input."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.conftest import FIXTURES, diffusers_file
from tests.lsp_fixtures import (
    REPO,
    change_file,
    diagnostics_for,
    line_of,
    open_file,
    published_for,
    server_config,
    start_session,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

FLUX = diffusers_file("models/transformers/transformer_flux.py")
WAN = diffusers_file("models/transformers/transformer_wan.py")
QWEN = diffusers_file("models/transformers/transformer_qwenimage.py")


@pytest_lsp.fixture(config=server_config(), scope="module")
async def client(lsp_client: LanguageClient):
    # The workspace is this repository: the diffusers sources are files outside it.
    lsp_client.cdit_init = await start_session(lsp_client, REPO, settings={"debounceMs": 0})
    yield
    await lsp_client.shutdown_session()


def by_code(diagnostics: list[types.Diagnostic], code: str) -> list[types.Diagnostic]:
    return [d for d in diagnostics if d.code == code]


async def test_initialize_advertises_the_features(client: LanguageClient):
    result: types.InitializeResult = client.cdit_init
    caps = result.capabilities
    assert result.server_info and result.server_info.name == "cdit-integrator"
    assert caps.hover_provider
    assert caps.code_lens_provider and caps.code_lens_provider.resolve_provider
    assert caps.code_action_provider
    assert caps.execute_command_provider is not None
    assert set(caps.execute_command_provider.commands) >= {
        "cdit.lsp.analyzeFile",
        "cdit.lsp.buildPlan",
        "cdit.lsp.generate",
        "cdit.lsp.runVerification",
        "cdit.lsp.cancelRun",
    }
    sync = caps.text_document_sync
    assert isinstance(sync, types.TextDocumentSyncOptions)
    assert sync.change == types.TextDocumentSyncKind.Full


async def test_flux_patch_functor_lines_with_reasons_and_evidence(client: LanguageClient):
    text = FLUX.read_text(encoding="utf-8")
    uri = open_file(client, FLUX, text)
    diagnostics = await diagnostics_for(client, uri, 1)
    forward = line_of(text, "class FluxTransformer2DModel")
    controlnet = line_of(text, "if controlnet_block_samples is not None:", forward + 150)
    single = line_of(text, "if controlnet_single_block_samples is not None:", controlnet + 1)
    patch = by_code(diagnostics, "CDIT101")
    assert {d.range.start.line for d in patch} == {controlnet, single}
    for d in patch:
        assert d.source == "cdit"
        assert d.severity == types.DiagnosticSeverity.Warning
        assert "PatchFunctor needed (when `controlnet" in d.message
        assert "Fix: generate the PatchFunctor skeleton" in d.message
        # The evidence: the block list's declaration and the loop that runs it.
        related = {(r.location.uri, r.location.range.start.line) for r in d.related_information}
        decl = line_of(text, "self.transformer_blocks = nn.ModuleList")
        single_decl = line_of(text, "self.single_transformer_blocks = nn.ModuleList")
        assert (uri, decl) in related or (uri, single_decl) in related
    # The range covers the statement's text, not the indentation.
    line_text = text.splitlines()[controlnet]
    first = next(d for d in patch if d.range.start.line == controlnet)
    assert first.range.start.character == len(line_text) - len(line_text.lstrip())
    assert first.range.end.character == len(line_text.rstrip())
    # Registry notes (line 1 in the report) sit on the transformer class.
    notes = by_code(diagnostics, "CDIT201")
    assert notes and {d.range.start.line for d in notes} == {forward}
    # Context-parallel advice: UAA for prompt-dependent lengths, inputs that must be passed.
    assert by_code(diagnostics, "CDIT212") and by_code(diagnostics, "CDIT216")
    for d in by_code(diagnostics, "CDIT212"):
        assert d.related_information, "CP warnings link to the plan's evidence"


async def test_wan_and_qwenimage_diagnostics(client: LanguageClient):
    wan_text = WAN.read_text(encoding="utf-8")
    wan = open_file(client, WAN, wan_text)
    qwen_text = QWEN.read_text(encoding="utf-8")
    qwen = open_file(client, QWEN, qwen_text)
    wan_diags = await diagnostics_for(client, wan, 1)
    qwen_diags = await diagnostics_for(client, qwen, 1)
    # Wan: CP splits at a block (cache x CP caveat), QK-norm across heads under TP.
    assert by_code(wan_diags, "CDIT214")
    assert by_code(wan_diags, "CDIT305")
    assert not by_code(wan_diags, "CDIT101")
    # QwenImage: a PatchFunctor reason, a mask-building processor under CP, the diffusers plan.
    (patch,) = by_code(qwen_diags, "CDIT101")
    assert "Fix:" in patch.message
    assert by_code(qwen_diags, "CDIT219")
    assert by_code(qwen_diags, "CDIT218")
    for d in wan_diags + qwen_diags:
        assert d.code and d.source == "cdit" and d.message
        assert d.severity in (
            types.DiagnosticSeverity.Error,
            types.DiagnosticSeverity.Warning,
            types.DiagnosticSeverity.Information,
        )


async def test_malformed_file_publishes_nothing_and_the_server_keeps_serving(
    client: LanguageClient, tmp_path
):
    broken = tmp_path / "broken.py"
    broken.write_text("class A(:\n    def forward(self\n", encoding="utf-8")
    uri = open_file(client, broken)
    assert await diagnostics_for(client, uri, 1) == []
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(0, 6)
        )
    )
    assert hover is None


async def test_half_typed_transformer_pauses_then_recovers(client: LanguageClient, tmp_path):
    source = (FIXTURES / "models" / "demo_mmdit.py").read_text(encoding="utf-8")
    path = tmp_path / "demo_mmdit.py"
    path.write_text(source, encoding="utf-8")
    uri = open_file(client, path, source)
    good = await diagnostics_for(client, uri, 1)
    loop = line_of(source, "for block in self.transformer_blocks")
    half = source.replace(source.splitlines()[loop], source.splitlines()[loop] + " (", 1)
    change_file(client, uri, half, 2)
    (paused,) = await diagnostics_for(client, uri, 2)
    assert paused.code == "CDIT900"
    assert paused.severity == types.DiagnosticSeverity.Information
    assert paused.range.start.line in (loop, loop + 1)
    assert f"paused: line {paused.range.start.line + 1}: syntax error: " in paused.message
    change_file(client, uri, source, 3)
    assert await diagnostics_for(client, uri, 3) == good


async def test_results_for_an_older_version_are_never_published(client: LanguageClient, tmp_path):
    # The first analysis of Wan's text takes long enough for two edits to arrive meanwhile.
    text = WAN.read_text(encoding="utf-8")
    path = tmp_path / "transformer_wan.py"
    path.write_text(text, encoding="utf-8")
    uri = open_file(client, path, text)
    change_file(client, uri, "# edit\n" + text, 2)
    shifted = "# edit\n# another\n" + text
    change_file(client, uri, shifted, 3)
    final = await diagnostics_for(client, uri, 3)
    versions = [p.version for p in published_for(client, uri)]
    assert versions == sorted(versions) and versions[-1] == 3
    # Lines follow the latest text (two lines inserted at the top).
    (cache_cp,) = by_code(final, "CDIT214")
    assert shifted.splitlines()[cache_cp.range.start.line].lstrip().startswith("for ")


async def test_huge_file_is_skipped_quickly(client: LanguageClient, tmp_path):
    huge = tmp_path / "huge.py"
    text = "x = 1\n" * 400_000  # 2.4 MB, above the default cdit.maxFileKb
    uri = open_file(client, huge, text)
    assert await diagnostics_for(client, uri, 1, timeout=10) == []


async def test_lone_surrogates_and_non_utf8_files(client: LanguageClient, tmp_path):
    source = (FIXTURES / "models" / "demo_mmdit.py").read_text(encoding="utf-8")
    odd = tmp_path / "odd_mmdit.py"
    odd.write_text(source, encoding="utf-8")
    # A client that forwarded undecodable bytes as lone surrogates.
    uri = open_file(client, odd, "# caf\udce9\n" + source)
    assert isinstance(await diagnostics_for(client, uri, 1), list)
    latin = tmp_path / "latin.py"
    latin.write_bytes("# caf\xe9\nx = 1\n".encode("latin-1"))
    report = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(
            command="cdit.lsp.analyzeFile", arguments=[{"uri": latin.as_uri()}]
        )
    )
    assert report["error"]["code"] == "not-utf8"


async def test_closing_a_file_clears_its_diagnostics(client: LanguageClient, tmp_path):
    source = (FIXTURES / "models" / "demo_mmdit.py").read_text(encoding="utf-8")
    path = tmp_path / "closing.py"
    path.write_text(source, encoding="utf-8")
    uri = open_file(client, path, source)
    await diagnostics_for(client, uri, 1)
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    for _ in range(20):
        if not published_for(client, uri)[-1].diagnostics:
            break
        await asyncio.wait_for(
            client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 5
        )
    assert not published_for(client, uri)[-1].diagnostics
