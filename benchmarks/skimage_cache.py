"""How DBCache behaves on the bundled trained model, against an untrained copy of it.

    .venv/bin/python benchmarks/skimage_cache.py [--model DIR] [--steps 28] [--device cpu]

For each threshold (DBCache Fn 1, Bn 0, 4 warmup steps): steps cached (cache-dit's own count) and
PSNR / max difference of the image against the same model uncached (same seed, same class). The
untrained copy has the same configuration with freshly initialised weights (seeded). Prints one
JSON line per run, then a table.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

DEFAULT_THRESHOLDS = (0.05, 0.08, 0.12, 0.2, 0.3)


def psnr(a: Any, b: Any) -> float:
    mse = float(((a - b) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def measure(
    pipe: Any, name: str, label: int, steps: int, thresholds: list[float], warmup: int
) -> list[dict[str, Any]]:
    from cdit_runtime.bundled_models import sample_with_cache

    start = time.perf_counter()
    base, _ = sample_with_cache(pipe, label=label, steps=steps, threshold=None)
    uncached_s = time.perf_counter() - start
    rows = []
    for threshold in thresholds:
        start = time.perf_counter()
        image, cached = sample_with_cache(
            pipe, label=label, steps=steps, threshold=threshold, warmup=warmup
        )
        row = {
            "model": name,
            "threshold": threshold,
            "cachedSteps": cached,
            "steps": steps,
            "psnrDb": round(psnr(image, base), 2),
            "maxAbsDiff": round(float(abs(image - base).max()), 4),
            "seconds": round(time.perf_counter() - start, 2),
            "uncachedSeconds": round(uncached_s, 2),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    import torch

    from cdit_runtime.bundled_models import load, untrained_copy
    from cdit_runtime.skimage_pipeline import SkimageClassPipeline

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="a saved pipeline folder")
    parser.add_argument("--steps", type=int, default=28)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--label", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--thresholds", type=float, nargs="+", default=list(DEFAULT_THRESHOLDS))
    args = parser.parse_args(argv)
    if args.model is None:
        pipe = load(device=args.device)
    else:
        pipe = SkimageClassPipeline.from_pretrained(str(args.model), torch_dtype=torch.float32)
        pipe.set_progress_bar_config(disable=True)
        pipe.to(args.device)
    rows = measure(pipe, "trained", args.label, args.steps, args.thresholds, args.warmup)
    rows += measure(
        untrained_copy(pipe), "untrained", args.label, args.steps, args.thresholds, args.warmup
    )
    print("\n| model | threshold | cached / steps | PSNR vs uncached | max abs diff |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['threshold']} | {r['cachedSteps']} / {r['steps']} | "
            f"{r['psnrDb']} dB | {r['maxAbsDiff']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
