"""JSON-RPC hardening around pygls for clients that send bad messages.

* `CditProtocol` answers a request whose parameters do not deserialize with a JSON-RPC error
  (InvalidParams, -32602) instead of dropping it: pygls raises while decoding, before it knows the
  message is a request, so the client would wait for an answer forever.
* `ResyncingReader` wraps stdin for pygls' header reader. After a body shorter than its
  `Content-Length`, the rest of that body runs into the next message's header line; pygls reads
  headers line by line and only recognizes `Content-Length` at the start of a line, so it would
  skip every later message until a stray newline happened to arrive. The reader splits a line at
  a `Content-Length:` that is not at its start, so only the misframed message is lost.
  `ResyncingAsyncReader` does the same for a TCP stream.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, BinaryIO

from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol

log = logging.getLogger(__name__)

HEADER = b"Content-Length:"


class _Answered:
    """A request that was already answered with an error while decoding; nothing more to do."""

    def __init__(self, method: str) -> None:
        self.method = method


class CditProtocol(LanguageServerProtocol):
    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            method = data.get("method")
            if "id" not in data or not isinstance(method, str):
                raise  # a notification or a response: there is no one to answer
            msg_id = data["id"]
            if isinstance(msg_id, bool) or not isinstance(msg_id, (int, str)):
                msg_id = None  # JSON-RPC: the id could not be read (sent as null, not omitted)
            error = {"code": exc.code, "message": f"{exc.message}: bad parameters for {method!r}"}
            self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": error})
            return _Answered(method)

    def handle_message(self, message: Any) -> None:
        if isinstance(message, _Answered):
            return
        super().handle_message(message)


def _split(line: bytes) -> tuple[bytes, bytes]:
    """`line` up to a `Content-Length:` that is not at its start, and the rest (or b"")."""
    at = line.find(HEADER, 1)
    if at <= 0:
        return line, b""
    log.warning("skipped %d bytes of a misframed message", at)
    return line[:at], line[at:]


class ResyncingReader:
    """A binary stream for pygls' stdio reader that re-finds message headers (see the module)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._pending = b""

    def readline(self) -> bytes:
        line, self._pending = self._pending or self._stream.readline(), b""
        line, self._pending = _split(line)
        return line

    def read(self, size: int) -> bytes:
        head, self._pending = self._pending[:size], self._pending[size:]
        return head + (self._stream.read(size - len(head)) if len(head) < size else b"")


class ResyncingAsyncReader:
    """The same for pygls' reader over an `asyncio.StreamReader` (`--tcp`)."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self._stream = stream
        self._pending = b""

    async def readline(self) -> bytes:
        line, self._pending = self._pending or await self._stream.readline(), b""
        line, self._pending = _split(line)
        return line

    async def readexactly(self, size: int) -> bytes:
        head, self._pending = self._pending[:size], self._pending[size:]
        return head + (
            await self._stream.readexactly(size - len(head)) if len(head) < size else b""
        )
