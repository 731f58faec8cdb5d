"""`cdit-integrate`: the command-line entry point."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

EXIT_BAD_INPUT = 2


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdit-integrate",
        description="Integrate diffusion transformers into cache-dit: analyze, generate, verify.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
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
    return parser


def _run_analyze(args: argparse.Namespace) -> int:
    from .analysis import AnalysisError, analyze_path
    from .analysis.report import render_report

    try:
        result = analyze_path(
            args.file,
            args.class_name,
            args.pipeline,
            args.config,
            registry=not args.no_registry,
            cp_sizes=tuple(args.cp_size),
            tp_sizes=tuple(args.tp_size),
            model_index_path=args.model_index,
        )
    except AnalysisError as exc:
        print(f"cdit-integrate: error: {exc.message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_report(result))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "analyze":
            return _run_analyze(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    parser.error(f"unknown command {args.command}")
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
