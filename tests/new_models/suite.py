"""Run one new model end to end with zero edits and report a table row.

analyze (the transformer module with its pipeline) -> ``build_plan`` from the gate-check answers
-> generate a standalone module -> one ``python -m cdit_runtime verify REQUEST.json`` with the
phases baseline, cache (its no-cache control runs automatically), Ulysses-2 (UAA-2 where the
analysis says lengths may not divide), Ring-2 and TP-2; CPU, float32.

    python -m tests.new_models.suite [--workdir DIR] [names...]

prints the table as Markdown (``docs/new-models.md``). Nothing between the steps is edited: a
step that refuses (analysis error, invalid plan, a part the generator refused) is reported as the
row's ``refused`` column, with the reason, and the phases it would have fed are not run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._common import NewModel
from .models import MODELS

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 1500
CP_SIZE = 2
PHASE_TIMEOUT_S = 300


@dataclass
class PhaseOutcome:
    """One phase: ``status`` (ok / failed / skipped / timeout / not run), verdict and why."""

    status: str
    verdict: str | None = None
    detail: str = ""  # error code and first line, or the verdict reason (first line)

    @property
    def passed(self) -> bool:
        return self.status == "ok" and self.verdict == "pass"

    def cell(self) -> str:
        if self.status == "ok":
            text = self.verdict or "ok"
            return text if self.passed else f"{text}: {self.detail}"
        return f"{self.status}: {self.detail}" if self.detail else self.status


@dataclass
class Row:
    """The table row of one model."""

    model: str
    kind: str
    transformer_class: str
    block_lists: str = ""
    functor: str = ""
    separate_cfg: str = ""
    cp_approach: str = ""
    uaa: bool = False
    refused: str = ""  # what generation (or analysis / planning) refused, with the reason
    review: list[str] = field(default_factory=list)
    phases: dict[str, PhaseOutcome] = field(default_factory=dict)
    integration: str = ""  # path of the generated module
    review_markers: list[int] = field(default_factory=list)  # lines with CDIT-REVIEW

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "phases"}
        data["phases"] = {name: p.__dict__ for name, p in self.phases.items()}
        return data


def _first_line(text: str, limit: int = 160) -> str:
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _describe_analysis(row: Row, transformer: dict[str, Any]) -> None:
    row.block_lists = ", ".join(
        f"{b['attr']} ({b['forwardPattern'] or 'no pattern'})" for b in transformer["blockLists"]
    )
    functor = transformer["patchFunctor"]
    kinds = sorted({r["kind"] for r in functor["reasons"]})
    row.functor = "yes" if functor["needed"] else "no"
    if kinds:
        row.functor += f" ({', '.join(kinds)})"
    row.separate_cfg = str(transformer["separateCfg"]["value"])
    cp = transformer["contextParallel"]
    row.cp_approach = cp["approach"]
    row.uaa = bool(cp.get("uaaRecommended"))


def generate_integration(model: NewModel, out: Path, row: Row) -> Path | None:
    """analyze (with the built transformer's config.json) -> plan -> standalone module; None
    (and ``row.refused``) when a step refuses."""
    from lsp_server.analysis import analyze_path
    from lsp_server.codegen import build_plan, generate, parse_plan, write

    config = out / "model" / "transformer" / "config.json"
    try:
        analysis = analyze_path(
            model.transformer_path,
            model.transformer_class,
            model.pipeline_path,
            config_path=str(config) if config.is_file() else None,
        )
    except Exception as exc:  # AnalysisError and anything unexpected: the row says why
        message = re.sub(r"\S*/site-packages/", "", _first_line(exc, 400))  # site-packages paths
        row.refused = f"analysis: {message}"
        return None
    transformers = [
        t for t in analysis.to_json()["transformers"] if t["className"] == model.transformer_class
    ]
    if not transformers:
        row.refused = "analysis: class not reported"
        return None
    _describe_analysis(row, transformers[0])
    target = out / f"{model.name.replace('-', '_')}_integration.py"
    answers = {"target": {"kind": "standalone", "path": str(target)}}
    try:
        plan, errors = parse_plan(build_plan(analysis.to_json(), answers))
    except Exception as exc:
        row.refused = f"plan: {_first_line(exc)}"
        return None
    if plan is None:
        row.refused = "plan: " + "; ".join(f"{e.path}: {e.message}" for e in errors)[:300]
        return None
    result = generate(plan, manifest_path=out / ".cdit" / "generated.json")
    refused = result.to_json()["refused"]
    row.refused = "; ".join(
        f"{r['label']}: {_first_line(' / '.join(r['reasons']))}" for r in refused
    )
    row.review = [_first_line(item) for item in result.review]
    if not result.ok:
        errors = result.to_json()["errors"]
        row.refused = (
            (row.refused + "; " if row.refused else "")
            + "generate: "
            + "; ".join(_first_line(e["message"]) for e in errors)
        )
        return None
    write(result)
    row.integration = str(target)
    row.review_markers = [
        i for i, line in enumerate(target.read_text().splitlines(), 1) if "CDIT-REVIEW" in line
    ]
    return target


PHASE_KINDS = ("baseline", "cache", "ulysses", "ring", "tp")


def _phases(row: Row, kinds: Sequence[str]) -> list[dict[str, Any]]:
    """The request's phases; ``ulysses`` becomes ``uaa`` where the analysis advises UAA."""
    phases: list[dict[str, Any]] = []
    for kind in kinds:
        if kind in ("baseline", "cache"):
            phases.append({"kind": kind})
        else:
            cp_kind = "uaa" if kind == "ulysses" and row.uaa else kind
            phases.append({"kind": cp_kind, "size": CP_SIZE})
    return phases


def _outcome(phase: dict[str, Any]) -> PhaseOutcome:
    error = phase.get("error") or {}
    message = _first_line(error.get("message", ""), 400)
    if phase["status"] != "ok":
        refused = (
            error.get("code") == "NOT_GENERATED" or "is not part of this integration" in message
        )
        status = "refused" if refused else phase["status"]
        return PhaseOutcome(status, None, f"{error.get('code', '?')} {message}".strip())
    verdict = phase.get("verdict")
    if verdict == "reference":
        return PhaseOutcome("ok", "pass", "baseline")
    detail = "" if verdict == "pass" else _first_line(phase.get("verdictReason", ""))
    if verdict == "pass" and phase["kind"] == "cache":
        detail = f"{phase.get('cachedSteps')} cached"
    return PhaseOutcome("ok", verdict, detail)


def verify(
    model: NewModel, integration: Path, out: Path, row: Row, kinds: Sequence[str] = PHASE_KINDS
) -> None:
    """One runtime request (the phases of ``kinds``); fills ``row.phases``."""
    model_dir = out / "model"
    request: dict[str, Any] = {
        "model": {
            "source": "local",
            "path": str(model_dir),
            "sourceFiles": list(model.source_files),
        },
        "outputDir": str(out / "verify"),
        "integration": {"kind": "standalone", "path": str(integration)},
        "phases": _phases(row, kinds),
        "cache": {"maxWarmupSteps": 1, "calibrateShare": 0.5},
        "device": "cpu",
        "dtype": "float32",
        "warmup": 0,
        "timeoutS": PHASE_TIMEOUT_S,
        **model.request,
    }
    if model.inputs is not None:
        request["inputs"] = model.inputs(out / "inputs")
    request_path = out / "request.json"
    request_path.write_text(json.dumps(request, indent=1))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "cdit_runtime", "verify", str(request_path), "--quiet"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=REPO,
        env=env,
        check=False,
    )
    results = out / "verify" / "results.json"
    if not results.is_file():
        detail = f"exit {proc.returncode}: {_first_line(proc.stderr[-2000:])}"
        row.phases = {p["kind"]: PhaseOutcome("failed", None, detail) for p in request["phases"]}
        return
    for phase in json.loads(results.read_text())["phases"]:
        row.phases[phase["name"]] = _outcome(phase)


def run_model(model: NewModel, workdir: Path, kinds: Sequence[str] = PHASE_KINDS) -> Row:
    """analyze -> plan -> generate -> verify for one model; the table row. ``kinds``: the phase
    kinds to run (``baseline`` must stay first; ``ulysses`` runs as UAA where advised)."""
    out = workdir / model.name
    out.mkdir(parents=True, exist_ok=True)
    row = Row(model.name, model.kind, model.transformer_class)
    if not (out / "model" / "model_index.json").is_file():
        model.build(out / "model")
    integration = generate_integration(model, out, row)
    if integration is not None:
        verify(model, integration, out, row, kinds)
    (out / "row.json").write_text(json.dumps(row.to_json(), indent=1))
    return row


PHASE_COLUMNS = ("baseline", "cache", "ulysses-2|uaa-2", "ring-2", "tp-2")
_CODE_ANCHORS = {  # phase kind -> what in the generated module it exercises
    "cache": r"^def block_adapter\b",
    "ulysses": r"^def cp_plan\b",
    "uaa": r"^def cp_plan\b",
    "ring": r"^def cp_plan\b",
    "tp": r"^class \w+TensorParallelismPlanner\b",
}


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _phase_cell(row: Row, column: str) -> str:
    for name in column.split("|"):
        if name in row.phases:
            outcome = row.phases[name]
            cell = "pass" if outcome.passed else _short(outcome.cell())
            if outcome.passed and name == "cache":
                cell += f" ({outcome.detail})"
            return f"{cell} (UAA)" if name.startswith("uaa") else cell
    return "not run"


def markdown(rows: list[Row]) -> str:
    """The measured table, one row per model."""
    head = ["model", "kind", "block lists (pattern)", "functor", "sep. CFG", "CP approach"]
    head += ["refused by generation", *(c.split("|")[0] for c in PHASE_COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [
            f"{row.model} (`{row.transformer_class}`)",
            row.kind,
            row.block_lists or "—",
            row.functor or "—",
            row.separate_cfg or "—",
            (row.cp_approach + (", UAA advised" if row.uaa else "")) or "—",
            _short(row.refused, 120) or "nothing",
            *(_phase_cell(row, c) for c in PHASE_COLUMNS),
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def code_location(row: Row, phase: str) -> str:
    """``<model>/<module>.py:line`` (under the work dir) of the generated code a phase exercises;
    the module alone when the phase has no anchor."""
    if not row.integration:
        return "—"
    path = Path(row.integration)
    shown = f"{path.parent.name}/{path.name}"
    pattern = _CODE_ANCHORS.get(phase.split("-")[0])
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if pattern and re.search(pattern, line):
            return f"{shown}:{number}"
    return shown


def failures(rows: list[Row]) -> list[dict[str, str]]:
    """Every phase that did not pass: model, phase, status, first error line, code location."""
    found = []
    for row in rows:
        if row.refused and not row.phases:
            found.append(
                {"model": row.model, "phase": "all", "status": "refused", "first_line": row.refused}
            )
        for name, outcome in row.phases.items():
            if not outcome.passed:
                found.append(
                    {
                        "model": row.model,
                        "phase": name,
                        "status": outcome.status if outcome.status != "ok" else outcome.verdict,
                        "first_line": outcome.detail,
                        "code": code_location(row, name),
                    }
                )
    return found


def failures_markdown(rows: list[Row]) -> str:
    lines = ["| model | phase | status | first error line | generated code |"]
    lines.append("|---|---|---|---|---|")
    for item in failures(rows):
        cells = [item["model"], item["phase"], str(item["status"]), item["first_line"]]
        cells.append(f"`{item.get('code', '—')}`")
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.new_models.suite")
    parser.add_argument("names", nargs="*", help=f"models (default: all): {', '.join(MODELS)}")
    parser.add_argument("--workdir", type=Path, default=None, help="kept; default: a temp dir")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument(
        "--phases",
        default=",".join(PHASE_KINDS),
        help=f"comma-separated phase kinds (baseline first; default: {','.join(PHASE_KINDS)})",
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in MODELS]
    kinds = [k for k in args.phases.split(",") if k]
    if not kinds or kinds[0] != "baseline" or not set(kinds) <= set(PHASE_KINDS):
        parser.error(f"--phases: baseline first, then any of {', '.join(PHASE_KINDS[1:])}")
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="cdit-new-models-"))
    rows = []
    for name in args.names or list(MODELS):
        print(f"[{name}] …", file=sys.stderr, flush=True)
        rows.append(run_model(MODELS[name], workdir, kinds))
    if args.json:
        args.json.write_text(json.dumps([r.to_json() for r in rows], indent=1))
    print(markdown(rows))
    print("\n" + failures_markdown(rows))
    print(f"\n(work dir: {workdir})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
