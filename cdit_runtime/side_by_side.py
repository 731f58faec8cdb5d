"""The whole matrix in one runtime request versus one invocation per phase, on the same machine.

``python -m cdit_runtime.side_by_side --out DIR --tiny flux1-dev --phases baseline,cache,...``

1. builds the random-weight pipeline once into ``DIR/model`` (``save_pretrained``; not timed
   against either side);
2. runs every phase in one ``python -m cdit_runtime verify`` request (``DIR/matrix``);
3. runs each phase alone, one ``verify`` invocation per phase, each importing and loading the
   model again, which is how engineers run the phases by hand today (``DIR/separate/<phase>``;
   the later ones reuse the separate baseline through ``reference``);
4. writes ``DIR/side_by_side.json`` and ``.md``: wall time of each side, and per phase the
   latency of both with their difference, PSNR/SSIM and peak memory.

Both sides load the model through the local-path code (``--model DIR/model``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .contract import PHASE_KINDS


def _run(cmd: list[str], log: Path) -> tuple[int, float]:
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "wb") as sink:
        code = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, check=False).returncode
    return code, time.perf_counter() - start


def _verify(model: Path, out: Path, phases: str, extra: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "cdit_runtime", "verify", "--model", str(model), "--phases", phases,
        "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


def _phases(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((path / "results.json").read_text())
    except (OSError, ValueError):
        return {}
    return {p["name"]: p for p in data["phases"]}


def _fmt(value: Any, spec: str) -> str:
    if value is None:
        return "-"
    if value == "inf":
        return "inf"
    return format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdit_runtime.side_by_side")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--tiny", default="flux1-dev", help="family to build into OUT/model")
    parser.add_argument("--model", type=Path, help="use this model dir instead of building")
    parser.add_argument("--phases", default="baseline,cache,ulysses,ring,tp,tp_tep,vae_p")
    parser.add_argument("--skip-separate", action="store_true")
    parser.add_argument("--separate-phases", help="run only these alone (default: --phases)")
    args, extra = parser.parse_known_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    kinds = [k for k in args.phases.split(",") if k]
    unknown = [k for k in kinds if k not in PHASE_KINDS]
    if unknown:
        parser.error(f"unknown phases {unknown}")
    summary: dict[str, Any] = {"command": sys.argv, "extra": extra, "phases": kinds}

    model = args.model.resolve() if args.model else out / "model"
    if not args.model:
        build = (
            "from cdit_runtime.tiny_pipelines import ensure_tiny; "
            f"ensure_tiny({args.tiny!r}, {str(model)!r})"
        )
        code, wall = _run([sys.executable, "-c", build], out / "logs" / "build.log")
        summary["build"] = {"exitCode": code, "wallS": wall}
        if code != 0:
            print(f"build failed, see {out / 'logs' / 'build.log'}", file=sys.stderr)
            return 1
        print(f"built {args.tiny} in {wall:.1f} s", file=sys.stderr, flush=True)

    code, wall = _run(
        _verify(model, out / "matrix", ",".join(kinds), extra), out / "logs" / "matrix.log"
    )
    summary["matrix"] = {"exitCode": code, "wallS": wall}
    print(f"matrix: exit {code}, {wall:.1f} s", file=sys.stderr, flush=True)
    _write(out, summary)

    if not args.skip_separate:
        separate: dict[str, Any] = {}
        summary["separate"] = separate
        base = out / "separate" / "baseline"
        alone = [k for k in (args.separate_phases or args.phases).split(",") if k]
        for kind in alone:
            target = out / "separate" / kind
            more = list(extra)
            if kind != "baseline" and "baseline" in alone:
                more += ["--reference", str(base)]
            code, wall = _run(
                _verify(model, target, kind, more), out / "logs" / f"separate-{kind}.log"
            )
            separate[kind] = {"exitCode": code, "wallS": wall}
            print(f"separate {kind}: exit {code}, {wall:.1f} s", file=sys.stderr, flush=True)
            _write(out, summary)
    _write(out, summary)
    return 0


def _write(out: Path, summary: dict[str, Any]) -> None:
    matrix = _phases(out / "matrix")
    rows = []
    for name, phase in matrix.items():
        kind = phase["kind"]
        alone = _phases(out / "separate" / kind).get(name, {})
        lat_m, lat_s = phase.get("latencyS"), alone.get("latencyS")
        delta = (lat_m - lat_s) / lat_s * 100 if lat_m and lat_s else None
        rows.append(
            {
                "phase": name,
                "status": phase["status"],
                "matrixLatencyS": lat_m,
                "separateLatencyS": lat_s,
                "latencyDeltaPct": delta,
                "speedup": phase.get("speedup"),
                "psnrDb": phase.get("psnrDb"),
                "ssim": phase.get("ssim"),
                "separatePsnrDb": alone.get("psnrDb"),
                "separateSsim": alone.get("ssim"),
                "peakMemoryGib": phase.get("peakMemoryGib"),
                "separatePeakMemoryGib": alone.get("peakMemoryGib"),
                "verdict": phase.get("verdict") or (phase.get("error") or {}).get("code"),
                "setupS": phase.get("setupS"),
            }
        )
    summary["rows"] = rows
    sep = summary.get("separate") or {}
    total_sep = sum(v["wallS"] for v in sep.values()) if sep else None
    total_mat = (summary.get("matrix") or {}).get("wallS")
    summary["separateWallS"] = total_sep
    summary["ratio"] = total_mat / total_sep if total_mat and total_sep else None
    (out / "side_by_side.json").write_text(json.dumps(summary, indent=1))
    lines = [
        f"matrix wall {_fmt(total_mat, '.1f')} s; separate invocations "
        f"{_fmt(total_sep, '.1f')} s; ratio {_fmt(summary['ratio'], '.2f')}",
        "",
        "| Phase | Latency (s) | Alone (s) | Δ | Speedup | PSNR (dB) | SSIM | Peak GiB per GPU "
        "| Verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        mem = " / ".join(f"{m:.1f}" for m in r["peakMemoryGib"]) if r["peakMemoryGib"] else "-"
        lines.append(
            f"| {r['phase']} | {_fmt(r['matrixLatencyS'], '.3f')} | "
            f"{_fmt(r['separateLatencyS'], '.3f')} | {_fmt(r['latencyDeltaPct'], '+.1f')}% | "
            f"{_fmt(r['speedup'], '.2f')} | {_fmt(r['psnrDb'], '.2f')} | {_fmt(r['ssim'], '.4f')} "
            f"| {mem} | {r['verdict']} |"
        )
    (out / "side_by_side.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
