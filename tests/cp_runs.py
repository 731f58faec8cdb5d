"""Generated CP modules of third-party fixtures run on 2 gloo ranks against one process (the
harness of the red-team tests): the cases to run, with unrouted controls, and each case's
largest difference from the single-process output."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().parent / "redteam_cp_worker.py"
ROUTE = "_route_sdpa(model)"


def routed_cases(
    fixture: Path, classes: Iterable[str], out: Path, unrouted: Iterable[str] = ()
) -> dict[str, dict[str, Any]]:
    """A case per class of `fixture` (its generated standalone module, which must route SDPA)
    and `unrouted <class>` controls: the same module with its route removed."""
    from tests.transformer_cache_runs import generate_standalone

    cases: dict[str, dict[str, Any]] = {}
    for cls in classes:
        generate_standalone(fixture, cls, out)
        module = out / f"{cls.lower()}_integration.py"
        assert ROUTE in module.read_text(), cls
        cases[cls] = {"fixture": str(fixture), "cls": cls, "module": str(module)}
    for cls in unrouted:
        control = out / f"unrouted_{cls}.py"
        control.write_text(Path(cases[cls]["module"]).read_text().replace(ROUTE, "pass"))
        cases[f"unrouted {cls}"] = {**cases[cls], "module": str(control)}
    return cases


def offsets(cases: dict[str, dict[str, Any]], out: Path) -> dict[str, float]:
    """Each case's largest difference from one process (every case must run and keep the
    output's shape)."""
    import torch

    from tests.gloo_launch import run_two_ranks
    from tests.redteam_cp_worker import build, first_tensor

    got = run_two_ranks(WORKER, cases, out)
    found: dict[str, float] = {}
    for name, spec in cases.items():
        model, inputs = build(spec["fixture"], spec["cls"])
        with torch.no_grad():
            baseline = first_tensor(model(**inputs))
        assert isinstance(got[name], torch.Tensor), got[name]
        assert got[name].shape == baseline.shape, (name, got[name].shape)
        found[name] = (got[name] - baseline).abs().max().item()
    return found
