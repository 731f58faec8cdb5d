"""Cold and warm analysis time per transformer file of the installed diffusers.

    .venv/bin/python benchmarks/analysis_speed.py [--files GLOB] [--repeat N] [--json OUT]

Cold: the parse cache is emptied before each file (every file the analysis reads is parsed again,
including base classes and block classes in other modules), as a fresh process analysing that one
file. One process: a first pass over the whole set after emptying the cache, as a fresh process
analysing file after file (the CLI over a folder, the language server opening files). Warm: a
further pass with the cache kept. `ast.parse` of the same files is timed in the same run as the
yardstick; the last column is each row's median over its median ("parses per file"), and the
whole set over its whole set. Prints per-file times for the slowest files and the summary the
targets refer to.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from lsp_server.analysis import AnalysisError, analyze_path
from lsp_server.analysis.sources import clear_caches


def _diffusers_root() -> Path:
    spec = importlib.util.find_spec("diffusers")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("diffusers is not installed in this environment")
    return Path(next(iter(spec.submodule_search_locations)))


def _analyze(path: Path) -> str:
    try:
        analyze_path(path, registry=False)
        return "ok"
    except AnalysisError as exc:
        return exc.code


def _summary(times: list[float]) -> dict[str, float]:
    return {
        "median_ms": statistics.median(times) * 1e3,
        "max_ms": max(times) * 1e3,
        "total_s": sum(times),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--files",
        default="models/transformers/*.py",
        help="glob under the diffusers package (default: %(default)s)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="passes per mode; the best pass per file is kept"
    )
    parser.add_argument("--json", dest="json_out", help="also write the numbers as JSON")
    args = parser.parse_args()
    root = _diffusers_root()
    files = sorted(root.glob(args.files))
    if not files:
        sys.exit(f"no files match {args.files} under {root}")

    parse_times = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        start = time.perf_counter()
        ast.parse(text)
        parse_times.append(time.perf_counter() - start)

    cold = {p: float("inf") for p in files}
    first = {p: float("inf") for p in files}
    warm = {p: float("inf") for p in files}
    outcome: dict[Path, str] = {}
    for _ in range(max(1, args.repeat)):
        for path in files:
            clear_caches()
            start = time.perf_counter()
            outcome[path] = _analyze(path)
            cold[path] = min(cold[path], time.perf_counter() - start)
        clear_caches()
        for path in files:  # one process: fills the cache
            start = time.perf_counter()
            _analyze(path)
            first[path] = min(first[path], time.perf_counter() - start)
        for path in files:
            start = time.perf_counter()
            _analyze(path)
            warm[path] = min(warm[path], time.perf_counter() - start)

    print(f"{len(files)} files under {root} ({args.files}); python {platform.python_version()}")
    print(f"{'file':44} {'cold ms':>8} {'warm ms':>8}  result")
    for path in sorted(files, key=lambda p: -cold[p])[:10]:
        print(f"{path.name:44} {cold[path] * 1e3:8.1f} {warm[path] * 1e3:8.1f}  {outcome[path]}")
    rows = {
        "ast.parse only": _summary(parse_times),
        "analysis, cold": _summary(list(cold.values())),
        "analysis, one process": _summary(list(first.values())),
        "analysis, warm": _summary(list(warm.values())),
    }
    parse = rows["ast.parse only"]
    for row in rows.values():
        row["median_parses"] = row["median_ms"] / parse["median_ms"]
        row["set_parses"] = row["total_s"] / parse["total_s"]
    print()
    print(
        f"{'':22} {'median ms':>10} {'max ms':>8} {'whole set s':>12} {'parses (median/set)':>20}"
    )
    for name, row in rows.items():
        parses = f"{row['median_parses']:.1f} / {row['set_parses']:.1f}"
        print(
            f"{name:22} {row['median_ms']:10.1f} {row['max_ms']:8.1f} {row['total_s']:12.2f}"
            f" {parses:>20}"
        )
    recognized = sum(1 for o in outcome.values() if o == "ok")
    print(f"\nrecognized transformers in {recognized}/{len(files)} files")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"files": len(files), **rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
