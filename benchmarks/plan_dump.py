"""Dump the parallel plans of every diffusers transformer and every test fixture, to compare an
analysis change before and after.

    .venv/bin/python -m benchmarks.plan_dump /tmp/before.json     # on the old commit
    .venv/bin/python -m benchmarks.plan_dump /tmp/after.json      # on the new one
    .venv/bin/python -m benchmarks.plan_dump --diff /tmp/before.json /tmp/after.json

Per transformer class: the CP approach, plan, warnings and patches, and the TP warnings and
layers (registry facts off). About a minute for the 78 diffusers sources and the fixtures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _sources() -> list[Path]:
    import diffusers

    transformers = Path(diffusers.__file__).parent / "models" / "transformers"
    fixtures = REPO / "tests" / "fixtures" / "models"
    return sorted(transformers.glob("*.py")) + sorted(fixtures.rglob("*.py"))


def dump(out: Path) -> int:
    from lsp_server.analysis import analyze_path

    rows: dict[str, Any] = {}
    for path in _sources():
        try:
            result = analyze_path(path, None, registry=False).to_json()
        except Exception as exc:  # a source the analysis refuses is a row too
            rows[str(path.relative_to(path.parents[1]))] = f"error: {str(exc)[:200]}"
            continue
        for t in result.get("transformers", []):
            cp, tp = t["contextParallel"], t["tensorParallel"]
            rows[f"{path.relative_to(path.parents[1])}::{t.get('className', '?')}"] = {
                "approach": cp["approach"],
                "plan": cp["plan"],
                "cp_warnings": sorted(w["message"] for w in cp["warnings"]),
                "patches": [p["message"] for p in cp["patches"]],
                "tp_warnings": sorted(w["message"] for w in tp["warnings"]),
                "tp_layers": tp.get("layers"),
            }
    out.write_text(json.dumps(rows, indent=1, sort_keys=True))
    print(f"{len(rows)} classes -> {out}")
    return 0


def diff(before: Path, after: Path) -> int:
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    changed = 0
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        changed += 1
        print(f"== {key}")
        if not (isinstance(a, dict) and isinstance(b, dict)):
            print(f"   {str(a)[:200]} -> {str(b)[:200]}")
            continue
        for field in a:
            if a[field] == b.get(field):
                continue
            if isinstance(a[field], list):
                gone = [m[:200] for m in a[field] if m not in b[field]]
                added = [m[:200] for m in b[field] if m not in a[field]]
                print(f"   {field} -{gone} +{added}")
            else:
                print(f"   {field} {json.dumps(a[field])[:200]} -> {json.dumps(b[field])[:200]}")
    print(f"{changed} classes changed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="where to write the dump")
    parser.add_argument("--diff", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.diff:
        missing = [str(p) for p in args.diff if not p.is_file()]
        if missing:
            parser.error(f"no dump at {', '.join(missing)}")
        return diff(*args.diff)
    if args.out is None:
        parser.error("give an output path, or --diff BEFORE AFTER")
    return dump(args.out)


if __name__ == "__main__":
    sys.exit(main())
