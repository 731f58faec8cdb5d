"""A raw JSON-RPC client for the language server over stdio: it sends exactly the bytes a test
writes (so a test can misframe messages) and every wait has a deadline, so a server that hangs or
never answers fails the test instead of blocking it."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Message = dict[str, Any]


def frame(message: Message | bytes, length: int | None = None) -> bytes:
    """`message` with its `Content-Length` header (`length` overrides the true byte count)."""
    body = message if isinstance(message, bytes) else json.dumps(message).encode("utf-8")
    size = len(body) if length is None else length
    return f"Content-Length: {size}\r\n\r\n".encode() + body


class RawServer:
    """`python -m lsp_server` in a subprocess; a reader thread collects what it sends."""

    def __init__(self, cwd: Path, args: tuple[str, ...] = ()) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by `close`)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lsp_server", *args],
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self.received: list[Message] = []
        self._cond = threading.Condition()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # -- reading --

    def _read(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.decode("ascii").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if length is None:
                continue
            body = stream.read(length)
            with self._cond:
                self.received.append(json.loads(body))
                self._cond.notify_all()

    def wait_for(
        self, predicate: Callable[[Message], bool], timeout: float, what: str = "a message"
    ) -> Message:
        """The first message so far (or to come within `timeout` s) that satisfies `predicate`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for message in self.received:
                    if predicate(message):
                        return message
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no {what} within {timeout} s; stderr:\n{self.stderr()}")
                self._cond.wait(remaining)

    def response(self, msg_id: int | str | None, timeout: float = 20.0) -> Message:
        return self.wait_for(
            lambda m: "method" not in m and m.get("id") == msg_id, timeout, f"response {msg_id!r}"
        )

    def notifications(self, method: str) -> list[Message]:
        with self._cond:
            return [m for m in self.received if m.get("method") == method and "id" not in m]

    def diagnostics(self, uri: str, version: int | None = None) -> list[Message]:
        """Every publishDiagnostics for `uri` (at `version`, when given) so far."""
        return [
            m["params"]
            for m in self.notifications("textDocument/publishDiagnostics")
            if m["params"]["uri"] == uri
            and (version is None or m["params"].get("version") == version)
        ]

    def wait_diagnostics(self, uri: str, version: int, timeout: float = 30.0) -> Message:
        return self.wait_for(
            lambda m: (
                m.get("method") == "textDocument/publishDiagnostics"
                and m["params"]["uri"] == uri
                and m["params"].get("version") == version
            ),
            timeout,
            f"diagnostics for {uri} v{version}",
        )["params"]

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    # -- writing --

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def notify(self, method: str, params: Any = None) -> None:
        message: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.write(frame(message))

    def send_request(self, method: str, params: Any = None) -> int:
        self._next_id += 1
        message: Message = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.write(frame(message))
        return self._next_id

    def request(self, method: str, params: Any = None, timeout: float = 20.0) -> Message:
        """Send a request and wait for its response (the whole response message)."""
        return self.response(self.send_request(method, params), timeout)

    # -- session --

    def initialize(self, root: Path, settings: dict[str, Any] | None = None) -> Message:
        params = {
            "processId": None,
            "rootUri": root.as_uri(),
            "capabilities": {},
            "initializationOptions": {"settings": settings or {}},
        }
        result = self.request("initialize", params)
        self.notify("initialized", {})
        return result

    def open(self, path: Path, text: str, version: int = 1) -> str:
        uri = path.as_uri()
        item = {"uri": uri, "languageId": "python", "version": version, "text": text}
        self.notify("textDocument/didOpen", {"textDocument": item})
        return uri

    def change(self, uri: str, text: str, version: int) -> None:
        self.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]},
        )

    def hover(self, uri: str, line: int, character: int, timeout: float = 20.0) -> Message:
        params = {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}
        return self.request("textDocument/hover", params, timeout)

    def close(self, timeout: float = 10.0) -> int | None:
        """shutdown + exit, then kill if it does not end; returns the exit code."""
        try:
            if self.proc.poll() is None:
                msg_id = self.send_request("shutdown")
                with contextlib.suppress(TimeoutError):
                    self.response(msg_id, timeout)
                self.notify("exit")
                self.proc.stdin.close()  # type: ignore[union-attr]
            return self.proc.wait(timeout)
        except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
            self.proc.kill()
            self.proc.wait(timeout)
            return None
        finally:
            self._stderr.close()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.close()
