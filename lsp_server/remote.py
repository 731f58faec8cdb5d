"""`--tcp` / `--ws`: the language server on a loopback socket, for one client with the token.

Over stdio only the process that started the server can talk to it. A socket is open to every
local process, so here:

* the server binds to loopback addresses only (a non-loopback `--host` is refused);
* it needs a token: generated with `secrets` and printed once to stderr, or read from
  `--token-file` (created with mode 0600 when missing; refused when others may read it);
* the first message of a connection must be `initialize` with `initializationOptions.token`;
  anything else is answered with error -32001 and the connection is closed, before the message
  reaches the language server;
* one client at a time: the server exits when the authenticated connection ends;
* the workspace is untrusted unless `initialize` declares `"workspaceTrusted": true`
  (`server.main` sets that default).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import socket
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pygls.io_ import WebSocketWriter, run_async, run_websocket
from pygls.server import JsonRPCServer

from .features.jsonrpc import ResyncingAsyncReader

log = logging.getLogger(__name__)

Transport = Literal["tcp", "ws"]
UNAUTHORIZED = -32001
PARSE_ERROR = -32700
TOKEN_BYTES = 32
MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 512
# The first message (initialize) must arrive within this time and stay under this size.
AUTH_TIMEOUT_S = 30.0
MAX_FIRST_MESSAGE = 1 << 20
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")


class StartupError(Exception):
    """A bad --host / --port / --token-file: one line for the user, exit 2."""


@dataclass(frozen=True)
class Token:
    value: str
    # where it came from, for the start-up line (never the token itself when it is in a file)
    source: str
    created: bool = False


# -- start-up checks ---------------------------------------------------------------------------


def check_host(host: str) -> None:
    """Raise `StartupError` unless every address `host` names is a loopback address."""
    if not host or host != host.strip():
        raise StartupError(f"--host {host!r}: give a loopback address such as 127.0.0.1")
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise StartupError(f"--host {host!r}: cannot be resolved ({exc})") from None
    addresses = {str(info[4][0]) for info in infos}
    for address in sorted(addresses):
        try:
            loopback = ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise StartupError(
                f"--host {host!r} resolves to {address}, which is not a loopback address: "
                "the server listens on this machine only (use an SSH tunnel to reach it)"
            )


def check_port(port: int) -> None:
    if not 0 <= port <= 65535:
        raise StartupError(f"--port {port}: give a port from 0 to 65535 (0: any free port)")


def load_token(token_file: str | None) -> Token:
    """The token: from `token_file` (created, mode 0600, when missing) or freshly generated."""
    if token_file is None:
        return Token(secrets.token_urlsafe(TOKEN_BYTES), "generated")
    path = Path(token_file)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return _create_token_file(path)
    except (OSError, ValueError) as exc:
        raise StartupError(f"--token-file {token_file}: {_reason(exc)}") from None
    if stat.S_ISLNK(st.st_mode):
        raise StartupError(f"--token-file {token_file}: is a symbolic link; give the file itself")
    if not stat.S_ISREG(st.st_mode):
        raise StartupError(f"--token-file {token_file}: not a regular file")
    if os.name == "posix":
        if st.st_uid != os.getuid():
            raise StartupError(f"--token-file {token_file}: owned by another user")
        if st.st_mode & 0o077:
            raise StartupError(
                f"--token-file {token_file}: other users may read it "
                f"(mode {stat.S_IMODE(st.st_mode):o}); run chmod 600 on it"
            )
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_TOKEN_CHARS + 2)
    except OSError as exc:
        raise StartupError(f"--token-file {token_file}: {_reason(exc)}") from None
    try:
        value = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        value = ""
    if not (MIN_TOKEN_CHARS <= len(value) <= MAX_TOKEN_CHARS and _TOKEN_CHARS.fullmatch(value)):
        raise StartupError(
            f"--token-file {token_file}: expected one token of {MIN_TOKEN_CHARS} to "
            f"{MAX_TOKEN_CHARS} printable ASCII characters without spaces"
        )
    return Token(value, f"read from {token_file}")


def _create_token_file(path: Path) -> Token:
    value = secrets.token_urlsafe(TOKEN_BYTES)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except (OSError, ValueError) as exc:
        raise StartupError(f"--token-file {path}: cannot create it ({_reason(exc)})") from None
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(value + "\n")
    return Token(value, f"written to {path} (mode 600)", created=True)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc)


# -- the gate ----------------------------------------------------------------------------------


def refusal(message: Any, token: str) -> str | None:
    """Why `message` (the first of a connection) may not open a session; None when it may."""
    if not isinstance(message, dict):
        return "the first message must be an initialize request"
    if message.get("method") != "initialize" or "id" not in message:
        return "the first message must be an initialize request"
    params = message.get("params")
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    given = options.get("token") if isinstance(options, dict) else None
    if not isinstance(given, str) or not given:
        return "initialize must carry the server's token in initializationOptions.token"
    if not hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8")):
        return "wrong token"
    return None


def error_reply(message: Any, code: int, text: str) -> dict[str, Any]:
    request_id = message.get("id") if isinstance(message, dict) else None
    if not isinstance(request_id, (int, str)) or isinstance(request_id, bool):
        request_id = None
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}


def _frame(data: dict[str, Any]) -> bytes:
    body = json.dumps(data).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def _read_first_tcp_message(reader: asyncio.StreamReader) -> bytes | None:
    """The body of the first Content-Length framed message; None when the stream is bad."""
    length: int | None = None
    for _ in range(32):  # header lines
        line = await reader.readline()
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                return None
    else:
        return None
    if length is None or not 0 < length <= MAX_FIRST_MESSAGE:
        return None
    return await reader.readexactly(length)


# -- serving -----------------------------------------------------------------------------------


class RemoteServer:
    """Serves `ls` on TCP or WebSocket to one client that presents `token`."""

    def __init__(
        self, ls: JsonRPCServer, token: str, *, announce: Callable[[str], None] | None = None
    ) -> None:
        self.ls = ls
        self.token = token
        self.announce = announce or (lambda line: print(line, file=sys.stderr, flush=True))
        self._session_open = False
        self._done: asyncio.Event | None = None
        self._stop = threading.Event()

    def _check(self, body: bytes | str | None) -> tuple[Any, str | None]:
        """(the parsed first message, why it is refused or None)."""
        if body is None:
            return None, "the first message must be an initialize request"
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return None, "the first message is not JSON"
        why = refusal(message, self.token)
        if why is None and self._session_open:
            why = "another client is connected"
        return message, why

    def _accept(self, body: bytes | str) -> None:
        """Hand the authenticated first message to the language server."""
        self._session_open = True
        protocol = self.ls.protocol
        protocol.handle_message(json.loads(body, object_hook=protocol.structure_message))

    def _finish(self) -> None:
        self._stop.set()
        if self._done is not None:
            self._done.set()

    # -- TCP --

    async def _tcp_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            body = await asyncio.wait_for(_read_first_tcp_message(reader), AUTH_TIMEOUT_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError, ConnectionError):
            body = None
        message, why = self._check(body)
        if why is not None or body is None:
            log.warning("refused a connection: %s", why)
            with contextlib.suppress(ConnectionError, OSError):
                if isinstance(message, dict) and "id" in message:
                    writer.write(_frame(error_reply(message, UNAUTHORIZED, f"cdit: {why}")))
                    await writer.drain()
                writer.close()
                await writer.wait_closed()
            return
        self.ls.protocol.set_writer(writer)  # type: ignore[arg-type]
        self._accept(body)
        try:
            await run_async(
                stop_event=self._stop,
                # re-finds the headers after a misframed message, as over stdio
                reader=ResyncingAsyncReader(reader),
                protocol=self.ls.protocol,
                logger=log,
                error_handler=self.ls.report_server_error,
            )
        finally:
            self._finish()

    async def serve_tcp(self, host: str, port: int) -> None:
        self._done = asyncio.Event()
        try:
            server = await asyncio.start_server(self._tcp_client, host, port)
        except OSError as exc:
            raise StartupError(f"cannot listen on {host}:{port}: {_reason(exc)}") from None
        async with server:
            self.announce(f"listening on {_addresses(server.sockets, 'tcp')}")
            await self._done.wait()

    # -- WebSocket --

    async def _ws_client(self, websocket: Any) -> None:
        try:
            data = await asyncio.wait_for(websocket.recv(decode=False), AUTH_TIMEOUT_S)
        except Exception:  # closed, timed out or not a message
            data = None
        if data is not None and len(data) > MAX_FIRST_MESSAGE:
            data = None
        message, why = self._check(data)
        if why is not None or data is None:
            log.warning("refused a connection: %s", why)
            with contextlib.suppress(Exception):
                if isinstance(message, dict) and "id" in message:
                    reply = error_reply(message, UNAUTHORIZED, f"cdit: {why}")
                    await websocket.send(json.dumps(reply))
                await websocket.close(code=1008, reason="unauthorized")
            return
        self.ls.protocol.set_writer(WebSocketWriter(websocket), include_headers=False)
        self._accept(data)
        try:
            await run_websocket(
                websocket=websocket,
                stop_event=self._stop,
                protocol=self.ls.protocol,
                logger=log,
                error_handler=self.ls.report_server_error,
            )
        finally:
            self._finish()

    async def serve_ws(self, host: str, port: int) -> None:
        from websockets.asyncio.server import serve

        self._done = asyncio.Event()
        try:
            server = await serve(self._ws_client, host, port, max_size=16 * 1024 * 1024)
        except OSError as exc:
            raise StartupError(f"cannot listen on {host}:{port}: {_reason(exc)}") from None
        async with server:
            self.announce(f"listening on {_addresses(server.sockets, 'ws')}")
            await self._done.wait()


def _addresses(sockets: Any, scheme: str) -> str:
    out = []
    for sock in sockets or ():
        host, port = sock.getsockname()[:2]
        out.append(f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}")
    return ", ".join(out)


def websockets_available() -> bool:
    try:
        import websockets.asyncio.server  # noqa: F401
    except ImportError:
        return False
    return True


def serve(
    ls: JsonRPCServer,
    transport: Transport,
    host: str,
    port: int,
    token_file: str | None,
    *,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Check the options, get the token, listen, serve one client. Raises `StartupError`."""
    check_port(port)
    check_host(host)
    if transport == "ws" and not websockets_available():
        raise StartupError("--ws needs the websockets package: pip install 'pygls[ws]'")
    token = load_token(token_file)
    say = announce or (lambda line: print(f"cdit-integrate: {line}", file=sys.stderr, flush=True))

    def started(line: str) -> None:
        say(line)
        if token.source == "generated":
            say(f"token (send it as initializationOptions.token): {token.value}")
        else:
            say(f"token {token.source}; send it as initializationOptions.token")

    remote = RemoteServer(ls, token.value, announce=started)
    runner = remote.serve_ws if transport == "ws" else remote.serve_tcp
    asyncio.run(runner(host, port))
