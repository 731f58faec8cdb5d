"""The ``verify`` command line flags, group by group (shared with ``cdit-integrate verify``).

Standard library only: the language server builds its ``verify`` parser from here. The groups
and their order are what ``verify --help`` shows.
"""

from __future__ import annotations

import argparse

from .contract import PHASE_KINDS

__all__ = ["add_call_flags", "add_verify_arguments"]


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``verify`` flags (shared with ``cdit-integrate verify``)."""
    parser.add_argument("request", nargs="?", help="VerificationRequest JSON file")
    _add_model_flags(parser)
    _add_integration_flags(parser)
    _add_generation_flags(parser)
    _add_call_flags(parser)
    _add_cache_flags(parser)
    _add_tune_flags(parser)
    _add_output_flags(parser)
    from .multinode_cli import add_node_arguments

    add_node_arguments(parser)


def _add_model_flags(parser: argparse.ArgumentParser) -> None:
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


def _add_integration_flags(parser: argparse.ArgumentParser) -> None:
    integ = parser.add_argument_group("integration")
    integ.add_argument("--integration", metavar="MODULE.py", help="generated standalone module")
    integ.add_argument(
        "--checkout",
        nargs="?",
        const="",
        metavar="PATH",
        help="integration kind cache-dit-checkout: cache-dit's registries (installed, or the "
        "checkout at PATH)",
    )


def _add_generation_flags(parser: argparse.ArgumentParser) -> None:
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
    run.add_argument(
        "--deterministic",
        action="store_const",
        const=True,
        help="deterministic algorithms in every process (slower; for pipelines whose reruns "
        "differ on this device)",
    )
    run.add_argument("--warmup", type=int, help="untimed runs per phase (default 1)")
    run.add_argument("--warmup-steps", type=int, help="steps of warmup runs (default: --steps)")
    run.add_argument("--repeat", type=int, help="timed runs per phase (default 1)")
    run.add_argument("--timeout", type=float, dest="timeout_s", help="per-phase timeout (s)")
    run.add_argument(
        "--launch-timeout", type=float, dest="launch_timeout_s", help="import + load limit (s)"
    )
    run.add_argument("--reference", metavar="DIR", help="reuse the baseline of an earlier run")


def _add_call_flags(parser: argparse.ArgumentParser) -> None:
    add_call_flags(
        parser,
        "Pipeline-specific arguments the flags above do not cover. The pipeline must accept the "
        "name (arguments its __call__ does not take are dropped).",
        "a file loaded into the call argument NAME by its extension: image (diffusers "
        "load_image), video (load_video), .wav audio (float tensor 1 x C x T), .npy (tensor) "
        "(repeat; into inputs)",
    )


def add_call_flags(parser: argparse.ArgumentParser, description: str, input_help: str) -> None:
    """``--call-arg NAME=JSON`` and ``--input NAME=PATH`` (repeatable): how the pipeline is
    called, for ``verify`` and for ``analyze`` (which decides ``has_separate_cfg`` for it)."""
    call = parser.add_argument_group("pipeline call arguments", description)
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
        help=input_help,
    )


def _add_cache_flags(parser: argparse.ArgumentParser) -> None:
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


def _add_tune_flags(parser: argparse.ArgumentParser) -> None:
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


def _add_output_flags(parser: argparse.ArgumentParser) -> None:
    out = parser.add_argument_group("output")
    out.add_argument("--out", metavar="DIR", help="output dir (default .cdit/verify/<time>)")
    out.add_argument("--print-request", action="store_true", help="print the request and exit")
    out.add_argument("--quiet", action="store_true", help="no results table on stderr")
