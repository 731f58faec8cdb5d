"""A generated TP planner and a mutant of it (a control that must fail) on 2 gloo ranks against
one process, for the tests of invented third-party DiTs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().parent / "tp_gloo" / "worker.py"


def planned_and_control(
    source: Path, cls: str, out: Path, line: str, mutated: str
) -> tuple[Any, Any, Any]:
    """(the planned run's output, the control's output or its error text, one process's
    output): the control is the generated planner with `line` replaced by `mutated`."""
    import torch

    from tests.gloo_launch import run_two_ranks
    from tests.tp_gloo.worker import build
    from tests.transformer_cache_runs import generate_standalone

    generate_standalone(source, cls, out)
    planner = out / f"{cls.lower()}_integration.py"
    text = planner.read_text()
    assert line in text, f"{line!r} is not in the generated planner"
    control = out / f"{cls.lower()}_control.py"
    control.write_text(text.replace(line, mutated))
    cases = {
        name: {"file": str(source), "class": cls, "planner": str(path)}
        for name, path in (("planned", planner), ("control", control))
    }
    got = run_two_ranks(WORKER, cases, out)
    model, x = build(str(source), cls)
    with torch.no_grad():
        baseline = model(*x)
    if isinstance(baseline, tuple | list):
        baseline = baseline[0]
    return got["planned"], got["control"], baseline


def assert_exact_and_control_fails(planned: Any, control: Any, baseline: Any) -> None:
    assert (planned - baseline).abs().max().item() < 1e-5
    assert isinstance(control, str) or (control - baseline).abs().max().item() > 1e-3
