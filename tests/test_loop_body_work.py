"""Per-block work around the block call: what changes the carried stream moves into each block's
call (per-block steps); values passed per block through a container that outlives the loop
(feature taps, U-ViT long skips) make caching refused, before anything runs.

Invented fixture: `tests/fixtures/models/third_party/tap_dit.py`. `PosReinjectDiT` runs through
cache-dit with its generated module on CPU: the no-cache control is bit-exact, forced caching
changes the output, and the same module with cache-dit's own functor check restored (the loop body
then runs once, around the wrapper) is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES
from tests.module_loading import load_module
from tests.transformer_cache_runs import generate_standalone, run_cached, run_plain

TAP = FIXTURES / "models" / "third_party" / "tap_dit.py"


def _reasons(cls: str) -> list[dict[str, Any]]:
    (t,) = analyze_path(TAP, cls, registry=False).to_json()["transformers"]
    return t["patchFunctor"]["reasons"]


def test_work_that_changes_the_stream_is_per_block_work() -> None:
    reasons = _reasons("PosReinjectDiT")
    lines = TAP.read_text().splitlines()
    before = lines.index("            x = x + pos") + 1  # before the call
    after = lines.index("            x = x.clamp(-1.5, 1.5)") + 1  # after it
    assert [(r["kind"], r["line"]) for r in reasons] == [
        ("per_block_work", before),
        ("per_block_work", after),
    ]


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        ("TapDiT", [("per_block_state", "`feats.append(x)`", "`feats`")]),
        (
            "LongSkipDiT",
            [
                ("per_block_state", "`skips.append(x)`", "`skips`"),
                # the output blocks only take values (right alone, with Bn_compute_blocks=0)
                ("per_block_exchange", "`x = blk(x, c, skips.pop())`", "`skips`"),
            ],
        ),
    ],
)
def test_values_kept_per_block_refuse_caching(
    cls: str, expected: list[tuple[str, str, str]], tmp_path: Path
) -> None:
    reasons = _reasons(cls)
    assert [r["kind"] for r in reasons] == [kind for kind, _, _ in expected]
    for reason, (_, stmt, container) in zip(reasons, expected, strict=True):
        assert reason["message"].startswith(f"{stmt} passes ")
        assert container in reason["message"]
    result = generate_standalone(TAP, cls, tmp_path)
    (refused,) = [r for r in result["refused"] if r["part"] == "cache"]
    assert "per_block_state" in refused["reasons"][0]
    module = load_module(f"{cls.lower()}_integration", tmp_path / f"{cls.lower()}_integration.py")
    assert "cache" in module.NOT_GENERATED


def test_an_accumulator_rebound_per_block_is_state(tmp_path: Path) -> None:
    source = TAP.read_text().replace(
        "            feats.append(x)\n", "            feats = feats + [x]\n"
    )
    path = tmp_path / "tap_rebound.py"
    path.write_text(source)
    (t,) = analyze_path(path, "TapDiT", registry=False).to_json()["transformers"]
    (reason,) = t["patchFunctor"]["reasons"]
    assert reason["kind"] == "per_block_state" and "`feats`" in reason["message"]


def test_per_block_work_runs_in_each_blocks_call_under_cache_dit(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from cache_dit import PatchFunctor

    result = generate_standalone(TAP, "PosReinjectDiT", tmp_path)
    assert result["refused"] == []
    module = load_module("posreinjectdit_integration", tmp_path / "posreinjectdit_integration.py")
    fixture = load_module("tap_dit", TAP)

    def model() -> Any:
        torch.manual_seed(0)
        return fixture.PosReinjectDiT().eval()

    baseline = run_plain(model())
    control = run_cached(module, model(), 1e-12)  # every block computed through the wrapper
    assert all(torch.equal(c, b) for c, b in zip(control, baseline, strict=True))
    forced = run_cached(module, model(), 1.0)  # steps after the warmup reuse the residual
    assert torch.equal(forced[0], baseline[0])
    assert (forced[-1] - baseline[-1]).abs().max().item() > 1e-3
    # control: without the functor (cache-dit's own check skips it for a class outside
    # diffusers) the loop body runs once around the wrapper: position added and clip once
    # (building the adapter patches the model it is given: ask it with another instance)
    functor = type(module.block_adapter(None, transformer=model()).patch_functor)
    plain = model()
    original = functor.is_from_diffusers
    functor.is_from_diffusers = PatchFunctor.is_from_diffusers  # type: ignore[method-assign]
    try:
        unpatched = run_cached(module, plain, 1e-12)
    finally:
        functor.is_from_diffusers = original  # type: ignore[method-assign]
    assert (unpatched[0] - baseline[0]).abs().max().item() > 1e-3


def test_values_passed_between_blocks_of_one_list_run_in_each_blocks_call(tmp_path: Path) -> None:
    """HunyuanDiT-style long skips inside one list: the steps push and pop; the no-cache control
    is bit-exact, forced caching runs; a config with trailing blocks is refused by `enable()`
    (without that check, two trailing blocks pop values the skipped blocks never pushed)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    kinds = {r["kind"] for r in _reasons("SkipPairsDiT")}
    assert kinds == {"per_block_exchange"}
    assert generate_standalone(TAP, "SkipPairsDiT", tmp_path)["refused"] == []
    path = tmp_path / "skippairsdit_integration.py"
    module = load_module("skippairsdit_integration", path)
    fixture = load_module("tap_dit", TAP)

    def model() -> Any:
        torch.manual_seed(0)
        return fixture.SkipPairsDiT().eval()

    baseline = run_plain(model())
    control = run_cached(module, model(), 1e-12)
    assert all(torch.equal(c, b) for c, b in zip(control, baseline, strict=True))
    forced = run_cached(module, model(), 1.0)
    assert (forced[-1] - baseline[-1]).abs().max().item() > 1e-3
    with pytest.raises(ValueError, match="Bn_compute_blocks must be 0"):
        run_cached(module, model(), 1.0, bn=2)
    unguarded = tmp_path / "unguarded.py"
    code = path.read_text()
    guard = 'if getattr(config, "Bn_compute_blocks", 0):'
    assert guard in code
    unguarded.write_text(code.replace(guard, "if False:"))
    with pytest.raises(IndexError):
        run_cached(load_module("unguarded", unguarded), model(), 1.0, bn=2)


def test_the_checkout_target_says_to_keep_bn_at_zero(tmp_path: Path) -> None:
    """A cache-dit checkout's adapter never sees the cache config, so it cannot refuse
    `Bn_compute_blocks > 0` as the standalone `enable()` does: the generation says so."""
    import importlib.util
    import shutil

    from lsp_server.codegen import build_plan, generate, parse_plan

    spec = importlib.util.find_spec("cache_dit")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("cache-dit is not installed")
    root = tmp_path / "cache-dit"
    shutil.copytree(
        next(iter(spec.submodule_search_locations)),
        root / "src" / "cache_dit",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    analysis = analyze_path(TAP, "SkipPairsDiT", registry=False).to_json()
    answers = {
        "target": {"kind": "cache-dit-checkout", "root": str(root)},
        "model": {"pipelineClass": "SkipPairsPipeline", "defaultModelId": "example/skip-pairs"},
    }
    plan, errors = parse_plan(build_plan(analysis, answers))
    assert plan is not None, errors
    result = generate(plan, manifest_path=tmp_path / ".cdit" / "generated.json").to_json()
    assert not [r for r in result["refused"] if r["part"] == "cache"]
    (warning,) = [w for w in result["warnings"] if "Bn_compute_blocks=0" in w]
    assert warning.startswith("blocks of `blocks` pass values to later blocks")


MOE = FIXTURES / "models" / "third_party" / "moe_dit.py"


def test_a_loss_summed_over_the_blocks_is_per_block_state_not_hoisted() -> None:
    (t,) = analyze_path(MOE, "MoEAuxDiT", registry=False).to_json()["transformers"]
    (reason,) = t["patchFunctor"]["reasons"]
    assert reason["kind"] == "per_block_state"
    assert reason["message"].startswith("`aux = aux + a` passes one value per block through `aux`")


def test_a_dropped_second_output_is_carried_by_pattern_4_and_caching_runs(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    (t,) = analyze_path(MOE, "MoEDiT", registry=False).to_json()["transformers"]
    assert t["blockLists"][0]["forwardPattern"] == "Pattern_4"
    assert not t["patchFunctor"]["needed"]
    assert generate_standalone(MOE, "MoEDiT", tmp_path)["refused"] == []
    module = load_module("moedit_integration", tmp_path / "moedit_integration.py")
    fixture = load_module("moe_dit", MOE)

    def model() -> Any:
        torch.manual_seed(0)
        return fixture.MoEDiT().eval()

    baseline = run_plain(model())
    control = run_cached(module, model(), 1e-12)
    assert all(torch.equal(c, b) for c, b in zip(control, baseline, strict=True))
    forced = run_cached(module, model(), 1.0)
    assert torch.equal(forced[0], baseline[0])
    assert (forced[-1] - baseline[-1]).abs().max().item() > 1e-3
