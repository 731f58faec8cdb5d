"""Checks of a verification request against this host, before any worker starts (no torch).

`preflight` raises `ValueError` with one line for what would otherwise surface only inside a
worker, after seconds of imports (or not at all): no phase at all, an output directory that is a
file or cannot be written, an integration module that is missing, not a file or not Python, a
cache-dit checkout that is not one, source files that do not exist, a reference that is not a
directory, paths with NUL bytes, and phases that need more processes than this host runs for a
CPU launch (`planning.cpu_process_limit`). The CLI turns it into exit code 2. Nothing here
imports or runs the user's code: modules are only read and compiled.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .contract import PHASE_KINDS, VerificationRequest
from .loading import is_module_name

__all__ = ["preflight"]


def preflight(request: VerificationRequest) -> None:
    """Raise `ValueError` (one line) when the request cannot run on this host.

    The output directory is created last, so a refused request leaves nothing behind.
    """
    if not request.phases:
        raise ValueError(f"phases: empty; name at least one of {', '.join(PHASE_KINDS)}")
    _check_processes(request)
    integration = request.integration
    if integration.kind == "standalone" and integration.path:
        _check_module("integration", integration.path)
    if integration.kind == "cache-dit-checkout" and integration.path:
        _check_checkout(integration.path)
    for phase in request.phases:
        if phase.integration:
            _check_module(f"phase {phase.id}: integration", phase.integration)
    for path in request.model.source_files:
        if not is_module_name(path):  # a dotted module name is imported as it is
            _check_readable_file("model source file", path)
    if request.reference:
        reference = _path("reference", request.reference)
        if not reference.is_dir():
            raise ValueError(f"reference {reference} is not a directory (an earlier run's output)")
    _check_output_dir(request.output_dir)


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _path(what: str, text: str) -> Path:
    if "\0" in text:
        raise ValueError(f"{what} {text!r} contains a NUL byte")
    return Path(text).expanduser()


def _check_output_dir(path: str) -> None:
    out = _path("output dir", path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"output dir {out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"output dir {out}: cannot be created ({_reason(exc)})") from None
    try:
        with tempfile.NamedTemporaryFile(dir=out, prefix=".cdit-write-check-"):
            pass
    except OSError as exc:
        raise ValueError(f"output dir {out}: not writable ({_reason(exc)})") from None


def _check_readable_file(what: str, path: str) -> bytes:
    file = _path(what, path)
    if not file.exists():
        raise ValueError(f"{what} {file} does not exist")
    if not file.is_file():
        raise ValueError(f"{what} {file} is not a regular file")
    try:
        return file.read_bytes()
    except OSError as exc:
        raise ValueError(f"{what} {file} cannot be read ({_reason(exc)})") from None


def _check_module(what: str, path: str) -> None:
    source = _check_readable_file(f"{what} module", path)
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise ValueError(
            f"{what} module {path}: syntax error at line {exc.lineno}: {exc.msg}"
        ) from None
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, nesting
        raise ValueError(f"{what} module {path} is not Python source ({exc})") from None


def _check_checkout(path: str) -> None:
    from .integration import checkout_src

    root = _path("cache-dit checkout", path)
    if not root.is_dir():
        raise ValueError(f"cache-dit checkout {root} is not a directory")
    if not (checkout_src(path) / "cache_dit").is_dir():
        raise ValueError(f"{root} is not a cache-dit checkout (no cache_dit or src/cache_dit)")


def _check_processes(request: VerificationRequest) -> None:
    from .multinode_plan import too_many_processes
    from .planning import count_gpus, cpu_process_limit

    if request.device == "cuda":
        return  # GPUs: a phase needing more than the visible devices is skipped, as data
    crowded = too_many_processes(request, "cpu")
    if not crowded:
        return
    if request.device == "auto" and count_gpus() > 0:
        return  # it runs on the GPUs
    first = next(iter(crowded.values()))
    raise ValueError(f"{first}; lower the phase size (--size) to {cpu_process_limit()} or less")
