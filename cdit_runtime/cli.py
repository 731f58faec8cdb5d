"""Command line: ``python -m cdit_runtime verify`` (also ``cdit-integrate verify``) and ``schema``.

``verify [REQUEST.json] [flags]``: flags override the request file (or build a request alone).
Progress events are JSON lines on stdout; the results table goes to stderr and
``<out>/results.md``; everything else to ``<out>/results.json``. Exit codes: 0 it ran (verdicts
are data), 1 it could not run (the error is in results.json with a hint), 2 bad request (one line
on stderr, before any worker starts: the request's values, its paths, the output folder and the
processes this host runs, see `preflight`), 130 cancelled (SIGINT/SIGTERM end the whole process
tree; measured phases are kept).

``load-check SOURCE...``: import the source files (or dotted module names) as a run does
(`loading.import_sources`, one after the other in this process) and print one JSON line
``{"schemaVersion": 1, "ok", "results": [{"source", "ok", "module", "classes" | "error",
"errorType"}]}``; exit 0 when every source imported, else 1. The language server's gate-check
load test (`cdit.lsp.loadCheck`) runs it in a subprocess.

The ``verify`` flags are defined in `verify_arguments`, and the request they describe is built in
`request_from_flags`; both names stay importable from here.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .contract import ContractError, ProgressEvent, load_request, schema_text, to_json
from .contract.plan import plan_schema_text
from .request_from_flags import build_request
from .verify_arguments import add_verify_arguments

__all__ = ["add_verify_arguments", "build_request", "main", "run_verify"]

EXIT_BAD_REQUEST = 2


def _print_event(event: ProgressEvent) -> None:
    try:
        data = {k: v for k, v in to_json(event).items() if v is not None}
        sys.stdout.write(json.dumps(data) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        pass


def run_verify(args: argparse.Namespace) -> int:
    """Run ``verify`` from parsed arguments; returns the exit code."""
    from .controller import Controller

    try:
        data = build_request(args)
        if args.print_request:
            print(json.dumps(data, indent=1))
            return 0
        request = load_request(data)
        from .multinode_cli import node_commands
        from .multinode_plan import check_nodes

        check_nodes(request)
        if getattr(args, "print_node_command", False):
            if request.nodes.nnodes < 2:
                raise ContractError("--print-node-command needs --nnodes 2 or more")
            argv = getattr(args, "argv", None) or sys.argv[1:]
            sys.stdout.write(node_commands(request, argv, str(Path.cwd())))
            return 0
        from .preflight import preflight

        preflight(request)  # before any worker starts: paths, output dir, processes per host
    except (OSError, ValueError, ContractError, RecursionError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        print(f"cdit-integrate verify: bad request: {text}", file=sys.stderr)
        return EXIT_BAD_REQUEST
    follower = None
    if request.nodes.node_rank > 0:  # multi-node: node 0 writes the results
        from .follower import FollowerController

        controller = follower = FollowerController(request, emit=_print_event)
    else:
        controller = Controller(request, emit=_print_event)

    def stop(signum: int, _frame: Any) -> None:
        controller.cancel()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = controller.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not args.quiet and follower is not None:
        sys.stderr.write(follower.summary())
    elif not args.quiet:
        from .report import render_checks, render_table

        sys.stderr.write(render_table(controller.result))
        sys.stderr.write(render_checks(controller.result))
        if controller.result.tune is not None:
            from .report import render_tune

            sys.stderr.write(render_tune(controller.result.tune))
        sys.stderr.write(f"results: {controller.results_path}\n")
    return code


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (exit 2), not the usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_REQUEST, f"{self.prog}: error: {' '.join(message.split())}\n")


def _load_check(sources: list[str]) -> int:
    """``load-check``: `loading.check_sources` as one JSON line on stdout; exit 0 when every
    source imported, 1 otherwise. What the imported modules print goes to stderr."""
    from .loading import check_sources

    stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        results = check_sources(sources)
    finally:
        sys.stdout = stdout
    ok = all(r["ok"] for r in results)
    stdout.write(json.dumps({"schemaVersion": 1, "ok": ok, "results": results}) + "\n")
    stdout.flush()
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = _OneLineParser(
        prog="python -m cdit_runtime", description="Verification runs of cache-dit integrations."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    verify = sub.add_parser("verify", help="run the phase matrix and score it against the baseline")
    add_verify_arguments(verify)
    schema = sub.add_parser("schema", help="print the JSON schema of the runtime's documents")
    schema.add_argument("--write", metavar="FILE", help="write it to FILE instead")
    schema.add_argument(
        "--document",
        choices=("verification", "plan"),
        default="verification",
        help="the runtime's documents (default) or the IntegrationPlan",
    )
    load_check = sub.add_parser(
        "load-check",
        help="import source files (or dotted module names) as a run does; print one JSON line",
    )
    load_check.add_argument("sources", nargs="+", metavar="SOURCE")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for --print-node-command
    if args.command == "load-check":
        return _load_check(args.sources)
    if args.command == "schema":
        text = plan_schema_text() if args.document == "plan" else schema_text()
        if args.write:
            Path(args.write).write_text(text)
        else:
            sys.stdout.write(text)
        return 0
    return run_verify(args)
