"""The language server under a client that breaks the rules: versions that go backwards or repeat,
parameters that do not deserialize, misframed messages. Raw JSON-RPC over stdio to a real server
process; every wait has a deadline, so a server that hangs or never answers fails the test."""

from __future__ import annotations

import asyncio
import io
import json
import random
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lsp_server.features.documents import AnalysisCache, DocumentAnalysis, Snapshot
from lsp_server.features.jsonrpc import ResyncingAsyncReader, ResyncingReader
from tests.conftest import diffusers_file
from tests.lsp_fixtures import REPO, line_of
from tests.lsp_fixtures.raw import RawServer, frame

FLUX = diffusers_file("models/transformers/transformer_flux.py")
TEXT = FLUX.read_text(encoding="utf-8")
BLOCKS = line_of(TEXT, "self.transformer_blocks = nn.ModuleList")
# The same file with the block list renamed: every line stays where it was.
RENAMED = TEXT.replace("transformer_blocks", "zzz_blocks")


@pytest.fixture
def server() -> Iterator[RawServer]:
    with RawServer(REPO) as s:
        s.initialize(REPO, {"debounceMs": 0})
        yield s


def hover_text(server: RawServer, uri: str, line: int = BLOCKS, timeout: float = 20.0) -> str:
    response = server.hover(uri, line, 8, timeout)
    assert "error" not in response, response
    result = response["result"]
    assert result is not None, "hover answered null"
    return result["contents"]["value"]


def test_a_lower_version_is_the_new_text_and_one_hover_runs_one_analysis(server: RawServer):
    uri = server.open(FLUX, TEXT, version=5)
    server.wait_diagnostics(uri, 5)
    server.change(uri, RENAMED, version=3)
    started = time.monotonic()
    text = hover_text(server, uri)
    # Before: every request re-ran the analysis until its 10 s deadline and answered null.
    assert time.monotonic() - started < 8
    assert "`self.zzz_blocks`" in text
    hover_text(server, uri)
    assert len(server.diagnostics(uri, 3)) == 1  # one analysis of version 3, then served cached


def test_the_same_version_with_new_text_is_not_served_the_old_analysis(server: RawServer):
    uri = server.open(FLUX, TEXT, version=1)
    server.wait_diagnostics(uri, 1)
    assert "`self.transformer_blocks`" in hover_text(server, uri)
    server.change(uri, RENAMED, version=1)
    assert "`self.zzz_blocks`" in hover_text(server, uri)
    server.change(uri, TEXT, version=1)
    assert "`self.transformer_blocks`" in hover_text(server, uri)


def test_rapid_edits_with_shuffled_versions_end_on_the_last_text(server: RawServer):
    rng = random.Random(7)
    uri = server.open(FLUX, TEXT, version=1)
    pending = []
    text = TEXT
    for i in range(120):
        text = rng.choice([TEXT, RENAMED, TEXT[: rng.randrange(len(TEXT))]])
        server.change(uri, text, version=rng.choice([1, 2, 3, i, -i]))
        if i % 10 == 0:
            pending.append(
                server.send_request("textDocument/codeLens", {"textDocument": {"uri": uri}})
            )
    server.change(uri, TEXT, version=1000)
    server.wait_diagnostics(uri, 1000, timeout=30)
    server.change(uri, RENAMED, version=500)  # and the last one goes back
    for msg_id in pending:
        assert "error" not in server.response(msg_id, 30)
    assert "`self.zzz_blocks`" in hover_text(server, uri, timeout=30)
    assert server.wait_diagnostics(uri, 500)["diagnostics"]


BAD_REQUESTS: list[tuple[object, str, object]] = [
    (1001, "textDocument/hover", {"textDocument": 5, "position": {"line": 0, "character": 0}}),
    (1002, "textDocument/hover", {"textDocument": {"uri": "file:///x.py"}}),
    (1003, "textDocument/hover", None),
    (1004, "textDocument/codeLens", []),
    (1005, "textDocument/codeAction", {"textDocument": {"uri": "file:///x.py"}, "range": 7}),
    (1006, "workspace/executeCommand", {"command": 12}),
    ("seven", "codeLens/resolve", {"range": "everything"}),
    (True, "textDocument/hover", {"textDocument": 5}),  # an id that is not an id: answered to null
]


def test_requests_whose_params_do_not_deserialize_get_an_error(server: RawServer):
    uri = server.open(FLUX, TEXT)
    for msg_id, method, params in BAD_REQUESTS:
        message: dict[str, object] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            message["params"] = params
        server.write(frame(message))
    for msg_id, method, _ in BAD_REQUESTS:
        expected = None if isinstance(msg_id, bool) else msg_id
        response = server.response(expected, timeout=10)  # before: never answered
        assert response["error"]["code"] == -32602, (method, response)
    # Broken notifications have no one to answer; the server carries on.
    server.notify("textDocument/didChange", {"textDocument": 3, "contentChanges": "x"})
    server.notify("textDocument/didOpen", 7)
    assert "`self.transformer_blocks`" in hover_text(server, uri)


def request_bytes(msg_id: int, uri: str) -> bytes:
    params = {"textDocument": {"uri": uri}, "position": {"line": BLOCKS, "character": 8}}
    return json.dumps(
        {"jsonrpc": "2.0", "id": msg_id, "method": "textDocument/hover", "params": params}
    ).encode()


def test_a_too_short_content_length_loses_only_that_message(server: RawServer):
    uri = server.open(FLUX, TEXT)
    server.wait_diagnostics(uri, 1)
    short = request_bytes(100, uri)
    server.write(frame(short, length=len(short) - 7) + frame(request_bytes(101, uri)))
    # Before: the rest of message 100 swallowed the header of 101 and of every later message.
    assert server.response(101, timeout=10)["result"] is not None
    assert "`self.transformer_blocks`" in hover_text(server, uri)
    with pytest.raises(TimeoutError):
        server.response(100, timeout=0.5)  # its id is in the part that was cut off


def test_a_too_long_content_length_costs_the_next_message_too(server: RawServer):
    # pygls reads exactly Content-Length bytes: they run into the next message, which is lost as
    # well (it cannot be told from a slow client); the one after it is read again.
    uri = server.open(FLUX, TEXT)
    server.wait_diagnostics(uri, 1)
    long = request_bytes(200, uri)
    server.write(frame(long, length=len(long) + 30) + frame(request_bytes(201, uri)))
    server.write(frame(request_bytes(202, uri)))
    assert server.response(202, timeout=10)["result"] is not None


def test_junk_between_messages_and_invalid_json_are_skipped(server: RawServer):
    uri = server.open(FLUX, TEXT)
    server.write(b"garbage\r\n\r\n")
    server.write(frame(b'{"jsonrpc": "2.0", "id": 300, "method": '))  # not JSON
    server.write(b"\x00\xff no header at all" + frame(request_bytes(301, uri)))
    assert server.response(301, timeout=10)["result"] is not None


def test_percent_encoded_uris_are_analyzed(server: RawServer, tmp_path: Path):
    # Clients percent-encode URIs (`with%20space`); pygls keys open documents by the decoded one.
    folder = tmp_path / "with space"
    folder.mkdir()
    shutil.copy(FLUX, folder / "flux.py")
    uri = server.open(folder / "flux.py", TEXT)
    assert "%20" in uri
    assert server.wait_diagnostics(uri, 1, timeout=20)["diagnostics"]  # before: never analyzed
    assert "`self.transformer_blocks`" in hover_text(server, uri)


def test_the_cache_runs_one_analysis_per_document_state_whatever_the_versions():
    """The cache alone, deterministic: versions going down or repeating with new text."""
    docs: dict[str, tuple[int, str]] = {}
    analyzed: list[tuple[int, str]] = []
    published: list[int] = []

    def snapshot(uri: str) -> Snapshot | None:
        if uri not in docs:
            return None
        version, text = docs[uri]
        return Snapshot(uri, version, text, None)

    def analyze(snap: Snapshot, generation: int) -> DocumentAnalysis:
        analyzed.append((snap.version, snap.text))
        report = {"transformers": [], "text": snap.text}
        return DocumentAnalysis(snap.uri, snap.version, generation, None, report, None)

    async def scenario() -> None:
        with ThreadPoolExecutor(1) as worker:
            cache = AnalysisCache(snapshot, analyze, lambda e: published.append(e.version), worker)
            for version, text in [(5, "a"), (3, "b"), (3, "c"), (3, "b"), (9, "b")]:
                docs["u"] = (version, text)
                cache.schedule("u", 0)
                for _ in range(3):  # several requests for one state: one analysis between them
                    entry = await asyncio.wait_for(cache.current("u"), 5)
                    assert entry is not None and entry.report is not None
                    assert (entry.version, entry.report["text"]) == (version, text)
                assert cache.get("u", version) is entry
            assert cache.get("u", 3) is None  # the document is at version 9 now
            cache.invalidate("u")  # a file it imports was saved
            assert await cache.current("u") is not entry

    asyncio.run(scenario())
    assert analyzed == [(5, "a"), (3, "b"), (3, "c"), (3, "b"), (9, "b"), (9, "b")]
    assert published == [5, 3, 3, 3, 9, 9]


def test_the_readers_split_a_header_that_does_not_start_its_line():
    rest_of_short_body = b'"id": 3, "method": "shutdown"}'
    data = rest_of_short_body + frame(b'{"a": 1}') + b"\x00junk" + frame(b"[]")
    expected = [rest_of_short_body, b"Content-Length: 8\r\n", b"\r\n", b'{"a": 1}']
    expected += [b"\x00junk", b"Content-Length: 2\r\n", b"\r\n", b"[]", b""]

    reader = ResyncingReader(io.BytesIO(data))
    got = [reader.readline(), reader.readline(), reader.readline(), reader.read(8)]
    got += [reader.readline(), reader.readline(), reader.readline(), reader.read(2)]
    assert [*got, reader.readline()] == expected

    async def read_async() -> list[bytes]:
        stream = asyncio.StreamReader()
        stream.feed_data(data)
        stream.feed_eof()
        reader = ResyncingAsyncReader(stream)
        got = [await reader.readline() for _ in range(3)] + [await reader.readexactly(8)]
        got += [await reader.readline() for _ in range(3)] + [await reader.readexactly(2)]
        return [*got, await reader.readline()]

    assert asyncio.run(read_async()) == expected
