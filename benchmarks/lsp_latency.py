"""Language-server latency on the largest diffusers transformer files, over stdio.

    .venv/bin/python benchmarks/lsp_latency.py [--files 5] [--edits 40] [--json OUT]

Starts `python -m lsp_server` as an editor would and, for each of the largest
`models/transformers/*.py` files of the installed diffusers:

- replays edits one at a time (a new statement line, a changed number, a changed comment, at
  random places; every edit keeps the file parsing, see `edit`) and times
  `didChange` -> `publishDiagnostics` for that version, minus the configured debounce;
- times hovers on the lines the analysis anchors (block lists, loops, block and attention
  classes, the transformer class) and on random lines;
- times `textDocument/codeAction` (listing) and `codeAction/resolve` of "generate everything"
  (code generation runs; nothing is written).

Then opens every transformer file of diffusers, waits for all their diagnostics and reads the
server's resident memory (VmRSS; VmHWM is the peak). Targets (2-core machine): diagnostics p50 <=
60 ms and p95 <= 150 ms after the debounce, hover p95 <= 50 ms, RSS <= 400 MB.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import gc
import importlib.util
import json
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

DEBOUNCE_MS = 250


def _diffusers_root() -> Path:
    spec = importlib.util.find_spec("diffusers")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("diffusers is not installed in this environment")
    return Path(next(iter(spec.submodule_search_locations)))


class Client(LanguageClient):
    """A client that timestamps every publishDiagnostics by (uri, version)."""

    def __init__(self) -> None:
        super().__init__("cdit-lsp-latency", "1")
        self.published: dict[tuple[str, int | None], float] = {}
        self.waiters: dict[tuple[str, int | None], asyncio.Future[float]] = {}

        @self.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def _published(client: Client, params: types.PublishDiagnosticsParams) -> None:
            key = (params.uri, params.version)
            now = time.perf_counter()
            client.published[key] = now
            waiter = client.waiters.pop(key, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(now)

        @self.feature(types.WINDOW_LOG_MESSAGE)
        def _log(client: Client, params: types.LogMessageParams) -> None:
            pass

        @self.feature(types.WINDOW_SHOW_MESSAGE)
        def _show(client: Client, params: types.ShowMessageParams) -> None:
            print(f"server: {params.message}", file=sys.stderr)

    async def published_at(self, uri: str, version: int, timeout: float = 60) -> float:
        key = (uri, version)
        if key in self.published:
            return self.published[key]
        future = asyncio.get_running_loop().create_future()
        self.waiters[key] = future
        return await asyncio.wait_for(future, timeout)


def analysis_alone(replayed: list[tuple[Path, str]]) -> list[float]:
    """The same edited texts analyzed in this process, the way the server's worker does it."""
    from pygls.workspace.position_codec import PositionCodec

    from lsp_server.features.analyzer import analyze_snapshot
    from lsp_server.features.documents import Snapshot
    from lsp_server.features.settings import Settings

    gc.set_threshold(50_000, 50, 100)  # as the server's `main` does
    codec, settings = PositionCodec(), Settings()
    for path, text in replayed[:1]:  # warm the parse cache and the registry facts once
        analyze_snapshot(Snapshot(path.as_uri(), 0, text, path), 0, settings, codec)
    out = []
    for version, (path, text) in enumerate(replayed, start=1):
        entry = analyze_snapshot(Snapshot(path.as_uri(), version, text, path), 0, settings, codec)
        out.append(entry.elapsed_ms)
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": statistics.median(values),
        "p95_ms": percentile(values, 95),
        "max_ms": max(values),
    }


_NUMBER = re.compile(r"(?<![\w.])(\d+)(?![\w.])")


def edit(text: str, rng: random.Random, n: int) -> str:
    """One edit as a user makes it, that keeps the file parsing (tried until it does).

    A third each: a new statement line in a function body, a changed number literal, a changed
    comment. Every line after an inserted one moves, so stale positions would show.
    """
    lines = text.split("\n")
    for _ in range(200):
        row = rng.randrange(len(lines))
        line = lines[row]
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        kind = n % 3
        candidate = list(lines)
        if kind == 0 and indent and stripped.startswith(("return ", "x = ", "if ", "for ")):
            candidate.insert(row, f"{indent}_cdit_bench_{n} = {n}")
        elif kind == 1 and _NUMBER.search(stripped) and not stripped.startswith("#"):
            candidate[row] = indent + _NUMBER.sub(lambda m: str(int(m[1]) + 1), stripped, 1)
        elif kind == 2 and stripped.startswith("#"):
            candidate[row] = f"{line} (edit {n})"
        else:
            continue
        new = "\n".join(candidate)
        try:
            ast.parse(new)
        except SyntaxError:
            continue
        return new
    return text + f"\n# edit {n}"


async def rss_mb(pid: int) -> tuple[float, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    values = {}
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    root = _diffusers_root()
    files = sorted(
        (p for p in (root / "models" / "transformers").glob("*.py") if p.name != "__init__.py"),
        key=lambda p: p.stat().st_size,
        reverse=True,
    )
    client = Client()
    workspace = Path(tempfile.mkdtemp(prefix="cdit-bench-"))
    await client.start_io(*(args.server or [sys.executable, "-m", "lsp_server"]))
    pid = client._server.pid  # type: ignore[union-attr]
    await client.initialize_async(
        types.InitializeParams(
            # As VS Code: edits of code actions come with `codeAction/resolve`.
            capabilities=types.ClientCapabilities(
                workspace=types.WorkspaceClientCapabilities(
                    workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True)
                ),
                text_document=types.TextDocumentClientCapabilities(
                    code_action=types.CodeActionClientCapabilities(
                        data_support=True,
                        resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"]),
                    )
                ),
            ),
            root_uri=workspace.as_uri(),
            initialization_options={"settings": {"debounceMs": DEBOUNCE_MS}},
        )
    )
    client.initialized(types.InitializedParams())
    rng = random.Random(args.seed)
    diag_ms: list[float] = []
    hover_anchor_ms: list[float] = []
    hover_other_ms: list[float] = []
    action_ms: list[float] = []
    resolve_ms: list[float] = []
    per_file: dict[str, dict[str, float]] = {}
    replayed: list[tuple[Path, str]] = []
    for path in files[: args.files]:
        uri = path.as_uri()
        text = path.read_text(encoding="utf-8")
        version = 1
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id="python", version=version, text=text
                )
            )
        )
        await client.published_at(uri, version)
        file_ms = []
        for n in range(args.edits):
            text = edit(text, rng, n)
            replayed.append((path, text))
            version += 1
            sent = time.perf_counter()
            client.text_document_did_change(
                types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                    content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
                )
            )
            arrived = await client.published_at(uri, version)
            file_ms.append((arrived - sent) * 1000 - DEBOUNCE_MS)
        diag_ms += file_ms
        report = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="cdit.lsp.analyzeFile", arguments=[{"uri": uri}])
        )
        anchors = set()
        for t in report.get("transformers", []):
            anchors.add(t["line"])
            for b in t["blockLists"]:
                anchors |= {e["line"] for e in b["evidence"][:2]}
                if b.get("blockClassLine"):
                    anchors.add(b["blockClassLine"])
        line_count = text.count("\n") + 1
        lines = [(line, True) for line in sorted(anchors)]
        lines += [(rng.randrange(1, line_count), False) for _ in range(args.hovers)]
        for line, anchored in lines:
            start = time.perf_counter()
            await client.text_document_hover_async(
                types.HoverParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    position=types.Position(line - 1, 8),
                )
            )
            (hover_anchor_ms if anchored else hover_other_ms).append(
                (time.perf_counter() - start) * 1000
            )
        everything = None
        for _ in range(args.actions):
            row = rng.randrange(line_count)
            start = time.perf_counter()
            actions = await client.text_document_code_action_async(
                types.CodeActionParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    range=types.Range(types.Position(row, 0), types.Position(row, 0)),
                    context=types.CodeActionContext(diagnostics=[]),
                )
            )
            action_ms.append((time.perf_counter() - start) * 1000)
            everything = next(
                (a for a in actions or [] if str(a.kind).endswith(".all")), everything
            )
        if everything is not None and args.resolves:
            for _ in range(args.resolves):
                start = time.perf_counter()
                await client.code_action_resolve_async(everything)
                resolve_ms.append((time.perf_counter() - start) * 1000)
        per_file[path.name] = {
            "kb": path.stat().st_size / 1024,
            "p50_ms": statistics.median(file_ms),
            "p95_ms": percentile(file_ms, 95),
        }
        client.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )
    # Memory with every transformer file of diffusers open.
    start = time.perf_counter()
    for path in files:
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=path.as_uri(),
                    language_id="python",
                    version=1000,
                    text=path.read_text(encoding="utf-8"),
                )
            )
        )
    for path in files:
        await client.published_at(path.as_uri(), 1000, timeout=300)
    open_all_s = time.perf_counter() - start
    rss, peak = await rss_mb(pid)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    analysis_ms = analysis_alone(replayed)
    return {
        "python": platform.python_version(),
        "diffusers_root": str(root),
        "debounce_ms": DEBOUNCE_MS,
        "diagnostics_after_debounce": summary(diag_ms),
        "analysis_alone_same_edits": summary(analysis_ms),
        "hover_on_anchors": summary(hover_anchor_ms),
        "hover_on_other_lines": summary(hover_other_ms),
        "hover_all": summary(hover_anchor_ms + hover_other_ms),
        "code_action_list": summary(action_ms),
        "code_action_resolve_generate_all": summary(resolve_ms) if resolve_ms else None,
        "open_all": {"files": len(files), "seconds": open_all_s, "rss_mb": rss, "peak_mb": peak},
        "per_file": per_file,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=5, help="largest files to edit (default 5)")
    parser.add_argument("--edits", type=int, default=40, help="edits replayed per file")
    parser.add_argument("--hovers", type=int, default=20, help="random-line hovers per file")
    parser.add_argument("--actions", type=int, default=10, help="code-action lists per file")
    parser.add_argument("--resolves", type=int, default=2, help="'generate all' resolves per file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--server", nargs="+", help="server command (default: this python -m lsp_server)"
    )
    parser.add_argument("--json", dest="json_out", help="also write the numbers as JSON")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print(f"{'file':34} {'KB':>6} {'p50 ms':>8} {'p95 ms':>8}")
    for name, row in result["per_file"].items():
        print(f"{name:34} {row['kb']:6.0f} {row['p50_ms']:8.1f} {row['p95_ms']:8.1f}")
    print()
    print(f"{'':34} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    for key in (
        "diagnostics_after_debounce",
        "analysis_alone_same_edits",
        "hover_on_anchors",
        "hover_on_other_lines",
        "hover_all",
        "code_action_list",
        "code_action_resolve_generate_all",
    ):
        row = result[key]
        if row:
            print(
                f"{key:34} {row['n']:6d} {row['p50_ms']:8.1f} {row['p95_ms']:8.1f} "
                f"{row['max_ms']:8.1f}"
            )
    memory = result["open_all"]
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    result["loadavg_after"] = load
    print(
        f"\nall {memory['files']} transformer files open ({memory['seconds']:.1f} s): "
        f"RSS {memory['rss_mb']:.0f} MB (peak {memory['peak_mb']:.0f} MB)"
    )
    print(f"load average after the run: {' '.join(load)}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
