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
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

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
        choices=("flux", "wan", "qwenimage", "flux1-dev", "skimage-dit"),
        help="embedded pipeline: random weights (flux1-dev: full size, for GPUs), or skimage-dit, "
        "the bundled trained model (cache quality means something there)",
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
    run.add_argument(
        "--attn",
        dest="attention_backend",
        help="attention backend of every phase but the baseline (native, _native_cudnn, flash ...)",
    )
    run.add_argument(
        "--compile",
        action="store_const",
        const=True,
        help="torch.compile the transformer in every phase but the baseline",
    )
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
    tune = parser.add_argument_group(
        "tune (find the fastest configuration that passes its verdict)",
        "Replaces the phases with the baseline and a grid: every attention backend without "
        "cache, every DBCache setting on the default kernels, then the fastest passing backend "
        "compiled and with the best cache settings (on several GPUs also the parallel phases).",
    )
    tune.add_argument("--tune", action="store_true", help="measure the grid and recommend")
    tune.add_argument("--tune-budget", type=float, metavar="S", help="time box in s (default 900)")
    tune.add_argument("--tune-attn", metavar="A,B", help="backends (default: those available)")
    tune.add_argument(
        "--tune-compile", choices=("off", "on", "both"), help="default: both on GPUs, off on CPU"
    )
    tune.add_argument("--tune-fn", metavar="N,M", help="Fn values (default 1)")
    tune.add_argument("--tune-bn", metavar="N,M", help="Bn values (default 0)")
    tune.add_argument("--tune-rdt", metavar="X,Y", help="thresholds (default 0.08,0.12,0.2,0.3)")
    tune.add_argument("--tune-ws", metavar="N,M", help="warmup steps (default: --ws)")
    tune.add_argument(
        "--tune-combine", type=int, metavar="N", help="best cache settings combined (default 2)"
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
        data = read_request_file(Path(args.request))
    model = _object(data, "model")
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
    if args.size is not None and args.size < 2:
        raise ValueError(f"--size {args.size}: the degree of the parallel phases must be >= 2")
    if args.phases is not None:
        kinds = [k.strip() for k in args.phases.split(",") if k.strip()]
        if not kinds:
            raise ValueError(
                f"--phases {args.phases!r} names no phase "
                f"(a comma list of {', '.join(PHASE_KINDS)})"
            )
        phases = []
        for kind in kinds:
            phase: dict[str, Any] = {"kind": kind.removesuffix("+cache")}
            if kind.endswith("+cache"):
                phase["cache"] = True  # a parallel phase that also caches
            if args.size is not None:
                phase["size"] = args.size
            phases.append(phase)
        data["phases"] = phases
    elif args.size is not None:
        for phase in data.get("phases") or []:
            if isinstance(phase, dict):
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
        "compile",
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
    cache = _object(data, "cache")
    for name, value in vars(args).items():
        if name.startswith("cache_") and value is not None:
            cache[name.removeprefix("cache_")] = value
    if cache:
        data["cache"] = cache
    _apply_tune_flags(args, data)
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
        extra = _object(data, "extraCallKwargs")
        extra.update(_name_value(item, "--call-arg", json_value=True) for item in args.call_args)
        data["extraCallKwargs"] = extra
    if args.inputs:
        inputs = _object(data, "inputs")
        for item in args.inputs:
            name, path = _name_value(item, "--input", json_value=False)
            inputs[name] = str(Path(path).expanduser().resolve())
        data["inputs"] = inputs
    return data


def _list(text: str, flag: str, kind: type) -> list[Any]:
    try:
        values = [kind(item.strip()) for item in text.split(",") if item.strip()]
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected a comma list of {kind.__name__}s") from None
    if not values:
        raise ValueError(f"{flag} {text!r} names no value")
    return values


def _apply_tune_flags(args: argparse.Namespace, data: dict[str, Any]) -> None:
    flags = {
        "attentionBackends": (args.tune_attn, "--tune-attn", str),
        "fn": (args.tune_fn, "--tune-fn", int),
        "bn": (args.tune_bn, "--tune-bn", int),
        "residualDiffThresholds": (args.tune_rdt, "--tune-rdt", float),
        "maxWarmupSteps": (args.tune_ws, "--tune-ws", int),
    }
    given = [flag for value, flag, _ in flags.values() if value is not None]
    given += [
        f
        for f, v in (
            ("--tune-budget", args.tune_budget),
            ("--tune-compile", args.tune_compile),
            ("--tune-combine", args.tune_combine),
        )
        if v is not None
    ]
    if not args.tune and "tune" not in data:
        if given:
            raise ValueError(f"{given[0]} needs --tune")
        return
    if args.phases is not None:
        raise ValueError(
            "--tune chooses the phases itself (the baseline and the grid): drop --phases"
        )
    tune = _object(data, "tune")
    for key, (value, flag, kind) in flags.items():
        if value is not None:
            tune[key] = _list(value, flag, kind)
    if args.tune_compile is not None:
        tune["compile"] = {"off": [False], "on": [True], "both": [False, True]}[args.tune_compile]
    if args.tune_budget is not None:
        tune["budgetS"] = args.tune_budget
    if args.tune_combine is not None:
        tune["combine"] = args.tune_combine
    data["tune"] = tune


_MAX_REQUEST_BYTES = 16 * 1024 * 1024


def read_request_file(path: Path) -> dict[str, Any]:
    """A request file's JSON object; `ValueError`/`OSError` with one line otherwise.

    Only a regular file is opened (a FIFO would block forever); the document must be a JSON
    object in UTF-8.
    """
    if not path.exists():
        raise ValueError(f"request file {path}: no such file")
    if not path.is_file():
        raise ValueError(f"request file {path}: not a regular file")
    if path.stat().st_size > _MAX_REQUEST_BYTES:
        raise ValueError(f"request file {path}: larger than {_MAX_REQUEST_BYTES} bytes")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"request file {path}: not UTF-8 ({exc.reason} at byte {exc.start})"
        ) from None
    except RecursionError:
        raise ValueError(f"request file {path}: nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"request file {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"request file {path}: a JSON {_json_kind(data)}, expected an object "
            '({"model": ..., "phases": [...]}; `python -m cdit_runtime schema` prints the schema)'
        )
    return data


def _object(data: dict[str, Any], key: str) -> dict[str, Any]:
    """A copy of the object at ``data[key]`` (empty when absent); `ValueError` if not an object."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{key}: expected an object, got a JSON {_json_kind(value)}")
    return dict(value)


def _json_kind(value: Any) -> str:
    for kind, name in ((list, "array"), (str, "string"), (bool, "boolean"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else "number"


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
        if args.write:
            Path(args.write).write_text(schema_text())
        else:
            sys.stdout.write(schema_text())
        return 0
    return run_verify(args)
