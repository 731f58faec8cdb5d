"""Writing several files as one transaction: all of them, or none.

Each new text is staged in a temporary file in its target's folder (with the target's permission
bits, flushed to disk), then the staged files are renamed into place in order; if any step fails
(an exception, Ctrl-C included), the files already renamed get their previous contents back
(from a hard link kept while renaming, or their bytes where links are not possible), created
files and folders are removed, and `WriteError` says what failed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..files import os_problem, shown


class WriteError(Exception):
    """A file of a transaction could not be written; `str()` is one line that says which, why,
    and that every file is as it was (or, should restoring fail too, which files are not)."""


@dataclass
class _Staged:
    path: Path
    tmp: Path  # the new text, in the target's folder
    backup: Path | None = None  # a hard link to the previous file while it is replaced
    previous: bytes | None = None  # its content when no link could be made
    previous_mode: int | None = None
    existed: bool = False
    renamed: bool = False


def write_all(files: Sequence[tuple[Path, str]]) -> None:
    """Write `files` (path, text) all or none: stage each text in a temporary file next to its
    target, then rename them into place in order; on any failure (an exception, Ctrl-C
    included) restore every file renamed so far and remove what was created. Raises
    `WriteError` for an `OSError`."""
    staged: list[_Staged] = []
    created: list[Path] = []
    failed: Path | None = None
    try:
        for path, text in files:
            failed = path
            _make_folders(path.parent, created)
            staged.append(_stage(path, text))
        for item in staged:
            failed = item.path
            _keep_previous(item)
            os.replace(item.tmp, item.path)
            item.renamed = True
    except BaseException as exc:
        not_restored = _roll_back(staged, created)
        if not isinstance(exc, OSError):
            raise
        reason = f"{shown(failed or '?')}: {os_problem(exc)}"
        if not_restored:
            raise WriteError(
                f"cannot write {reason}; could not restore "
                + ", ".join(
                    f"{shown(path)} (its previous text is in {shown(kept)})"
                    if kept is not None
                    else f"{shown(path)} (created by this run)"
                    if not any(s.path == path and s.existed for s in staged)
                    else f"{shown(path)}"
                    for path, kept in not_restored
                )
            ) from None
        raise WriteError(f"cannot write {reason}; nothing was changed") from None
    for item in staged:
        if item.backup is not None:
            with contextlib.suppress(OSError):
                os.unlink(item.backup)


def _make_folders(folder: Path, created: list[Path]) -> None:
    """Create `folder` and its missing parents, adding each one made to `created` (outermost
    first) as soon as it exists, so that a rollback removes it."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    if not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(folder))
    for item in reversed(missing):
        try:
            item.mkdir()
        except FileExistsError:
            if not item.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(item)) from None
            continue
        created.append(item)


def _stage(path: Path, text: str) -> _Staged:
    """`text` in a temporary file in `path`'s folder, with `path`'s permission bits (those a
    new file gets when it does not exist yet), flushed to disk."""
    mode = None
    with contextlib.suppress(FileNotFoundError):
        mode = path.stat().st_mode & 0o7777
    existed = mode is not None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:64]}.", suffix=".cdit-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return _Staged(path=path, tmp=Path(tmp), existed=existed)


def _keep_previous(item: _Staged) -> None:
    """Keep what `item.path` holds now, to restore it if a later rename fails: a hard link
    (the same file, untouched by the rename), or its bytes where links are not possible."""
    if not item.existed:
        return
    for attempt in range(16):
        backup = item.path.with_name(f".{item.path.name[:64]}.{os.getpid()}-{attempt}.cdit-bak")
        try:
            os.link(item.path, backup, follow_symlinks=False)
        except FileExistsError:
            continue
        except OSError:
            break
        item.backup = backup
        return
    item.previous = item.path.read_bytes()
    item.previous_mode = item.path.stat().st_mode & 0o7777


def _roll_back(staged: list[_Staged], created: list[Path]) -> list[tuple[Path, Path | None]]:
    """Undo a failed `write_all`: previous contents back, new files and folders removed,
    temporary files deleted. Returns (path, where its previous text is kept) for each file that
    could not be restored: that backup is left in place, never deleted."""
    failed = []
    for item in reversed(staged):
        try:
            if item.renamed:
                if item.backup is not None:
                    os.replace(item.backup, item.path)
                    item.backup = None
                elif item.previous is not None:
                    _restore_bytes(item.path, item.previous, item.previous_mode)
                else:
                    os.unlink(item.path)
        except OSError:
            if item.backup is not None:
                failed.append((item.path, item.backup))
                item.backup = None  # the only copy of the previous text: kept
            else:
                failed.append((item.path, None))
        for leftover in (item.tmp, item.backup):
            if leftover is not None:
                with contextlib.suppress(OSError):
                    os.unlink(leftover)
    for folder in reversed(created):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty
    return failed


def _restore_bytes(path: Path, data: bytes, mode: int | None) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:64]}.", suffix=".cdit-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to a temporary file in the same folder and move it into place."""
    write_all([(path, text)])
