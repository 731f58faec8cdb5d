"""The server runs no workspace code and serves sockets only to the token holder (docs/security.md).

* `python -m lsp_server` started in a folder with a `pygls.py` (the working directory of a client
  that starts it in the workspace) does not import it, nor the other planted modules, and still
  analyzes; the same started as the extension starts it (`PYTHONSAFEPATH=1`, a neutral working
  directory, the workspace given in `initialize` only).
* Workspace folders are visible to the source lookup, never to the import system.
* `cdit-integrate serve --tcp` binds to loopback only, needs the token (printed once or kept in a
  0600 file), refuses every connection without it, and trusts only a client that declares trust.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "e2e" / "workspace" / "models" / "demo_mmdit.py"
PLANTED = ("pygls", "lsprotocol", "sitecustomize", "cattrs", "attrs", "pathlib", "__future__")


# -- a raw JSON-RPC client ---------------------------------------------------------------------


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Reader:
    """Reads Content-Length framed messages from `stream` on a thread; None marks the end."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._run, args=(stream,), daemon=True).start()

    def _run(self, stream: IO[bytes]) -> None:
        try:
            while True:
                length = None
                while True:
                    line = stream.readline()
                    if not line:
                        return
                    if line in (b"\r\n", b"\n"):
                        break
                    name, _, value = line.decode("ascii").partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                if length is None:
                    return
                self.messages.put(json.loads(stream.read(length)))
        except (OSError, ValueError):
            return
        finally:
            self.messages.put(None)

    def next(self, timeout: float = 30.0) -> dict[str, Any] | None:
        return self.messages.get(timeout=timeout)

    def reply_to(self, request_id: int, timeout: float = 60.0) -> dict[str, Any]:
        """The response to `request_id` (answering the server's own requests with null)."""
        deadline = time.monotonic() + timeout
        while True:
            message = self.next(max(0.1, deadline - time.monotonic()))
            assert message is not None, f"the connection closed before the reply to {request_id}"
            if message.get("id") == request_id and "method" not in message:
                return message

    def closed(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.next(max(0.1, deadline - time.monotonic())) is None:
                    return True
            except queue.Empty:
                return False
        return False


def initialize(request_id: int, options: dict[str, Any], root: Path | None = None):
    params: dict[str, Any] = {
        "processId": None,
        "capabilities": {},
        "initializationOptions": options,
        "rootUri": root.as_uri() if root else None,
    }
    if root:
        params["workspaceFolders"] = [{"uri": root.as_uri(), "name": root.name}]
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


def run_verification(request_id: int) -> dict[str, Any]:
    """`cdit.lsp.runVerification` as an attacker would send it: import a module of its choice."""
    request = {"integration": {"kind": "standalone", "path": "/tmp/evil.py"}}
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "workspace/executeCommand",
        "params": {"command": "cdit.lsp.runVerification", "arguments": [{"request": request}]},
    }


# -- planted modules ---------------------------------------------------------------------------


def plant(folder: Path, names: tuple[str, ...] = PLANTED) -> Path:
    """Modules in `folder` that leave `<folder>/IMPORTED-<name>` when imported; the marker dir."""
    for name in names:
        marker = folder / f"IMPORTED-{name}"
        (folder / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'w').close()\nraise SystemExit('planted {name} imported')\n",
            encoding="utf-8",
        )
    return folder


def markers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("IMPORTED-*"))


def stdio_server(cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "lsp_server"],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")}
    env.update(extra)
    return env


def analyze_over_stdio(proc: subprocess.Popen[bytes], workspace: Path) -> list[dict[str, Any]]:
    """initialize (untrusted, as the extension says it), open the transformer, its diagnostics."""
    assert proc.stdin is not None and proc.stdout is not None
    reader = Reader(proc.stdout)
    proc.stdin.write(frame(initialize(1, {"workspaceTrusted": False}, workspace)))
    proc.stdin.flush()
    reply = reader.reply_to(1)
    assert "result" in reply, reply
    proc.stdin.write(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
    file = workspace / "models" / "demo_mmdit.py"
    proc.stdin.write(
        frame(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didOpen",
                "params": {
                    "textDocument": {
                        "uri": file.as_uri(),
                        "languageId": "python",
                        "version": 1,
                        "text": file.read_text(encoding="utf-8"),
                    }
                },
            }
        )
    )
    proc.stdin.flush()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        message = reader.next(max(0.1, deadline - time.monotonic()))
        assert message is not None, "the server exited"
        if (
            message.get("method") == "textDocument/publishDiagnostics"
            and message["params"]["uri"] == file.as_uri()
            and message["params"]["diagnostics"]
        ):
            diagnostics: list[dict[str, Any]] = message["params"]["diagnostics"]
            proc.stdin.write(frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
            proc.stdin.write(frame({"jsonrpc": "2.0", "method": "exit"}))
            proc.stdin.flush()
            proc.wait(timeout=30)
            return diagnostics
    raise AssertionError("no diagnostics for the transformer file")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "models").mkdir(parents=True)
    shutil.copy(DEMO, ws / "models" / "demo_mmdit.py")
    return plant(ws)


def test_server_started_in_the_workspace_imports_nothing_from_it(workspace: Path) -> None:
    """A client that starts `python -m lsp_server` with the workspace as working directory, even
    without safe-path mode (Python 3.10 has none): the planted modules stay unimported."""
    proc = stdio_server(workspace, clean_env())
    try:
        diagnostics = analyze_over_stdio(proc, workspace)
    finally:
        proc.kill()
        proc.wait()
    assert diagnostics, "the server analyzed nothing"
    assert markers(workspace) == []


def test_server_started_as_the_extension_starts_it(workspace: Path, tmp_path: Path) -> None:
    """PYTHONSAFEPATH=1 and a neutral working directory (extension/src/common/interpreter.ts
    `pythonLaunch`); the workspace reaches the server through `initialize` only."""
    neutral = tmp_path / "neutral"
    neutral.mkdir()
    proc = stdio_server(neutral, clean_env(PYTHONSAFEPATH="1", PYTHONUNBUFFERED="1"))
    try:
        diagnostics = analyze_over_stdio(proc, workspace)
    finally:
        proc.kill()
        proc.wait()
    assert any("CDIT" in str(d.get("code")) for d in diagnostics), diagnostics
    assert markers(workspace) == []


def test_import_check_in_a_neutral_directory_ignores_the_workspace(workspace: Path) -> None:
    """The extension's import check (`python -c`) with the extension's safe-path environment, run
    in the workspace as the worst case: `-c` puts '' first on sys.path unless safe-path mode."""
    if sys.version_info < (3, 11):
        pytest.skip("PYTHONSAFEPATH needs Python 3.11+ (the extension also uses a neutral cwd)")
    done = subprocess.run(
        [sys.executable, "-c", "import pygls, lsprotocol; print('ok')"],
        cwd=workspace,
        env=clean_env(PYTHONSAFEPATH="1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert markers(workspace) == []


def test_source_roots_are_found_by_source_never_imported(tmp_path: Path) -> None:
    """Workspace folders take part in the source lookup and in generated module names (as when
    the server ran in the workspace), but nothing is imported from them."""
    code = f"""
import sys
from pathlib import Path
from lsp_server.isolation import add_source_roots
from lsp_server.analysis.sources import module_path
from lsp_server.codegen.source_files import module_name_for
import importlib
root = Path({str(tmp_path)!r})
assert add_source_roots([root]) == [str(root)]
assert add_source_roots([root]) == []
importlib.invalidate_caches()
found = module_path("cditwspkg.blocks", 0, root / "models" / "x.py")
assert found == root / "cditwspkg" / "blocks.py", found
assert module_name_for(str(root / "models" / "demo.py")) == "models.demo"
for name in ("cditwspkg", "cditwspkg.blocks", "cditwsmod"):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        pass
    else:
        raise AssertionError(name + " was imported")
print("ok")
"""
    (tmp_path / "cditwspkg").mkdir()
    plant(tmp_path / "cditwspkg", ("__init__", "blocks"))
    plant(tmp_path, ("cditwsmod",))
    (tmp_path / "models").mkdir()
    neutral = tmp_path / "neutral"
    neutral.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=neutral,
        env=clean_env(PYTHONSAFEPATH="1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
    assert markers(tmp_path) == [] and markers(tmp_path / "cditwspkg") == []


# -- serve --tcp -------------------------------------------------------------------------------


def serve_cli(*args: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "lsp_server.cli", "serve", *args],
        cwd=cwd,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def started(proc: subprocess.Popen[str]) -> tuple[int, list[str]]:
    """(port, the stderr lines up to the token line) of a `serve --tcp --port 0`."""
    assert proc.stderr is not None
    lines: list[str] = []
    port = None
    while len(lines) < 2:
        line = proc.stderr.readline()
        assert line, f"serve exited: {lines}"
        lines.append(line.rstrip("\n"))
        match = re.search(r"listening on tcp://127\.0\.0\.1:(\d+)", line)
        if match:
            port = int(match.group(1))
    assert port is not None, lines
    return port, lines


class Connection:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.reader = Reader(self.sock.makefile("rb"))

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(frame(message))

    def close(self) -> None:
        # the reader's file object keeps the socket open: shut the connection down first
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


@pytest.fixture
def tcp_server() -> Iterator[tuple[subprocess.Popen[str], int, str]]:
    proc = serve_cli("--tcp", "--port", "0")
    try:
        port, lines = started(proc)
        token = lines[-1].rsplit(" ", 1)[-1]
        assert "token" in lines[-1] and len(token) >= 32, lines
        yield proc, port, token
    finally:
        proc.kill()
        proc.wait()


def refused(port: int, first: dict[str, Any]) -> dict[str, Any]:
    conn = Connection(port)
    try:
        conn.send(first)
        reply = conn.reader.next()
        assert reply is not None, "closed without an error reply"
        assert conn.reader.closed(), "the connection stayed open"
        return reply
    finally:
        conn.close()


def test_tcp_refuses_clients_without_the_right_token(
    tcp_server: tuple[subprocess.Popen[str], int, str],
) -> None:
    proc, port, token = tcp_server
    no_token = refused(port, initialize(1, {"workspaceTrusted": True}))
    assert no_token["id"] == 1 and no_token["error"]["code"] == -32001
    assert "token" in no_token["error"]["message"]
    wrong = refused(port, initialize(2, {"token": token[:-1] + "x", "workspaceTrusted": True}))
    assert wrong["id"] == 2 and wrong["error"]["code"] == -32001
    # a request other than initialize first: refused before it reaches the server
    direct = refused(port, run_verification(3))
    assert direct["id"] == 3 and direct["error"]["code"] == -32001
    assert proc.poll() is None, "a refused client stopped the server"

    # the right token opens the session; the client said nothing about trust: untrusted
    conn = Connection(port)
    try:
        conn.send(initialize(4, {"token": token}))
        reply = conn.reader.reply_to(4)
        assert "capabilities" in reply.get("result", {}), reply
        conn.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        # a second client while the session is open: refused, even with the token
        second = refused(port, initialize(5, {"token": token}))
        assert "another client" in second["error"]["message"]
        conn.send(run_verification(6))
        answer = conn.reader.reply_to(6)
        assert answer["result"]["error"]["code"] == "untrusted", answer
        conn.send({"jsonrpc": "2.0", "id": 7, "method": "shutdown"})
        conn.reader.reply_to(7)
        conn.send({"jsonrpc": "2.0", "method": "exit"})
        assert proc.wait(timeout=30) == 0
    finally:
        conn.close()


def test_tcp_client_that_declares_trust_is_trusted(
    tcp_server: tuple[subprocess.Popen[str], int, str],
) -> None:
    proc, port, token = tcp_server
    conn = Connection(port)
    try:
        conn.send(initialize(1, {"token": token, "workspaceTrusted": True}))
        conn.reader.reply_to(1)
        conn.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        # no request at all: past the trust check, refused for what it lacks (nothing runs)
        conn.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "workspace/executeCommand",
                "params": {"command": "cdit.lsp.runVerification", "arguments": [{}]},
            }
        )
        answer = conn.reader.reply_to(2)
        assert answer["result"]["error"]["code"] == "no-request", answer
    finally:
        conn.close()
    # the session's end ends the server
    assert proc.wait(timeout=30) in (0, 1)


def test_token_file_is_created_private_and_read_back(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    proc = serve_cli("--tcp", "--port", "0", "--token-file", str(token_file))
    try:
        port, lines = started(proc)
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text(encoding="ascii").strip()
        assert token not in "\n".join(lines), "a token kept in a file is not printed"
        assert refused(port, initialize(1, {"token": "x" * len(token)}))["error"]["code"] == -32001
        conn = Connection(port)
        conn.send(initialize(2, {"token": token}))
        assert "result" in conn.reader.reply_to(2)
        conn.close()
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    # the same file next time: read, not replaced
    proc = serve_cli("--tcp", "--port", "0", "--token-file", str(token_file))
    try:
        port, _ = started(proc)
        assert token_file.read_text(encoding="ascii").strip() == token
        conn = Connection(port)
        conn.send(initialize(1, {"token": token}))
        assert "result" in conn.reader.reply_to(1)
        conn.close()
    finally:
        proc.kill()
        proc.wait()


def run_serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "serve", *args],
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--tcp", "--host", "0.0.0.0"), "not a loopback address"),
        (("--tcp", "--host", "::"), "not a loopback address"),
        (("--ws", "--host", "192.0.2.7"), "not a loopback address"),
        (("--tcp", "--host", ""), "loopback"),
        (("--tcp", "--port", "70000"), "from 0 to 65535"),
        (("--tcp", "--port", "-1"), "from 0 to 65535"),
    ],
)
def test_bad_serve_options_are_one_line_exit_2(args: tuple[str, ...], expected: str) -> None:
    done = run_serve(*args)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr


def test_loose_or_bad_token_files_are_refused(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.write_text("a" * 40 + "\n")
    loose.chmod(0o644)
    short = tmp_path / "short"
    short.write_text("abc\n")
    short.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(short)
    for path, expected in (
        (loose, "chmod 600"),
        (short, "printable ASCII"),
        (link, "symbolic link"),
        (tmp_path, "not a regular file"),
        (tmp_path / "missing" / "token", "cannot create it"),
    ):
        done = run_serve("--tcp", "--port", "0", "--token-file", str(path))
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and expected in lines[0], (path, done)


def test_transport_options_need_a_transport() -> None:
    done = run_serve("--host", "127.0.0.1")
    assert done.returncode == 2 and "need --tcp or --ws" in done.stderr


def test_python_m_lsp_server_tcp_is_guarded_too() -> None:
    """`python -m lsp_server --tcp` (pygls' own CLI before) goes through the same checks."""
    done = subprocess.run(
        [sys.executable, "-m", "lsp_server", "--tcp", "--host", "0.0.0.0"],
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "not a loopback address" in done.stderr


class FakeWebSocket:
    """What `RemoteServer._ws_client` uses of a websockets connection."""

    def __init__(self, first: bytes) -> None:
        self.first = first
        self.sent: list[str] = []
        self.closed_with: int | None = None

    async def recv(self, decode: bool = True) -> bytes:
        return self.first

    async def send(self, data: str) -> None:
        self.sent.append(data)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed_with = code


@pytest.mark.parametrize(
    ("first", "answered"),
    [
        (json.dumps(initialize(1, {"workspaceTrusted": True})).encode(), True),
        (json.dumps(initialize(2, {"token": "not-the-token-at-all"})).encode(), True),
        (json.dumps(run_verification(3)).encode(), True),
        (b"\xff not json", False),
        (b"[" * 100_000, False),
    ],
)
def test_websocket_connections_without_the_token_are_refused(first: bytes, answered: bool) -> None:
    """The --ws gate (the websockets package is optional, so this drives it with a stand-in)."""
    import asyncio

    from lsp_server.remote import RemoteServer
    from lsp_server.server import create_server

    ls = create_server()
    try:
        remote = RemoteServer(ls, "the-right-token-0123456789")
        socket_ = FakeWebSocket(first)
        asyncio.run(remote._ws_client(socket_))
    finally:
        ls.close()
    assert socket_.closed_with == 1008
    assert ls.protocol.writer is None, "a refused client reached the language server"
    if answered:
        (reply,) = (json.loads(s) for s in socket_.sent)
        assert reply["error"]["code"] == -32001 and reply["id"] == json.loads(first)["id"]
    else:
        assert socket_.sent == []


def test_ws_without_websockets_is_one_line_exit_2() -> None:
    from lsp_server.remote import websockets_available

    if websockets_available():
        pytest.skip("websockets is installed")
    done = run_serve("--ws", "--port", "0")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "websockets" in lines[0], done.stderr
