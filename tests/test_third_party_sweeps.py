"""Every invented third-party DiT under `tests/fixtures/models/third_party/` through its generated
standalone module on 2 gloo ranks, against one process: context parallelism under Ulysses and
under Ring for every class with a CP plan, tensor parallelism (the module's own planner) for every
class with a TP plan. A module that refuses the part at `enable()` passes (its reason is the
analysis'); anything that runs must match one process. These sweeps found the silently wrong
classes of `docs/new-models.md`'s thirteenth round (a loop pooling over the tokens, projections
split into groups of heads, ...); here they keep every fixture, old and new, checked together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

THIRD_PARTY = FIXTURES / "models" / "third_party"
HERE = Path(__file__).resolve().parent
REFUSED = "is not part of this integration"
# classes that cannot run here, each with the reason
CANNOT_RUN = {
    "FlashDiT": "calls flash_attn_func with no fallback; flash-attn is not installed",
    "FlashWindowDiT": "calls flash_attn_func with no fallback; flash-attn is not installed",
    "CausalFlagDiT": "is_causal=True stops in cache-dit's attention: reported as a caution",
}
# classes whose CP runs elsewhere, each with the reason (their TP plan is swept here)
CP_ELSEWHERE = {
    "TubeletClipDiT": "5 frames on 2 ranks: plain Ulysses and Ring stop at the call (the count "
    "must divide); its Ulysses Anything run is tests/test_axis_splits.py's",
}


def _classes() -> list[tuple[Path, str, bool, bool]]:
    """(fixture, class, has a CP plan, has a TP plan) of every runnable third-party class."""
    out = []
    for path in sorted(THIRD_PARTY.glob("*.py")):
        if "def example_inputs" not in path.read_text():
            continue
        for t in analyze_path(path, registry=False).to_json()["transformers"]:
            cls = t["className"]
            if cls in CANNOT_RUN:
                continue
            cp = t["contextParallel"]["approach"] not in (None, "none")
            tp = bool((t.get("tensorParallel") or {}).get("layers"))
            if cp or tp:
                out.append((path, cls, cp, tp))
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, str, bool, bool, Path]]:
    pytest.importorskip("cache_dit")
    from tests.transformer_cache_runs import generate_standalone

    out_dir = tmp_path_factory.mktemp("sweep")
    found = []
    for path, cls, cp, tp in _classes():
        generate_standalone(path, cls, out_dir)
        found.append((path, cls, cp, tp, out_dir / f"{cls.lower()}_integration.py"))
    return found


def _verdicts(got: dict[str, Any], baselines: dict[str, Any]) -> list[str]:
    """The cases that ran and did not match one process, or failed without a refusal."""
    import torch

    bad = []
    for name, baseline in baselines.items():
        result = got[name]
        if isinstance(result, str):
            if REFUSED not in result:
                bad.append(f"{name}: {result.strip().splitlines()[-1]}")
            continue
        assert isinstance(result, torch.Tensor)
        if result.shape != baseline.shape:
            bad.append(f"{name}: shape {tuple(result.shape)} for {tuple(baseline.shape)}")
        elif (off := (result - baseline).abs().max().item()) > 1e-4:
            bad.append(f"{name}: {off:.3g} off")
    return bad


def test_every_cp_plan_matches_one_process_under_ulysses_and_ring(
    generated: list[tuple[Path, str, bool, bool, Path]], tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    from tests.gloo_launch import run_two_ranks
    from tests.redteam_cp_worker import build, first_tensor

    cases: dict[str, dict[str, Any]] = {}
    baselines: dict[str, Any] = {}
    for path, cls, cp, _, module in generated:
        if not cp or cls in CP_ELSEWHERE:
            continue
        model, inputs = build(str(path), cls)
        with torch.no_grad():
            baseline = first_tensor(model(**inputs))
        for mode in ("ulysses", "ring"):
            name = f"{cls} {mode}"
            cases[name] = {"fixture": str(path), "cls": cls, "module": str(module)}
            cases[name]["ring"] = mode == "ring"
            baselines[name] = baseline
    assert len(cases) >= 100
    got = run_two_ranks(HERE / "redteam_cp_worker.py", cases, tmp_path, 900)
    assert _verdicts(got, baselines) == []


def test_every_tp_plan_matches_one_process(
    generated: list[tuple[Path, str, bool, bool, Path]], tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    from tests.gloo_launch import run_two_ranks
    from tests.redteam_cp_worker import first_tensor
    from tests.tp_gloo.worker import build

    cases: dict[str, dict[str, Any]] = {}
    baselines: dict[str, Any] = {}
    for path, cls, _, tp, module in generated:
        if not tp:
            continue
        model, x = build(str(path), cls)
        with torch.no_grad():
            out = model(*x)
        cases[cls] = {"file": str(path), "class": cls, "planner": str(module)}
        baselines[cls] = first_tensor(out)
    assert len(cases) >= 90
    got = run_two_ranks(HERE / "tp_gloo" / "worker.py", cases, tmp_path, 900)
    assert _verdicts(got, baselines) == []
