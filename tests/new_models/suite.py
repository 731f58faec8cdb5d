"""Run one new model end to end with zero edits and report a table row.

analyze (the transformer module with its pipeline) -> ``build_plan`` from the gate-check answers
-> generate a standalone module -> one ``python -m cdit_runtime verify REQUEST.json`` with the
phases baseline, cache (its no-cache control runs automatically), Ulysses-2 (UAA-2 where the
analysis says lengths may not divide), Ring-2 and TP-2; CPU, float32.

    python -m tests.new_models.suite [--workdir DIR] [--checkout] [names...]

prints the table as Markdown (``docs/new-models.md``). Nothing between the steps is edited: a
step that refuses (analysis error, invalid plan, a part the generator refused) is reported as the
row's ``refused`` column, with the reason, and the phases it would have fed are not run.

``--checkout`` also generates the cache-dit checkout target (``checkout.py``: a fresh copy of the
installed cache-dit under ``<workdir>/<model>/checkout/``) from the same analysis and verifies it
with one more request (``integration.kind = "cache-dit-checkout"``), same phases; its outcomes are
a second table (``cache (checkout)``, ...) and its failures join the failures table.
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
from typing import TYPE_CHECKING, Any

from ._common import NewModel
from .models import CHECKS, MODELS

if TYPE_CHECKING:
    from lsp_server.analysis import PipelineCall

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
    # the cache-dit checkout target (``--checkout``); None: not asked for
    checkout: CheckoutRow | None = None

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k not in ("phases", "checkout")}
        data["phases"] = {name: p.__dict__ for name, p in self.phases.items()}
        if self.checkout is not None:
            data["checkout"] = self.checkout.to_json()
        return data


@dataclass
class CheckoutRow:
    """The checkout target of one model: where it is, what generation refused, its phases."""

    root: str = ""  # the checkout (``<root>/src/cache_dit``); empty when generation refused
    register_name: str = ""
    refused: str = ""
    files: list[str] = field(default_factory=list)  # edited / created, relative to ``root``
    review: list[str] = field(default_factory=list)
    phases: dict[str, PhaseOutcome] = field(default_factory=dict)

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


def pipeline_call(model: NewModel, out: Path) -> PipelineCall:
    """How the verification request calls the pipeline (its extra arguments, its guidance
    scale, the inputs it loads from files): `has_separate_cfg` is decided for that call, as the
    gate check's call arguments make the editor's plan."""
    from lsp_server.analysis import PipelineCall

    arguments = dict(model.request.get("extraCallKwargs") or {})
    if model.request.get("guidanceScale") is not None:
        arguments["guidance_scale"] = model.request["guidanceScale"]
    inputs = tuple(model.inputs(out / "inputs")) if model.inputs is not None else ()
    return PipelineCall(arguments, inputs)


def analyze(model: NewModel, out: Path, row: Row) -> dict[str, Any] | None:
    """The analysis JSON (with the built transformer's config.json); None (and
    ``row.refused``) when it refuses or does not report the class."""
    from lsp_server.analysis import analyze_path

    config = out / "model" / "transformer" / "config.json"
    try:
        analysis = analyze_path(
            model.transformer_path,
            model.transformer_class,
            model.pipeline_path,
            config_path=str(config) if config.is_file() else None,
            call=pipeline_call(model, out),
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
    return analysis.to_json()


def generate_integration(
    model: NewModel, out: Path, row: Row, analysis: dict[str, Any] | None = None
) -> Path | None:
    """analyze (with the built transformer's config.json) -> plan -> standalone module; None
    (and ``row.refused``) when a step refuses. ``analysis``: reuse this analysis JSON."""
    from lsp_server.codegen import build_plan, generate, parse_plan, write

    if analysis is None:
        analysis = analyze(model, out, row)
        if analysis is None:
            return None
    target = out / f"{model.name.replace('-', '_')}_integration.py"
    answers = {"target": {"kind": "standalone", "path": str(target)}}
    try:
        plan, errors = parse_plan(build_plan(analysis, answers))
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
    model: NewModel,
    integration: Path,
    out: Path,
    row: Row,
    kinds: Sequence[str] = PHASE_KINDS,
    *,
    checkout: bool = False,
) -> None:
    """One runtime request (the phases of ``kinds``); fills ``row.phases``. ``checkout``:
    ``integration`` is a cache-dit checkout (``integration.kind = "cache-dit-checkout"``); its
    request, ``verify-checkout/`` and outcomes (``row.checkout.phases``) are kept apart."""
    model_dir = out / "model"
    suffix = "-checkout" if checkout else ""
    if checkout and row.checkout is None:
        row.checkout = CheckoutRow(root=str(integration))
    phases_of = row.checkout.phases if checkout and row.checkout is not None else row.phases
    request: dict[str, Any] = {
        "model": {
            "source": "local",
            "path": str(model_dir),
            "sourceFiles": list(model.source_files),
        },
        "outputDir": str(out / f"verify{suffix}"),
        "integration": {
            "kind": "cache-dit-checkout" if checkout else "standalone",
            "path": str(integration),
        },
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
    request_path = out / f"request{suffix}.json"
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
    results = out / f"verify{suffix}" / "results.json"
    if not results.is_file():
        detail = f"exit {proc.returncode}: {_first_line(proc.stderr[-2000:])}"
        phases_of.clear()
        phases_of.update(
            {p["kind"]: PhaseOutcome("failed", None, detail) for p in request["phases"]}
        )
        return
    for phase in json.loads(results.read_text())["phases"]:
        phases_of[phase["name"]] = _outcome(phase)


def run_model(
    model: NewModel, workdir: Path, kinds: Sequence[str] = PHASE_KINDS, checkout: bool = False
) -> Row:
    """analyze -> plan -> generate -> verify for one model; the table row. ``kinds``: the phase
    kinds to run (``baseline`` must stay first; ``ulysses`` runs as UAA where advised).
    ``checkout``: also generate the cache-dit checkout target from the same analysis and verify
    it with the same phases (``row.checkout``)."""
    from .checkout import generate_checkout

    out = workdir / model.name
    out.mkdir(parents=True, exist_ok=True)
    row = Row(model.name, model.kind, model.transformer_class)
    if not (out / "model" / "model_index.json").is_file():
        model.build(out / "model")
    analysis = analyze(model, out, row)
    integration = None if analysis is None else generate_integration(model, out, row, analysis)
    if integration is not None:
        verify(model, integration, out, row, kinds)
    if checkout:
        row.checkout = CheckoutRow()
        if analysis is None:
            row.checkout.refused = row.refused
        else:
            generated = generate_checkout(model, out, analysis)
            row.checkout.register_name = generated.register_name
            row.checkout.refused = generated.refused
            row.checkout.files = generated.files
            row.checkout.review = generated.review
            if generated.root is not None:
                row.checkout.root = str(generated.root)
                verify(model, generated.root, out, row, kinds, checkout=True)
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


def _phase_cell(row: Row, column: str, phases: dict[str, PhaseOutcome] | None = None) -> str:
    phases = row.phases if phases is None else phases
    for name in column.split("|"):
        if name in phases:
            outcome = phases[name]
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


def _differences(row: Row) -> list[str]:
    """The phases whose checkout outcome (status, verdict) differs from the standalone one."""
    assert row.checkout is not None
    names = list(row.phases) + [n for n in row.checkout.phases if n not in row.phases]
    differ = []
    for name in names:
        a, b = row.phases.get(name), row.checkout.phases.get(name)
        if (a and (a.status, a.verdict)) != (b and (b.status, b.verdict)):
            differ.append(name)
    return differ


def checkout_markdown(rows: list[Row]) -> str:
    """The checkout target's table (``--checkout``): one row per model that asked for it."""
    head = ["model", "register name", "refused by generation (checkout)"]
    head += [f"{c.split('|')[0]} (checkout)" for c in PHASE_COLUMNS]
    head.append("same as standalone")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        co = row.checkout
        if co is None:
            continue
        differ = _differences(row)
        cells = [
            row.model,
            f"`{co.register_name}`" if co.register_name else "—",
            _short(co.refused, 120) or "nothing",
            *(_phase_cell(row, c, co.phases) for c in PHASE_COLUMNS),
            "yes" if not differ else "no: " + ", ".join(differ),
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


_CHECKOUT_ANCHORS = {  # phase kind -> what in the checkout it exercises ({name}: register name)
    "cache": r'^@BlockAdapterRegister\.register\("{name}"\)',
    "ulysses": r"^class {name}\w*ContextParallelismPlanner\b",
    "uaa": r"^class {name}\w*ContextParallelismPlanner\b",
    "ring": r"^class {name}\w*ContextParallelismPlanner\b",
    "tp": r"^class {name}\w*TensorParallelismPlanner\b",
}


def checkout_location(row: Row, phase: str) -> str:
    """``<model>/checkout/cache-dit/src/cache_dit/<file>.py:line`` of the generated checkout code
    a phase exercises; the checkout alone when the phase has no anchor."""
    co = row.checkout
    if co is None or not co.root:
        return "—"
    root = Path(co.root)
    shown = f"{row.model}/{root.parent.name}/{root.name}"
    anchor = _CHECKOUT_ANCHORS.get(phase.split("-")[0])
    if anchor is None:
        return shown
    pattern = anchor.replace("{name}", re.escape(co.register_name))
    for rel in co.files:
        for number, line in enumerate((root / rel).read_text().splitlines(), 1):
            if re.search(pattern, line):
                return f"{shown}/{rel}:{number}"
    return shown


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
        co = row.checkout
        if co is not None and co.refused and not co.phases:
            found.append(
                {
                    "model": row.model,
                    "phase": "all (checkout)",
                    "status": "refused",
                    "first_line": co.refused,
                }
            )
        for name, outcome in co.phases.items() if co is not None else ():
            if not outcome.passed:
                found.append(
                    {
                        "model": row.model,
                        "phase": f"{name} (checkout)",
                        "status": outcome.status if outcome.status != "ok" else outcome.verdict,
                        "first_line": outcome.detail,
                        "code": checkout_location(row, name),
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
    parser.add_argument(
        "names",
        nargs="*",
        help=f"models (default: all): {', '.join(MODELS)}; by name only: {', '.join(CHECKS)}",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="kept; default: a temp dir")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument(
        "--phases",
        default=",".join(PHASE_KINDS),
        help=f"comma-separated phase kinds (baseline first; default: {','.join(PHASE_KINDS)})",
    )
    parser.add_argument(
        "--checkout",
        action="store_true",
        help="also generate the cache-dit checkout target (a fresh copy of the installed "
        "cache-dit) and verify it with the same phases",
    )
    args = parser.parse_args(argv)
    known = {**MODELS, **CHECKS}
    unknown = [n for n in args.names if n not in known]
    kinds = [k for k in args.phases.split(",") if k]
    if not kinds or kinds[0] != "baseline" or not set(kinds) <= set(PHASE_KINDS):
        parser.error(f"--phases: baseline first, then any of {', '.join(PHASE_KINDS[1:])}")
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(known)}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="cdit-new-models-"))
    rows = []
    for name in args.names or list(MODELS):
        print(f"[{name}] …", file=sys.stderr, flush=True)
        rows.append(run_model(known[name], workdir, kinds, checkout=args.checkout))
    if args.json:
        args.json.write_text(json.dumps([r.to_json() for r in rows], indent=1))
    print(markdown(rows))
    if args.checkout:
        print("\n" + checkout_markdown(rows))
    print("\n" + failures_markdown(rows))
    print(f"\n(work dir: {workdir})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
