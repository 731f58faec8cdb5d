"""Glossary links: every anchor the server links to exists in docs/glossary.md, a hover on a real
diffusers transformer links its ForwardPattern (each term once), and diagnostic codes link to the
term their message uses."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from lsp_server.features import glossary
from tests.conftest import diffusers_file
from tests.lsp_fixtures import (
    REPO,
    diagnostics_for,
    line_of,
    open_file,
    server_config,
    start_session,
)

GLOSSARY = Path(__file__).resolve().parents[1] / "docs" / "glossary.md"
FLUX = diffusers_file("models/transformers/transformer_flux.py")
TEXT = FLUX.read_text(encoding="utf-8")
LINK = re.compile(r"\]\((command:cdit\.openGlossary\?[^ )]+)")


def github_slug(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def glossary_anchors() -> set[str]:
    text = GLOSSARY.read_text(encoding="utf-8")
    explicit = set(re.findall(r'<a id="([^"]+)"></a>', text))
    headings = {github_slug(h) for h in re.findall(r"^#{1,6} +(.+)$", text, re.MULTILINE)}
    return explicit | headings


def anchor_of(uri: str) -> str:
    assert uri.startswith(f"command:{glossary.OPEN_COMMAND}?")
    (anchor,) = json.loads(unquote(uri.split("?", 1)[1]))
    return anchor


def test_every_linked_anchor_is_in_the_glossary() -> None:
    anchors = glossary_anchors()
    missing = {term: a for term, (_, a, _) in glossary.TERMS.items() if a not in anchors}
    assert not missing, f"anchors missing from docs/glossary.md: {missing}"
    assert set(glossary.CODE_TERMS.values()) <= set(glossary.TERMS)
    # Explicit anchors are unique (a duplicate id would make a link ambiguous).
    ids = re.findall(r'<a id="([^"]+)"></a>', GLOSSARY.read_text(encoding="utf-8"))
    assert len(ids) == len(set(ids))


def test_links_are_command_uris_with_json_arguments() -> None:
    uri = glossary.command_uri("forward-pattern")
    assert uri == "command:cdit.openGlossary?%5B%22forwardpattern%22%5D"
    assert anchor_of(uri) == "forwardpattern"
    terms = glossary.Terms()
    terms.use("uaa", "cp", "uaa", "not-a-term")
    footer = terms.footer()
    assert footer.count("](command:") == 2 and footer.index("UAA") < footer.index("[CP]")
    assert glossary.Terms().footer() == ""
    assert glossary.code_href("CDIT212") == glossary.command_uri("uaa")
    assert glossary.code_href("CDIT401") is None


pytestmark_lsp = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(config=server_config(), scope="module")
async def client(lsp_client: LanguageClient):
    await start_session(lsp_client, REPO, settings={"debounceMs": 0})
    open_file(lsp_client, FLUX, TEXT)
    await diagnostics_for(lsp_client, FLUX.as_uri(), 1)
    yield
    await lsp_client.shutdown_session()


async def _hover(client: LanguageClient, line: int, column: int) -> str:
    result = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=FLUX.as_uri()),
            position=types.Position(line, column),
        )
    )
    assert result is not None and isinstance(result.contents, types.MarkupContent)
    return result.contents.value


@pytestmark_lsp
async def test_a_hover_links_its_forward_pattern_once(client: LanguageClient) -> None:
    text = await _hover(client, line_of(TEXT, "self.transformer_blocks = nn.ModuleList"), 8)
    assert "`ForwardPattern.Pattern_1`" in text
    anchors = [anchor_of(uri) for uri in LINK.findall(text)]
    assert "forwardpattern" in anchors
    assert len(anchors) == len(set(anchors)), "a term is linked more than once"
    # The transformer class: several sections' worth of terms, still each once.
    text = await _hover(client, line_of(TEXT, "class FluxTransformer2DModel("), 6)
    anchors = [anchor_of(uri) for uri in LINK.findall(text)]
    assert {"forwardpattern", "patchfunctor", "cp", "tp"} <= set(anchors)
    assert len(anchors) == len(set(anchors))
    assert set(anchors) <= glossary_anchors()


@pytestmark_lsp
async def test_diagnostic_codes_link_to_their_term(client: LanguageClient) -> None:
    diagnostics = await diagnostics_for(client, FLUX.as_uri(), 1)
    linked = {
        str(d.code): anchor_of(d.code_description.href)
        for d in diagnostics
        if d.code_description is not None
    }
    assert linked, "no diagnostic links to the glossary"
    for code, anchor in linked.items():
        assert anchor == glossary.TERMS[glossary.CODE_TERMS[code]][1]
    assert all(
        d.code_description is None for d in diagnostics if str(d.code) not in glossary.CODE_TERMS
    )
