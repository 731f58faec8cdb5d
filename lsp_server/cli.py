"""`cdit-integrate`: the command-line entry point."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .analysis import PipelineCall

EXIT_BAD_INPUT = 2
# `verify` could not run: the `[runtime]` extra (torch, diffusers, cache-dit ...) is not installed
EXIT_RUNTIME_MISSING = 1


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdit-integrate",
        description="Integrate diffusion transformers into cache-dit: analyze, generate, verify.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_analyze_parser(sub)
    _add_generate_parser(sub)
    _add_serve_parser(sub)
    _add_verify_parser(sub)
    return parser


def _add_analyze_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    analyze = sub.add_parser(
        "analyze",
        help="infer block lists, ForwardPattern, PatchFunctor need and CFG style of a transformer",
        description="Statically analyze a transformer source file (never imports it).",
    )
    analyze.add_argument(
        "file",
        help="transformer source file, or a dotted module name "
        "(e.g. diffusers.models.transformers.transformer_flux)",
    )
    analyze.add_argument("--class", dest="class_name", help="transformer class to analyze")
    analyze.add_argument(
        "--pipeline",
        help="pipeline source file (for has_separate_cfg and inputs the pipeline passes)",
    )
    analyze.add_argument("--config", help="the model's config.json (block counts, flags)")
    analyze.add_argument(
        "--model-index",
        help="the pipeline's model_index.json (text-encoder and VAE parallel support)",
    )
    analyze.add_argument(
        "--cp-size",
        type=int,
        nargs="+",
        default=[2, 4, 8],
        metavar="N",
        help="context-parallel degrees to pre-flight (default: 2 4 8)",
    )
    analyze.add_argument(
        "--tp-size",
        type=int,
        nargs="+",
        default=[2, 4, 8],
        metavar="N",
        help="tensor-parallel degrees to pre-flight (default: 2 4 8)",
    )
    analyze.add_argument("--json", action="store_true", help="print the JSON contract")
    analyze.add_argument(
        "--no-registry", action="store_true", help="skip reading the installed cache-dit registries"
    )
    from cdit_runtime.verify_arguments import add_call_flags

    add_call_flags(
        analyze,
        "has_separate_cfg for this call instead of the default path (a second, unconditional "
        "call may run only with a negative prompt, a guidance scale above 1 ...); the same "
        "flags as verify's. Inputs not named keep their defaults.",
        "an input the call is given from a file (not None; repeat)",
    )


def _add_generate_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    generate = sub.add_parser(
        "generate",
        help="generate the integration an IntegrationPlan describes (target standalone or "
        "cache-dit-checkout)",
        description="Generate code from an IntegrationPlan JSON; refuses to overwrite edited code.",
    )
    generate.add_argument("plan", help="IntegrationPlan JSON (or gate-check answers to complete)")
    generate.add_argument(
        "--dry-run", action="store_true", help="print a unified diff and write nothing"
    )
    generate.add_argument(
        "--manifest",
        help="record of generated code (default: .cdit/generated.json next to the plan)",
    )
    generate.add_argument("--json", action="store_true", help="print the result as JSON")
    generate.add_argument(
        "--print-plan",
        action="store_true",
        help="print the built IntegrationPlan (parts refused included) as JSON; write nothing",
    )
    generate.add_argument(
        "--allow-outside-workspace",
        action="store_true",
        help="write targets the plan names outside the workspace (the current folder and the "
        "plan's folder); refused without it",
    )


def _add_serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve",
        help="run the language server (stdio by default)",
        description="Run the cdit language server, the same as `python -m lsp_server`. --tcp and "
        "--ws listen on loopback only and need a token from the client (initializationOptions."
        "token): printed once to stderr, or kept in --token-file. See docs/security.md.",
    )
    transport = serve.add_mutually_exclusive_group()
    transport.add_argument("--tcp", action="store_true", help="listen on TCP instead of stdio")
    transport.add_argument(
        "--ws", action="store_true", help="listen on a WebSocket instead of stdio"
    )
    serve.add_argument(
        "--host", help="loopback address for --tcp / --ws (default 127.0.0.1; others are refused)"
    )
    serve.add_argument("--port", type=int, help="port for --tcp / --ws (default 8888, 0: any)")
    serve.add_argument(
        "--token-file",
        help="for --tcp / --ws: read the client token from this file (mode 600), or create it; "
        "without it a new token is printed to stderr",
    )


def _add_verify_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verify = sub.add_parser(
        "verify",
        help="run baseline/cache/CP/TP/TE-P/VAE-P phases and score them (PSNR and SSIM)",
        description="Verification runs through cdit_runtime (imports torch; trusted workspaces "
        "only). Progress is JSON lines on stdout; results go to <out>/results.json. Needs the "
        "runtime extra: pip install 'cdit-integrator[runtime]'.",
    )
    from cdit_runtime.cli import add_verify_arguments

    add_verify_arguments(verify)


def _bad_input(message: str) -> int:
    print(f"cdit-integrate: error: {' '.join(message.split())}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _run_analyze(args: argparse.Namespace) -> int:
    from cdit_runtime.contract import ProblemError

    from .analysis.report import render_report
    from .services.analyze import AnalyzeRequest, analyze_source

    try:
        call = _pipeline_call(args)
    except ValueError as exc:
        return _bad_input(str(exc))
    request = AnalyzeRequest(
        args.file,
        args.class_name,
        args.pipeline,
        args.config,
        args.model_index,
        cp_sizes=tuple(args.cp_size),
        tp_sizes=tuple(args.tp_size),
        registry=not args.no_registry,
        call=call,
    )
    try:
        result = analyze_source(request)
    except ProblemError as exc:
        return _bad_input(exc.problem.located())
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_report(result))
    return 0


def _pipeline_call(args: argparse.Namespace) -> PipelineCall | None:
    """`--call-arg` / `--input` as the pipeline call (None: neither given). Raises ValueError."""
    from cdit_runtime.request_from_flags import name_value

    from .analysis import PipelineCall

    if not args.call_args and not args.inputs:
        return None
    arguments = dict(name_value(a, "--call-arg", json_value=True) for a in args.call_args or ())
    inputs = tuple(name_value(i, "--input", json_value=False)[0] for i in args.inputs or ())
    return PipelineCall(arguments, inputs)


def _run_generate(args: argparse.Namespace) -> int:
    from .cli_generate import run_generate

    return run_generate(
        args.plan,
        dry_run=args.dry_run,
        manifest=args.manifest,
        as_json=args.json,
        print_plan=args.print_plan,
        allow_outside_workspace=args.allow_outside_workspace,
    )


def _run_verify(args: argparse.Namespace) -> int:
    """`verify` through cdit_runtime; without the `[runtime]` extra one line says how to get it
    (printing the request or the node commands needs no runtime)."""
    if not (args.print_request or getattr(args, "print_node_command", False)):
        from .services.verify import missing_runtime_here

        missing = missing_runtime_here()
        if missing is not None:
            print(f"cdit-integrate verify: {missing.problem.message}", file=sys.stderr)
            return EXIT_RUNTIME_MISSING
    from cdit_runtime.cli import run_verify

    return run_verify(args)


def _run_serve(args: argparse.Namespace) -> int:
    from .server import main as serve

    forward = ["--tcp"] if args.tcp else ["--ws"] if args.ws else []
    for flag, value in (
        ("--host", args.host),
        ("--port", args.port),
        ("--token-file", args.token_file),
    ):
        if value is not None:
            forward += [flag, str(value)]
    return serve(forward, prog="cdit-integrate serve")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "analyze":
            return _run_analyze(args)
        if args.command == "verify":
            return _run_verify(args)
        if args.command == "serve":
            return _run_serve(args)
        if args.command == "generate":
            return _run_generate(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    parser.error(f"unknown command {args.command}")
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
