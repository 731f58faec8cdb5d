"""Reading the files a user names (plans, answers, configs, manifests, generation targets) so
that every problem is one line and nothing hangs.

`read_text(path)` opens without blocking (`O_NONBLOCK`: a FIFO or a device never stalls the
open) and checks the opened file itself (`fstat`, no race with a `stat` before it): only regular
files are read, up to a size limit, as UTF-8 with the line endings kept. `load_json(path)` adds
the JSON checks (syntax, nesting depth, integers too long to convert). Both raise `InputError`,
whose message is a single line naming the file. No heavy imports: the CLI's `analyze` uses this.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

MAX_TEXT_BYTES = 20_000_000
MAX_JSON_DEPTH = 64
_SHOWN_NAME = 240


class InputError(Exception):
    """A file that cannot be used: `str(error)` is one line that names it. `missing`: it does
    not exist; `syntax`: it was read but is not JSON."""

    def __init__(self, message: str, *, missing: bool = False, syntax: bool = False) -> None:
        super().__init__(" ".join(message.split()) if "\n" in message else message)
        self.missing = missing
        self.syntax = syntax


def shown(path: str | os.PathLike[str]) -> str:
    """A file name for a one-line message: control characters escaped, very long names cut."""
    text = os.fspath(path)
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) > _SHOWN_NAME:
        text = f"{text[: _SHOWN_NAME // 2]}…{text[-_SHOWN_NAME // 4 :]} ({len(text)} characters)"
    return text


def os_problem(exc: OSError) -> str:
    """What an OSError means for a file the user named, in words."""
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    if exc.errno == errno.ENOTDIR:
        return "a folder in its path is a file"
    if exc.errno == errno.EISDIR:
        return "is a folder, not a file"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno == errno.ELOOP:
        return "too many levels of symbolic links"
    return exc.strerror or type(exc).__name__


def _label(what: str, name: str) -> str:
    return f"{what} {name}" if what else name


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def read_text(
    path: str | os.PathLike[str], *, what: str = "", max_bytes: int = MAX_TEXT_BYTES
) -> str:
    """The UTF-8 text of the regular file `path`, line endings kept. Raises `InputError`
    (`missing=True` when it does not exist)."""
    name = shown(path)
    if "\x00" in os.fspath(path):
        raise InputError(f"{_label(what, name)}: the name contains a NUL byte")
    check_regular(path, what=what)  # a FIFO or a device is not even opened
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        missing = exc.errno == errno.ENOENT
        raise InputError(f"{_label(what, name)}: {os_problem(exc)}", missing=missing) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{_label(what, name)}: is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise InputError(
                f"{_label(what, name)}: {st.st_size} bytes is too large (limit {max_bytes})"
            )
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise InputError(f"{_label(what, name)}: too large (over {max_bytes} bytes)")
            chunks.append(chunk)
    except OSError as exc:
        raise InputError(f"{_label(what, name)}: cannot read ({os_problem(exc)})") from None
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{_label(what, name)}: not UTF-8 text (byte {exc.start})") from None


def parse_json(text: str, *, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`text` as JSON, nested at most `max_depth` levels. Raises `InputError`."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise InputError(f"{what}: JSON nested too deeply (limit {max_depth} levels)") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{what}: not JSON ({exc.msg}: line {exc.lineno} column {exc.colno})", syntax=True
        ) from None
    except ValueError as exc:  # an integer longer than Python converts (sys.int_info)
        raise InputError(f"{what}: not usable JSON ({exc})") from None
    if depth(data) > max_depth:
        raise InputError(f"{what}: JSON nested too deeply (limit {max_depth} levels)")
    return data


def load_json(
    path: str | os.PathLike[str],
    *,
    what: str = "",
    max_bytes: int = MAX_TEXT_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """The JSON document in the regular file `path`. Raises `InputError`."""
    text = read_text(path, what=what, max_bytes=max_bytes)
    return parse_json(text, what=_label(what, shown(path)), max_depth=max_depth)


def depth(value: Any) -> int:
    """How deeply `value` (parsed JSON) nests arrays and objects (iterative: no recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item)
    return deepest


def check_regular(path: str | os.PathLike[str], *, what: str = "") -> Path:
    """`path` when it is an existing regular file (stat, follows links). Raises `InputError`."""
    name = shown(path)
    if "\x00" in os.fspath(path):
        raise InputError(f"{_label(what, name)}: the name contains a NUL byte")
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputError(
            f"{_label(what, name)}: {os_problem(exc)}", missing=exc.errno == errno.ENOENT
        ) from None
    except ValueError as exc:
        raise InputError(f"{_label(what, name)}: {exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{_label(what, name)}: is {_kind(st.st_mode)}, not a regular file")
    return Path(path)
