"""A misbehaving client against the real language server over stdio, for the figures in
docs/reliability.md: rapid full-text edits whose versions go down, repeat or jump, valid requests,
requests whose parameters do not deserialize, notifications with broken parameters, and misframed
messages (Content-Length too short or too long, junk between messages, bodies that are not JSON).

    .venv/bin/python -m tests.lsp_stress --steps 600 --seed 1

Every valid request must be answered (no `null` hover on a file with a transformer), every bad
one with a JSON-RPC error; only the misframed messages themselves (and, for a too-long
Content-Length, the one message after it) may be lost. Prints a JSON summary; exit 1 on a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.conftest import diffusers_file
from tests.lsp_fixtures import REPO, line_of
from tests.lsp_fixtures.raw import RawServer, frame

FLUX = diffusers_file("models/transformers/transformer_flux.py")
TEXT = FLUX.read_text(encoding="utf-8")
RENAMED = TEXT.replace("transformer_blocks", "zzz_blocks")
BLOCKS = line_of(TEXT, "self.transformer_blocks = nn.ModuleList")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stress(steps: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    valid: list[int] = []  # requests that must be answered with a result
    bad: list[int] = []  # requests that must be answered with an error
    next_id = 10_000
    with RawServer(REPO) as server:
        server.initialize(REPO, {"debounceMs": rng.choice([0, 50])})
        uri = server.open(FLUX, TEXT, version=1)
        server.wait_diagnostics(uri, 1, timeout=60)
        cpu_before = cpu_seconds(server.proc.pid)
        started = time.monotonic()
        version, text = 1, TEXT
        for _ in range(steps):
            action = rng.choices(
                ["edit", "request", "bad_request", "bad_notification", "misframe"],
                weights=[50, 20, 12, 8, 10],
            )[0]
            counts[action] += 1
            next_id += 1
            if action == "edit":
                version = rng.choice([version + 1, version, version - 1, rng.randint(-5, 10**6)])
                text = rng.choice([TEXT, RENAMED, TEXT[: rng.randrange(len(TEXT))]])
                server.change(uri, text, version)
            elif action == "request":
                method, params = rng.choice(
                    [
                        ("textDocument/codeLens", {"textDocument": {"uri": uri}}),
                        (
                            "textDocument/hover",
                            {
                                "textDocument": {"uri": uri},
                                "position": {"line": rng.randrange(900), "character": 4},
                            },
                        ),
                        (
                            "workspace/executeCommand",
                            {"command": "cdit.lsp.analyzeFile", "arguments": [{"uri": uri}]},
                        ),
                    ]
                )
                message = {"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}
                server.write(frame(message))
                valid.append(next_id)
            elif action == "bad_request":
                method = rng.choice(["textDocument/hover", "textDocument/codeLens"])
                params = rng.choice([5, [], {"textDocument": 5}, {"position": "x"}, None])
                message = {"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}
                server.write(frame(message))
                bad.append(next_id)
            elif action == "bad_notification":
                method = rng.choice(["textDocument/didChange", "textDocument/didSave"])
                server.write(frame({"jsonrpc": "2.0", "method": method, "params": {"x": []}}))
            else:
                body = json.dumps(
                    {"jsonrpc": "2.0", "id": next_id, "method": "shutdown"}
                ).encode()  # never delivered whole: it must not shut the server down
                kind = rng.choice(["short", "long", "junk", "not_json"])
                counts[f"misframe_{kind}"] += 1
                if kind == "short":
                    server.write(frame(body, len(body) - rng.randint(1, len(body) - 1)))
                elif kind == "long":
                    server.write(frame(body, len(body) + rng.randint(1, 40)))
                    # The bytes it over-reads: a harmless notification, lost with it.
                    server.notify("$/cancelRequest", {"id": -1})
                elif kind == "junk":
                    server.write(bytes(rng.randrange(256) for _ in range(rng.randint(1, 60))))
                else:
                    server.write(frame(body[: rng.randrange(1, len(body))]))
        # Settle on a known state: a lower version than most seen, the renamed text.
        final = rng.randint(-1000, -10)
        server.change(uri, RENAMED, final)
        try:
            final_hover = server.hover(uri, BLOCKS, 8, timeout=60)
        except TimeoutError:
            final_hover = {}
        lost, errors, nulls = [], [], 0
        for msg_id in valid:
            try:
                response = server.response(msg_id, timeout=60)
            except TimeoutError:
                lost.append(msg_id)
                continue
            if "error" in response:
                errors.append(response)
            elif response["result"] is None:
                nulls += 1
        unanswered_bad = []
        for msg_id in bad:
            try:
                response = server.response(msg_id, timeout=10)
                if response.get("error", {}).get("code") != -32602:
                    unanswered_bad.append(response)
            except TimeoutError:
                unanswered_bad.append(msg_id)
        elapsed = time.monotonic() - started
        cpu = cpu_seconds(server.proc.pid) - cpu_before
        analyses = len(server.diagnostics(uri)) - 1
        alive = server.proc.poll() is None
        exit_code = server.close()
    result = (final_hover.get("result") or {}).get("contents", {}).get("value", "")
    summary = {
        "seed": seed,
        "steps": steps,
        "actions": dict(counts.most_common()),
        "valid_requests": len(valid),
        "valid_answered": len(valid) - len(lost),
        "valid_lost": len(lost),
        "valid_errors": len(errors),
        "null_results": nulls,  # hovers on lines without a block list, lenses on cut texts
        "bad_requests": len(bad),
        "bad_answered_invalid_params": len(bad) - len(unanswered_bad),
        "final_hover_current": "`self.zzz_blocks`" in result,
        "diagnostics_published": analyses,
        "server_alive_until_shutdown": alive,
        "exit_code": exit_code,
        "seconds": round(elapsed, 1),
        "server_cpu_seconds": round(cpu, 1),
    }
    summary["ok"] = (
        not lost
        and not errors
        and not unanswered_bad
        and summary["final_hover_current"]
        and alive
        and exit_code == 0
    )
    if errors:
        summary["first_error"] = errors[0]
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lsp_stress", description=__doc__)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    summary = stress(args.steps, args.seed)
    print(json.dumps(summary, indent=2))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
