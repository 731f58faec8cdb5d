"""Command line: ``python -m cdit_runtime verify`` (also ``cdit-integrate verify``) and ``schema``.

``verify [REQUEST.json] [flags]``: flags override the request file (or build a request alone).
Progress events are JSON lines on stdout; the results table goes to stderr and
``<out>/results.md``; everything else to ``<out>/results.json``. Exit codes: 0 it ran (verdicts
are data), 1 it could not run (the error is in results.json with a hint), 2 bad request, 130
cancelled (SIGINT/SIGTERM end the whole process tree; measured phases are kept).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .contract import PHASE_KINDS, ContractError, ProgressEvent, load_request, schema_text, to_json

__all__ = ["add_verify_arguments", "main", "run_verify"]

EXIT_BAD_REQUEST = 2


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``verify`` flags (shared with ``cdit-integrate verify``)."""
    parser.add_argument("request", nargs="?", help="VerificationRequest JSON file")
    model = parser.add_argument_group("model")
    model.add_argument("--model", metavar="PATH", help="local pipeline dir (model_index.json)")
    model.add_argument(
        "--tiny",
        choices=("flux", "wan", "qwenimage", "flux1-dev"),
        help="embedded random-weight pipeline (flux1-dev: full size, for GPUs)",
    )
    model.add_argument(
        "--shrink",
        action="store_true",
        help="with --model: random transformer from a shrunk config",
    )
    model.add_argument("--pipeline-class", help="pipeline class (default: model_index.json)")
    model.add_argument(
        "--source-file",
        action="append",
        default=None,
        metavar="FILE",
        help="file defining a third-party class (repeat); imported: trusted workspaces only",
    )
    integ = parser.add_argument_group("integration")
    integ.add_argument("--integration", metavar="MODULE.py", help="generated standalone module")
    integ.add_argument(
        "--checkout",
        nargs="?",
        const="",
        metavar="PATH",
        help="cache-dit registries (installed, or the checkout at PATH)",
    )
    run = parser.add_argument_group("phases and generation")
    run.add_argument(
        "--phases", help=f"comma list of {', '.join(PHASE_KINDS)} (default baseline,cache,ulysses)"
    )
    run.add_argument("--size", type=int, help="degree of the parallel phases (default 2)")
    run.add_argument("--prompt")
    run.add_argument("--height", type=int)
    run.add_argument("--width", type=int)
    run.add_argument("--frames", type=int, dest="num_frames")
    run.add_argument("--steps", type=int)
    run.add_argument("--seed", type=int)
    run.add_argument("--guidance", type=float, dest="guidance_scale")
    run.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        help="default: float32 on CPU, bfloat16 on GPUs",
    )
    run.add_argument("--device", choices=("auto", "cuda", "cpu"))
    run.add_argument("--attn", dest="attention_backend", help="cache-dit attention backend")
    run.add_argument("--warmup", type=int, help="untimed runs per phase (default 1)")
    run.add_argument("--warmup-steps", type=int, help="steps of warmup runs (default: --steps)")
    run.add_argument("--repeat", type=int, help="timed runs per phase (default 1)")
    run.add_argument("--timeout", type=float, dest="timeout_s", help="per-phase timeout (s)")
    run.add_argument(
        "--launch-timeout", type=float, dest="launch_timeout_s", help="import + load limit (s)"
    )
    run.add_argument("--reference", metavar="DIR", help="reuse the baseline of an earlier run")
    call = parser.add_argument_group(
        "pipeline call arguments",
        "Pipeline-specific arguments the flags above do not cover. The pipeline must accept the "
        "name (arguments its __call__ does not take are dropped).",
    )
    call.add_argument(
        "--call-arg",
        action="append",
        default=None,
        dest="call_args",
        metavar="NAME=JSON",
        help="a keyword argument of the pipeline call, its value in JSON: audio_end_in_s=2.0, "
        "use_resolution_binning=false, negative_prompt='\"noise\"' (repeat; into "
        "extraCallKwargs)",
    )
    call.add_argument(
        "--input",
        action="append",
        default=None,
        dest="inputs",
        metavar="NAME=PATH",
        help="a file loaded into the call argument NAME by its extension: image (diffusers "
        "load_image), video (load_video), .wav audio (float tensor 1 x C x T), .npy (tensor) "
        "(repeat; into inputs)",
    )
    cache = parser.add_argument_group("DBCache (cache-dit CLI defaults: Fn 1, Bn 0, rdt 0.12 ...)")
    for flag, key, kind in (
        ("--fn", "fn", int),
        ("--bn", "bn", int),
        ("--rdt", "residualDiffThreshold", float),
        ("--ws", "maxWarmupSteps", int),
        ("--wi", "warmupInterval", int),
        ("--mc", "maxCachedSteps", int),
        ("--mcc", "maxContinuousCachedSteps", int),
    ):
        cache.add_argument(flag, type=kind, dest=f"cache_{key}")
    cache.add_argument(
        "--calibrate-rdt",
        type=float,
        dest="cache_calibrateShare",
        metavar="SHARE",
        help="choose the residual-diff threshold from the no-cache control's per-step diffs so "
        "that about SHARE (0-1) of the steps is cached: a plumbing check on random weights",
    )
    cache.add_argument(
        "--no-control",
        action="store_const",
        const=False,
        dest="cache_control",
        help="skip the no-cache control of cache phases (their verdict is then unverified)",
    )
    out = parser.add_argument_group("output")
    out.add_argument("--out", metavar="DIR", help="output dir (default .cdit/verify/<time>)")
    out.add_argument("--print-request", action="store_true", help="print the request and exit")
    out.add_argument("--quiet", action="store_true", help="no results table on stderr")
    from .multinode import add_node_arguments

    add_node_arguments(parser)


def build_request(args: argparse.Namespace) -> dict[str, Any]:
    """The request document: the file (if any) with the flags applied on top."""
    data: dict[str, Any] = {}
    if args.request:
        data = json.loads(Path(args.request).read_text())
    model = dict(data.get("model") or {})
    if args.tiny:
        model = {"source": "tiny", "family": args.tiny}
    if args.model:
        model = {"source": "shrink" if args.shrink else "local", "path": args.model}
    if args.pipeline_class:
        model["pipelineClass"] = args.pipeline_class
    if args.source_file:
        model["sourceFiles"] = [str(Path(f).resolve()) for f in args.source_file]
    if model:
        data["model"] = model
    if args.integration:
        data["integration"] = {"kind": "standalone", "path": str(Path(args.integration).resolve())}
    elif args.checkout is not None:
        data["integration"] = {"kind": "checkout", "path": args.checkout or None}
    if args.phases:
        phases = []
        for kind in (k.strip() for k in args.phases.split(",") if k.strip()):
            phase: dict[str, Any] = {"kind": kind}
            if args.size:
                phase["size"] = args.size
            phases.append(phase)
        data["phases"] = phases
    elif args.size:
        for phase in data.get("phases", []):
            phase["size"] = args.size
    for key in (
        "prompt",
        "height",
        "width",
        "num_frames",
        "steps",
        "seed",
        "guidance_scale",
        "dtype",
        "device",
        "attention_backend",
        "warmup",
        "repeat",
        "timeout_s",
        "launch_timeout_s",
    ):
        value = getattr(args, key)
        if value is not None:
            data[_camel(key)] = value
    if args.warmup_steps is not None:
        data["warmupSteps"] = args.warmup_steps
    if args.reference:
        data["reference"] = str(Path(args.reference).resolve())
    cache = dict(data.get("cache") or {})
    for name, value in vars(args).items():
        if name.startswith("cache_") and value is not None:
            cache[name.removeprefix("cache_")] = value
    if cache:
        data["cache"] = cache
    from .multinode import apply_node_flags

    apply_node_flags(args, data)
    if args.out:
        data["outputDir"] = str(Path(args.out).resolve())
    data.setdefault(
        "outputDir", str(Path(".cdit/verify", time.strftime("%Y%m%d-%H%M%S")).resolve())
    )
    if "model" not in data:
        data["model"] = {"source": "tiny", "family": "flux"}
    # No dtype given: the request leaves it null and the runtime resolves it per device.
    if args.call_args:
        extra = dict(data.get("extraCallKwargs") or {})
        extra.update(_name_value(item, "--call-arg", json_value=True) for item in args.call_args)
        data["extraCallKwargs"] = extra
    if args.inputs:
        inputs = dict(data.get("inputs") or {})
        for item in args.inputs:
            name, path = _name_value(item, "--input", json_value=False)
            inputs[name] = str(Path(path).expanduser().resolve())
        data["inputs"] = inputs
    return data


def _name_value(item: str, flag: str, *, json_value: bool) -> tuple[str, Any]:
    """``NAME=VALUE`` of a repeatable flag; the value parsed as JSON for ``--call-arg``."""
    name, sep, value = item.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise ValueError(f"{flag} {item!r}: expected NAME=VALUE with NAME a Python identifier")
    if not json_value:
        if not value:
            raise ValueError(f"{flag} {item!r}: empty path")
        return name, value
    try:
        return name, json.loads(value)
    except ValueError:
        raise ValueError(
            f"{flag} {item!r}: {value!r} is not JSON (numbers, true/false/null, [lists], "
            f"{{objects}}; quote strings: {name}='\"{value}\"')"
        ) from None


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


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
        from .multinode import check_nodes, node_commands

        check_nodes(request)
        if getattr(args, "print_node_command", False):
            if request.nodes.nnodes < 2:
                raise ContractError("--print-node-command needs --nnodes 2 or more")
            argv = getattr(args, "argv", None) or sys.argv[1:]
            sys.stdout.write(node_commands(request, argv, str(Path.cwd())))
            return 0
    except (OSError, ValueError, ContractError) as exc:
        print(f"cdit-integrate verify: bad request: {exc}", file=sys.stderr)
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
        sys.stderr.write(f"results: {controller.results_path}\n")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cdit_runtime", description="Verification runs of cache-dit integrations."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    verify = sub.add_parser("verify", help="run the phase matrix and score it against the baseline")
    add_verify_arguments(verify)
    schema = sub.add_parser("schema", help="print the JSON schema of the runtime's documents")
    schema.add_argument("--write", metavar="FILE", help="write it to FILE instead")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for --print-node-command
    if args.command == "schema":
        if args.write:
            Path(args.write).write_text(schema_text())
        else:
            sys.stdout.write(schema_text())
        return 0
    return run_verify(args)
