"""Where the float32 thresholds come from: correct phases against deliberately wrong ones.

    .venv/bin/python benchmarks/verify_calibration.py RESULTS.json [RESULTS.json ...]

Reads verification results (``results.json`` of runs in float32, e.g. the mutation tests'
requests: ``pytest tests/test_verify_mutations.py --basetemp DIR`` leaves them under
``DIR/mutations0/<model>/verify/``). Phases named ``mutant-*`` are deliberately wrong, the others
correct. For the parallel phases and the no-cache controls it prints the lowest PSNR (output,
worst frame for video, and final latents) of the correct ones and the highest of the wrong ones
that ran to the end (the others failed outright), and the margin the configured thresholds leave
on each side (``docs/verification-thresholds.md``).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

PARALLEL = {"ulysses", "ring", "uaa", "tp", "tp_tep", "vae_p", "hybrid"}


def _db(value: Any) -> float | None:
    if value is None:
        return None
    return math.inf if value == "inf" else float(value)


def _worst(phase: dict[str, Any]) -> float | None:
    """The lowest of output PSNR (worst frame) and latent PSNR."""
    values = [
        _db(phase.get("minFramePsnrDb")) or _db(phase.get("psnrDb")),
        _db(phase.get("latentPsnrDb")),
    ]
    values = [v for v in values if v is not None]
    return min(values) if values else None


def collect(paths: list[Path]) -> dict[str, list[tuple[str, float]]]:
    """Samples per group: correct/wrong parallel phases, correct/wrong controls."""
    groups: dict[str, list[tuple[str, float]]] = {
        "parallel correct": [],
        "parallel wrong": [],
        "control correct": [],
        "control wrong": [],
    }
    for path in paths:
        result = json.loads(path.read_text())
        if result.get("dtype") != "float32":
            continue
        model = path.parent.parent.name
        for phase in result["phases"]:
            if phase["status"] != "ok":
                continue
            wrong = phase["name"].startswith("mutant-")
            side = "wrong" if wrong else "correct"
            label = f"{model}/{phase['name']}"
            if phase["kind"] in PARALLEL and (value := _worst(phase)) is not None:
                groups[f"parallel {side}"].append((label, value))
            control = phase.get("control")
            if control and control.get("status") == "ok":
                value = _worst(control)
                if value is not None:
                    groups[f"control {side}"].append((label, value))
    return groups


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    paths = [Path(p) for p in argv]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"verify_calibration: no such results file: {missing[0]}", file=sys.stderr)
        return 2
    groups = collect(paths)
    from cdit_runtime.contract import Thresholds

    thresholds = Thresholds()
    limits = {
        "parallel": thresholds.parallel_psnr_db_float32,
        "control": thresholds.control_psnr_db_float32,
    }
    for name, samples in groups.items():
        if not samples:
            print(f"{name:18} (none)")
            continue
        pick = min if name.endswith("correct") else max
        label, value = pick(samples, key=lambda item: item[1])
        what = "lowest" if pick is min else "highest"
        print(f"{name:18} n={len(samples):3}  {what} {value:8.2f} dB  ({label})")
        if name.endswith("wrong"):
            for label, value in sorted(samples, key=lambda item: item[1]):
                print(f"{'':22}{value:8.2f} dB  {label}")
    print(
        "(a wrong run at inf dB changed nothing numerically in that phase: e.g. a wrong "
        "has_separate_cfg, whose control is exact and fails on cache-dit's step count)"
    )
    for kind, limit in limits.items():
        correct = [v for _, v in groups[f"{kind} correct"]]
        wrong = [v for _, v in groups[f"{kind} wrong"] if math.isfinite(v)]
        low = min(correct) if correct else math.nan
        high = max(wrong) if wrong else math.nan
        print(
            f"{kind} threshold {limit} dB: {low - limit:+.1f} dB above it for the worst correct "
            f"run, {limit - high:+.1f} dB below it for the best wrong run that differed"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
