"""Source imports from the editor: the load check, the absolute-imports rewrite and its quick fix.

- `cdit.lsp.loadCheck {sources, timeoutS?}`: imports the source files (or dotted module names) in
  a subprocess exactly as a verification run does (`python -m cdit_runtime load-check`, which
  calls the runtime's own `loading.import_sources`), with a timeout, in the run interpreter, in a
  fresh empty working folder with `PYTHONSAFEPATH=1` (nothing of the workspace is on `sys.path`
  but what the runtime puts there for the sources). Trusted workspaces only: otherwise it answers
  `{"status": "not-run", "reason": "untrusted", "message": "not run: untrusted workspace"}`; in
  an interpreter without the `[runtime]` extra (the sources import torch and diffusers) it answers
  `not-run` with `"reason": "runtime-missing"`, the `missing` packages and the `requirement` that
  installs them: a warning, not an error, so a base install still passes the gate check.
  A source that fails and whose relative imports match installed diffusers carries the fixes:
  `installed` (the installed module of that name) and `rewrite` (the command below).
- `cdit.lsp.rewriteImports {uri, apply?}`: the WorkspaceEdit that makes a copied module's
  relative imports absolute against the installed package they resolve in (`CDIT402`); with
  `apply`, sent to the client (`workspace/applyEdit`, annotated as needing confirmation, so VS
  Code opens its Refactor Preview). Trusted workspaces only. Also a quick fix on `CDIT402`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
from lsprotocol import types

from ..analysis import AnalysisError
from ..analysis.imports import ANCHORED, absolute_imports
from ..analysis.sources import Anchor, read_source
from ..language_server import CditLanguageServer
from ..runtime_deps import RUNTIME_REQUIREMENT, missing_message
from .edits import DocumentChange, apply_edit, workspace_edit
from .errors import error
from .positions import open_document, path_for, uri_for
from .process_tree import terminate_tree
from .runs import resolve_interpreter, runtime_missing, runtime_runnable

LOAD_CHECK_TIMEOUT_S = 90.0
MAX_TIMEOUT_S = 600.0
STDERR_TAIL = 4000
FIX_KIND = "absoluteImports"
REWRITE_COMMAND = "cdit.lsp.rewriteImports"  # commands.REWRITE_IMPORTS
_MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")

NOT_RUN_UNTRUSTED = {
    "status": "not-run",
    "reason": "untrusted",
    "message": "not run: untrusted workspace",
    "results": [],
}


@attrs.define
class LoadCheckArgs:
    sources: list[str] = attrs.field(factory=list)
    timeout_s: float | None = None


@attrs.define
class RewriteArgs:
    uri: str
    apply: bool = False


def is_module_name(source: str, root: Path | None) -> bool:
    """A dotted module name rather than a file (as `cdit_runtime.loading.is_module_name`)."""
    if not _MODULE_NAME.match(source) or source.endswith(".py"):
        return False
    try:
        return not (root / source if root else Path(source)).exists()
    except (OSError, ValueError):  # a name the file system refuses is no file
        return True


async def load_check(ls: CditLanguageServer, args: LoadCheckArgs) -> dict[str, Any]:
    root = Path(ls.workspace.root_path) if ls.workspace.root_path else None
    if not ls.trusted:
        return dict(NOT_RUN_UNTRUSTED)
    sources = [s for s in args.sources if isinstance(s, str) and s.strip()]
    if not sources:
        return error("no-sources", "name at least one source file or module to load")
    if not runtime_runnable():
        return error(
            "runtime-unavailable",
            "the verification runtime (cdit_runtime) is not part of this build",
            "install the cdit-integrator package with its runtime",
        )
    interpreter = resolve_interpreter(ls.settings.run_interpreter(), root)
    if interpreter is None:
        return error(
            "no-interpreter",
            f"the interpreter {ls.settings.run_interpreter()!r} was not found",
            "set cdit.interpreter to the Python the runs use",
        )
    missing = await runtime_missing(interpreter)
    if missing:  # not a failure of the sources: a warning, and the gate check still passes
        return {
            **NOT_RUN_UNTRUSTED,
            "reason": "runtime-missing",
            "message": missing_message(missing, "not run: it"),
            "missing": missing,
            "requirement": RUNTIME_REQUIREMENT,
            "interpreter": interpreter,
        }
    targets = [
        s if is_module_name(s, root) else str(root / s if root and not Path(s).is_absolute() else s)
        for s in sources
    ]
    timeout = min(max(args.timeout_s or LOAD_CHECK_TIMEOUT_S, 1.0), MAX_TIMEOUT_S)
    reply = await _run(interpreter, targets, timeout)
    failed = [
        r
        for r in reply.get("results", [])
        if not r.get("ok") and not is_module_name(r.get("source", ""), None)
    ]
    if failed:  # the analysis caches belong to the analysis worker
        fixes = await ls.in_worker(lambda: [_fixes(Path(r["source"])) for r in failed])
        for result, fix in zip(failed, fixes, strict=True):
            result.update(fix)
    reply["interpreter"] = interpreter
    return reply


async def _run(interpreter: str, targets: list[str], timeout: float) -> dict[str, Any]:
    """`python -m cdit_runtime load-check TARGETS` in an empty folder; its JSON, or a status."""
    started = time.monotonic()
    cwd = tempfile.mkdtemp(prefix="cdit-load-check-")
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        try:
            process = await asyncio.create_subprocess_exec(
                interpreter,
                "-m",
                "cdit_runtime",
                "load-check",
                *targets,
                cwd=cwd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                env=env,
            )
        except OSError as exc:
            return error("spawn-failed", f"could not start {interpreter}: {exc}")
        try:
            out, err = await asyncio.wait_for(process.communicate(), timeout)
        except (TimeoutError, asyncio.TimeoutError):
            await terminate_tree(process)
            return {
                "status": "timeout",
                "message": f"importing the sources took longer than {timeout:g} s",
                "results": [],
                "elapsedS": round(time.monotonic() - started, 1),
            }
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    elapsed = round(time.monotonic() - started, 1)
    stderr = err.decode("utf-8", "replace")[-STDERR_TAIL:]
    document = _last_json_line(out.decode("utf-8", "replace"))
    if document is None or not isinstance(document.get("results"), list):
        first = next((ln for ln in reversed(stderr.splitlines()) if ln.strip()), "no output")
        return {
            "status": "error",
            "message": f"the load check did not report (exit {process.returncode}): {first}",
            "stderr": stderr,
            "results": [],
            "elapsedS": elapsed,
        }
    results = document["results"]
    failed = [r for r in results if not r.get("ok")]
    message = (
        "every source imported"
        if not failed
        else f"{failed[0].get('source')}: {first_line(failed[0].get('error', ''))}"
    )
    return {
        "status": "failed" if failed else "ok",
        "message": message,
        "results": results,
        "elapsedS": elapsed,
    }


def _last_json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            return value if isinstance(value, dict) else None
    return None


def first_line(text: str) -> str:
    return next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")


def _fixes(path: Path) -> dict[str, Any]:
    """For a file whose relative imports resolve against installed diffusers: the installed
    module of the same name (when there is one) and the rewrite command."""
    anchor = _anchor(path)
    if anchor is None:
        return {}
    out: dict[str, Any] = {
        "anchor": anchor.to_json(),
        "rewrite": {"command": REWRITE_COMMAND, "arguments": [{"uri": uri_for(path)}]},
    }
    installed = anchor.installed_file
    if installed is not None:
        try:
            identical = installed.read_bytes() == path.read_bytes()
        except OSError:
            identical = False
        out["installed"] = {
            "module": anchor.module,
            "file": str(installed),
            "version": anchor.version,
            "identical": identical,
        }
    return out


def _anchor(path: Path, text: str | None = None) -> Anchor | None:
    try:
        return read_source(path, text).anchor
    except AnalysisError:
        return None


# --- the rewrite ------------------------------------------------------------------------------


async def rewrite_imports(ls: CditLanguageServer, args: RewriteArgs) -> dict[str, Any]:
    if not ls.trusted:
        return error(
            "untrusted",
            "this workspace is not trusted: cdit does not write files in it",
            "trust the workspace (Manage Workspace Trust) to rewrite the imports",
        )
    edit, result = await rewrite_edit(ls, args.uri)
    if edit is None or not args.apply:
        return result
    return await apply_edit(ls, edit, "cdit: absolute imports", result)


async def rewrite_edit(
    ls: CditLanguageServer, uri: str
) -> tuple[types.WorkspaceEdit | None, dict[str, Any]]:
    """The edit making the relative imports of `uri` absolute, or (None, an error)."""
    path = path_for(uri)
    if path is None:
        return None, error("not-a-file", f"{uri} is not a file on disk")
    doc = open_document(ls.workspace, uri)
    try:
        text = doc.source if doc is not None else path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, error("unreadable", f"{path}: {exc}")

    def compute() -> tuple[Anchor | None, str]:
        anchor = _anchor(path, text)
        return anchor, absolute_imports(text, anchor) if anchor is not None else text

    try:
        anchor, new = await ls.in_worker(compute)
    except SyntaxError as exc:
        return None, error("syntax-error", f"{path}:{exc.lineno}: {exc.msg}")
    if anchor is None:
        return None, error(
            "no-anchor",
            f"{path.name}: its relative imports resolve where it is, or match no installed "
            "diffusers module",
            "nothing to rewrite",
        )
    if new == text:
        return None, error("up-to-date", f"{path.name} has no relative imports to rewrite")
    capabilities = ls.client_capabilities.workspace
    edit_caps = capabilities.workspace_edit if capabilities else None
    change = DocumentChange(str(path), text, new, doc.version if doc is not None else None)
    edit = workspace_edit(
        [change],
        ls.workspace.position_codec,
        document_changes=bool(edit_caps and edit_caps.document_changes),
        annotations=bool(edit_caps and edit_caps.change_annotation_support),
        label=f"cdit: absolute {anchor.package} imports ({anchor.module})",
    )
    return edit, {
        "edit": ls.protocol._converter.unstructure(edit),
        "files": [{"path": str(path), "created": False}],
        "module": anchor.module,
        "package": anchor.package,
        "version": anchor.version,
    }


def quick_fixes(ls: CditLanguageServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    """`Rewrite the relative imports as absolute diffusers imports` on a CDIT402 diagnostic."""
    wanted = params.context.only
    if wanted and not any(types.CodeActionKind.QuickFix.startswith(k) for k in wanted):
        return []
    for d in params.context.diagnostics:
        if d.source == "cdit" and str(d.code) == ANCHORED:
            disabled = None if ls.trusted else "the workspace is not trusted"
            return [
                types.CodeAction(
                    title="cdit: Rewrite the relative imports as absolute diffusers imports",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[d],
                    data={"fix": FIX_KIND, "uri": params.text_document.uri},
                    disabled=types.CodeActionDisabled(reason=disabled) if disabled else None,
                )
            ]
    return []


async def resolve_quick_fix(ls: CditLanguageServer, action: types.CodeAction) -> types.CodeAction:
    data = action.data if isinstance(action.data, dict) else {}
    if action.disabled is not None or not ls.trusted:
        return action
    edit, result = await rewrite_edit(ls, str(data.get("uri", "")))
    if edit is not None:
        action.edit = edit
    else:
        action.disabled = types.CodeActionDisabled(reason=result["error"]["message"])
    return action


def is_quick_fix(action: types.CodeAction) -> bool:
    return isinstance(action.data, dict) and action.data.get("fix") == FIX_KIND
