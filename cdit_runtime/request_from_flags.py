"""The request document a ``verify`` command line describes: the file (if any), flags on top.

Standard library only. Every flag that cannot describe a request raises `ValueError` with one
line (the CLI prints it as a bad request); the document itself is checked by `load_request`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from .contract import PHASE_KINDS

__all__ = ["build_request", "read_request_file"]

# Flags copied as they are, under the camelCase key of their destination.
_GENERATION_KEYS = (
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
    "deterministic",
    "warmup",
    "repeat",
    "timeout_s",
    "launch_timeout_s",
)


def build_request(args: argparse.Namespace) -> dict[str, Any]:
    """The request document: the file (if any) with the flags applied on top."""
    data: dict[str, Any] = {}
    if args.request:
        data = read_request_file(Path(args.request))
    _apply_model_flags(args, data)
    _apply_integration_flags(args, data)
    _apply_phase_flags(args, data)
    _apply_generation_flags(args, data)
    _apply_cache_flags(args, data)
    _apply_tune_flags(args, data)
    from .multinode_cli import apply_node_flags

    apply_node_flags(args, data)
    _apply_output_dir(args, data)
    if "model" not in data:
        data["model"] = {"source": "tiny", "family": "flux"}
    # No dtype given: the request leaves it null and the runtime resolves it per device.
    _apply_call_flags(args, data)
    return data


def _apply_model_flags(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """``--tiny``, ``--model`` (``--shrink``), ``--pipeline-class``, ``--source-file``."""
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


def _apply_integration_flags(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """``--integration`` (a standalone module) or ``--checkout`` (cache-dit's registries)."""
    if args.integration:
        data["integration"] = {"kind": "standalone", "path": str(Path(args.integration).resolve())}
    elif args.checkout is not None:
        data["integration"] = {"kind": "cache-dit-checkout", "path": args.checkout or None}


def _apply_phase_flags(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """``--phases`` (a comma list; ``KIND+cache`` also caches) and ``--size``."""
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


def _apply_generation_flags(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """Prompt, sizes, steps, dtype, device, kernels, timing and timeouts, ``--reference``."""
    for key in _GENERATION_KEYS:
        value = getattr(args, key)
        if value is not None:
            data[_camel(key)] = value
    if args.warmup_steps is not None:
        data["warmupSteps"] = args.warmup_steps
    if args.reference:
        data["reference"] = str(Path(args.reference).resolve())


def _apply_cache_flags(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """The DBCache flags (destinations ``cache_<key>``) into ``cache``."""
    cache = _object(data, "cache")
    for name, value in vars(args).items():
        if name.startswith("cache_") and value is not None:
            cache[name.removeprefix("cache_")] = value
    if cache:
        data["cache"] = cache


def _apply_output_dir(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """``--out``, else the file's ``outputDir``, else ``.cdit/verify/<time>``."""
    if args.out:
        data["outputDir"] = str(Path(args.out).resolve())
    data.setdefault(
        "outputDir", str(Path(".cdit/verify", time.strftime("%Y%m%d-%H%M%S")).resolve())
    )


def _apply_call_flags(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """``--call-arg NAME=JSON`` into ``extraCallKwargs``, ``--input NAME=PATH`` into ``inputs``."""
    if args.call_args:
        extra = _object(data, "extraCallKwargs")
        extra.update(name_value(item, "--call-arg", json_value=True) for item in args.call_args)
        data["extraCallKwargs"] = extra
    if args.inputs:
        inputs = _object(data, "inputs")
        for item in args.inputs:
            name, path = name_value(item, "--input", json_value=False)
            inputs[name] = str(Path(path).expanduser().resolve())
        data["inputs"] = inputs


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


def name_value(item: str, flag: str, *, json_value: bool) -> tuple[str, Any]:
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
