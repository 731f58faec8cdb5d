"""The server's pure parts: position conversions, minimal edits, run events, the process tree,
and what importing the server loads (never torch)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from lsp_server.features.edits import DocumentChange, text_edits, workspace_edit
from lsp_server.features.positions import LineIndex, line_link, path_for, split_lines, uri_for
from lsp_server.features.process_tree import alive, descendants
from lsp_server.features.runs import is_result, progress_message
from tests.lsp_fixtures import apply_text_edits

UTF16 = PositionCodec(types.PositionEncodingKind.Utf16)
UTF8 = PositionCodec(types.PositionEncodingKind.Utf8)


def test_lines_are_counted_like_lsp_not_like_splitlines():
    text = "a = 1\x0c\nb = 2\u2028 # still line 2\r\nc = 3\rd = 4"
    lines = LineIndex(text, UTF16)
    assert len(lines) == 4
    assert lines.line_text(2) == "b = 2\u2028 # still line 2"
    assert lines.line_range(4) == types.Range(types.Position(3, 0), types.Position(3, 5))


def test_line_ranges_skip_indentation_and_use_client_units():
    text = "class A:\n    s = '😋'  # x\n"
    utf16 = LineIndex(text, UTF16).line_range(2)
    utf8 = LineIndex(text, UTF8).line_range(2)
    assert utf16.start == types.Position(1, 4) and utf8.start == types.Position(1, 4)
    assert utf16.end.character == 4 + len("s = '😋'  # x") + 1  # the emoji is 2 UTF-16 units
    assert utf8.end.character == 4 + len("s = '😋'  # x") + 3  # and 4 UTF-8 bytes
    # Past the end (an analysis of an older text) is clamped to the last line.
    assert LineIndex(text, UTF16).line_range(99).start.line == 2


def test_uris_round_trip(tmp_path):
    path = tmp_path / "a b" / "model.py"
    uri = uri_for(str(path))
    assert uri.startswith("file:///") and path_for(uri) == path
    assert path_for("untitled:Untitled-1") is None
    assert line_link(str(path), 12).endswith("#L12")


def test_minimal_edits_round_trip():
    rng = random.Random(0)
    words = ["x = 1", "def f():", "    return 2", "", "# ü 😋", "y = f()"]
    for ending in ("\n", "\r\n"):
        for _ in range(200):
            old = ending.join(rng.choice(words) for _ in range(rng.randint(0, 8)))
            new = ending.join(rng.choice(words) for _ in range(rng.randint(0, 8)))
            if rng.random() < 0.5:
                old += ending
            if rng.random() < 0.5:
                new += ending
            edits = text_edits(old, new, UTF16)
            assert apply_text_edits(old, edits) == new, (old, new)
    assert text_edits("same\n", "same\n", UTF16) == []
    assert split_lines("a\r\nb\rc\nd") == ["a\r\n", "b\r", "c\n", "d"]


def test_workspace_edit_creates_new_files_with_annotations(tmp_path):
    changes = [
        DocumentChange(str(tmp_path / "new.py"), None, "x = 1\n"),
        DocumentChange(str(tmp_path / "old.py"), "a\nb\n", "a\nc\n", version=3),
    ]
    edit = workspace_edit(changes, UTF16, annotations=True)
    create, insert, change = edit.document_changes
    assert isinstance(create, types.CreateFile) and create.options.ignore_if_exists
    assert insert.edits[0].new_text == "x = 1\n"
    assert change.text_document.version == 3
    assert [(e.range.start.line, e.new_text) for e in change.edits] == [(1, "c\n")]
    assert edit.change_annotations["cdit-generate"].needs_confirmation
    simple = workspace_edit(changes[1:], UTF16, document_changes=False)
    assert list(simple.changes) == [uri_for(str(tmp_path / "old.py"))]


def test_progress_events_become_progress_messages():
    step = {"event": "step", "phase": "cache", "step": 3, "total": 4}
    assert progress_message(step) == ("cache step 3/4", 75)
    finished = {"event": "phase_finished", "phase": "ulysses-2", "message": "PSNR 41 dB"}
    assert progress_message(finished) == ("ulysses-2 phase_finished: PSNR 41 dB", None)
    assert not is_result(step)
    assert is_result({"schemaVersion": 1, "status": "completed", "phases": []})


def test_descendants_follow_the_tree():
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(30)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert child in descendants(parent.pid)
        assert alive(child)
    finally:
        for pid in (child, parent.pid):
            subprocess.run(["kill", "-9", str(pid)], check=False)
        parent.wait()


def test_the_server_never_imports_torch_and_imports_do_no_work():
    script = (
        "import sys, json\n"
        "import lsp_server.server as s\n"
        "from lsp_server.features import code_actions, code_lens, commands, hover\n"
        "s.create_server()\n"
        "from lsp_server.features.analyzer import analyze_snapshot\n"
        "from lsp_server.features.documents import Snapshot\n"
        "from lsp_server.features.settings import Settings\n"
        "from tests.conftest import diffusers_file\n"
        "p = diffusers_file('models/transformers/transformer_flux.py')\n"
        "snap = Snapshot(p.as_uri(), 1, p.read_text(), p)\n"
        "from pygls.workspace.position_codec import PositionCodec\n"
        "entry = analyze_snapshot(snap, 0, Settings(), PositionCodec())\n"
        "assert entry.diagnostics and entry.report\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    modules = {m.split(".")[0] for m in json.loads(out.stdout.strip().splitlines()[-1])}
    assert not modules & {"torch", "diffusers", "transformers", "cache_dit"}
    quiet = subprocess.run(
        [sys.executable, "-c", "import lsp_server.server, lsp_server.__main__"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""


def test_analysis_cache_never_publishes_an_older_version():
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from lsp_server.features.documents import AnalysisCache, DocumentAnalysis, Snapshot

    docs = {"u": 1}
    release = threading.Event()
    analyzed: list[int] = []
    published: list[int] = []

    def snapshot(uri: str) -> Snapshot | None:
        return Snapshot(uri, docs[uri], f"text {docs[uri]}", None) if uri in docs else None

    def analyze(snap: Snapshot, generation: int) -> DocumentAnalysis:
        if snap.version == 1:
            release.wait(5)  # version 1 is still being analyzed when version 2 arrives
        analyzed.append(snap.version)
        return DocumentAnalysis(snap.uri, snap.version, generation, None, None, None)

    async def scenario() -> None:
        with ThreadPoolExecutor(1) as worker:
            cache = AnalysisCache(snapshot, analyze, lambda e: published.append(e.version), worker)
            cache.schedule("u", 0)
            await asyncio.sleep(0.05)
            docs["u"] = 2
            cache.schedule("u", 0.01)
            await asyncio.sleep(0.05)
            release.set()
            entry = await cache.current("u")
            assert entry is not None and entry.version == 2
            assert cache.get("u", 1) is None
            # A request while edits are still debounced waits for that run.
            docs["u"] = 3
            cache.schedule("u", 0.05)
            entry = await cache.current("u")
            assert entry is not None and entry.version == 3

    asyncio.run(scenario())
    assert analyzed == [1, 2, 3]
    assert published == [2, 3]


def test_cli_serve_speaks_lsp_on_stdio():
    def frame(message: dict) -> bytes:
        body = json.dumps(message).encode()
        return f"Content-Length: {len(body)}\r\n\r\n".encode() + body

    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}},
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "shutdown"},
        {"jsonrpc": "2.0", "method": "exit"},
    ]
    done = subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "serve"],
        input=b"".join(frame(m) for m in messages),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b'"name": "cdit-integrator"' in done.stdout
