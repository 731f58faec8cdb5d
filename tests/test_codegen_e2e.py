"""End to end on CPU: analyze -> plan -> generate a standalone module -> import it -> run it.

Six diffusers models (`tests/codegen_fixtures/e2e_models.py`) cover Patterns 0-3, two block
lists (Flux), PatchFunctors (DiT: post-loop block reads; ErnieImage: loop-invariant work
hoisted), separate CFG (Wan, QwenImage: two transformer calls per step) and
`check_forward_pattern=False` (ErnieImage's blocks take `x`). For each generated module:

* caching through its `enable(None, transformer=..., cache_config=...)` caches at least one step
  (and one CFG step where the plan says CFG runs separately) with a permissive threshold, and
  with caching disabled the output equals the uncached baseline exactly;
* its TP planner's `parallelize_transformer` shards only layers that exist on the tiny model
  (`parallelize_module` recorded, not run: TP needs an accelerator);
* for the models whose hook plan needs no processor patch (Flux, Wan, QwenImage), a 2-process
  gloo run through the module's own CP plan matches the single-process output.

The models are built once per test session; all cases share one gloo launch.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
cache_dit = pytest.importorskip("cache_dit")

from module_loading import load_module  # noqa: E402

from lsp_server.analysis import analyze_path  # noqa: E402
from lsp_server.codegen import build_plan, generate, parse_plan, write  # noqa: E402
from tests.gloo_launch import run_two_ranks  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "codegen_fixtures"
STEPS = 4
TOLERANCE = 1e-4
WORKER_TIMEOUT_S = 240


e2e_models = load_module("e2e_models", FIXTURES / "e2e_models.py")
CASE_NAMES = list(e2e_models.CASES)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """case -> (plan, result, path of the generated module); generated once for the module."""
    out = tmp_path_factory.mktemp("standalone")
    made: dict[str, Any] = {}
    started = time.perf_counter()
    for name, case in e2e_models.CASES.items():
        analysis = analyze_path(case.module, case.class_name, case.pipeline, registry=False)
        target = out / f"cdit_{name}.py"
        plan, errors = parse_plan(
            build_plan(analysis.to_json(), {"target": {"kind": "standalone", "path": str(target)}})
        )
        assert plan is not None, errors
        result = generate(plan, manifest_path=out / ".cdit" / "generated.json")
        assert result.ok, result.to_json()
        write(result)
        made[name] = (plan, result, target)
    print(f"analyze+plan+generate of {len(made)} models: {time.perf_counter() - started:.2f}s")
    return made


def _import(name: str, path: Path) -> ModuleType:
    return load_module(f"cdit_generated_{name}", path)


def test_the_cases_cover_patterns_lists_functors_and_cfg(generated: dict[str, Any]) -> None:
    plans = {name: plan for name, (plan, _, _) in generated.items()}
    patterns = {b.forward_pattern for p in plans.values() for b in p.cache.block_lists}
    assert {"Pattern_0", "Pattern_1", "Pattern_2", "Pattern_3"} <= patterns
    assert len(plans["flux"].cache.block_lists) == 2
    assert plans["dit"].cache.patch_functor and plans["ernie"].cache.patch_functor
    assert plans["wan"].cache.has_separate_cfg and plans["qwenimage"].cache.has_separate_cfg
    assert not plans["ernie"].cache.block_lists[0].check_forward_pattern
    assert all(
        b.check_forward_pattern for n in ("flux", "wan", "dit") for b in plans[n].cache.block_lists
    )


def test_generated_modules_expose_the_interface(generated: dict[str, Any]) -> None:
    for name, (plan, _, path) in generated.items():
        module = _import(name, path)
        assert plan.model.transformer_class == module.TRANSFORMER_CLASS
        for attr in ("block_adapter", "cp_plan", "enable"):
            assert callable(getattr(module, attr)), (name, attr)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_cache_runs_and_disabled_output_equals_baseline(
    name: str, generated: dict[str, Any]
) -> None:
    plan, _, path = generated[name]
    case = e2e_models.CASES[name]
    module = _import(name, path)
    model, inputs = case.build()
    with torch.no_grad():
        baseline = e2e_models.output(model(**inputs))

    config = cache_dit.DBCacheConfig(
        num_inference_steps=STEPS,
        Fn_compute_blocks=1,
        Bn_compute_blocks=0,
        residual_diff_threshold=10.0,  # permissive: cache whenever allowed
        max_warmup_steps=0,
    )
    adapter = module.enable(None, transformer=model, cache_config=config)
    assert isinstance(adapter, cache_dit.BlockAdapter)
    separate = plan.cache.has_separate_cfg
    with torch.no_grad():
        for step in range(STEPS):
            step_inputs = {**inputs, "timestep": case.timestep(step)}
            cached = e2e_models.output(model(**step_inputs))
            assert torch.isfinite(cached).all()
            if separate:
                uncond = {**step_inputs, case.text_key: inputs[case.text_key] * 0.5}
                model(**uncond)
    stats = cache_dit.summary(model)
    assert stats and all(s.cached_steps for s in stats), [s.cached_steps for s in stats]
    if separate:
        assert all(s.cfg_cached_steps for s in stats), [s.cfg_cached_steps for s in stats]

    cache_dit.disable_cache(model)
    with torch.no_grad():
        after = e2e_models.output(model(**inputs))
    assert torch.equal(after, baseline), (after - baseline).abs().max()


class _Group:
    def size(self) -> int:
        return 2

    def rank(self) -> int:
        return 0


class _FakeMesh:
    """What the planners read from a device mesh (TP itself needs an accelerator)."""

    def size(self) -> int:
        return 2

    def get_group(self) -> _Group:
        return _Group()


@pytest.mark.parametrize("name", CASE_NAMES)
def test_tp_planner_layer_plan_names_exist_on_the_model(
    name: str, generated: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, _, path = generated[name]
    if not (plan.tensor_parallel.enabled and plan.tensor_parallel.layers):
        pytest.skip("no TP plan")
    module = _import(name, path)
    model, _ = e2e_models.CASES[name].build()
    seen: set[tuple[int, str]] = set()

    def parallelize_module(module: Any, device_mesh: Any, parallelize_plan: dict) -> Any:
        for key in parallelize_plan:
            layer = module.get_submodule(key)  # raises AttributeError for a missing layer
            assert isinstance(layer, torch.nn.Linear), (key, type(layer).__name__)
            seen.add((id(module), key))
        return module

    monkeypatch.setattr(module, "parallelize_module", parallelize_module)
    planner_cls = next(
        v
        for k, v in vars(module).items()
        if k.endswith("TensorParallelismPlanner") and isinstance(v, type) and k[0] != "_"
        if v.__module__ == module.__name__
    )
    _, layer_plans = planner_cls().parallelize_transformer(model, _FakeMesh())
    assert layer_plans and seen
    # every unconditional layer of the plan is sharded in every block of its list
    for key in plan.tensor_parallel.layers:
        head, _, rest = key.partition(".*.")
        if key in plan.tensor_parallel.conditional_layers:
            continue
        for block in model.get_submodule(head):
            assert (id(block), rest) in seen, (key, type(block).__name__)
    # the registration helper puts the planner first, after cache-dit's own activation
    from cache_dit.distributed.transformers.register import TensorParallelismPlannerRegister

    registry = TensorParallelismPlannerRegister._tp_planner_registry
    try:
        module._register_tp_planner()
        assert next(iter(registry)) == plan.model.transformer_class
        assert TensorParallelismPlannerRegister.get_planner(model) is planner_cls
        assert len(registry) > 1  # the built-ins were activated, not skipped
    finally:
        registry.pop(plan.model.transformer_class, None)  # built-ins stay, as in a real process


@pytest.fixture(scope="module")
def gloo_run(generated: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every CP-able case on 2 gloo ranks through its generated module; name -> output or error."""
    out = tmp_path_factory.mktemp("gloo")
    cases = {
        name: str(path)
        for name, (plan, _, path) in generated.items()
        if e2e_models.CASES[name].cp and plan.context_parallel.enabled
    }
    return run_two_ranks(FIXTURES / "gloo_worker.py", cases, out, WORKER_TIMEOUT_S)


CP_CASES = [name for name in CASE_NAMES if e2e_models.CASES[name].cp]


def test_cp_cases_are_the_hook_only_plans(generated: dict[str, Any]) -> None:
    assert CP_CASES == ["flux", "wan", "qwenimage"]
    for name in CP_CASES:
        assert generated[name][0].context_parallel.enabled


@pytest.mark.parametrize("name", CP_CASES)
def test_generated_cp_plan_matches_single_process_on_two_gloo_ranks(
    name: str, gloo_run: dict[str, Any]
) -> None:
    model, inputs = e2e_models.CASES[name].build()
    with torch.no_grad():
        baseline = e2e_models.output(model(**inputs))
    got = gloo_run[name]
    if isinstance(got, str):
        pytest.fail(f"{name}: CP run failed\n{got[-4000:]}")
    assert got.shape == baseline.shape
    assert baseline.abs().max() > 0.1
    diff = (got - baseline).abs().max().item()
    print(f"{name}: max abs diff {diff:.3g}")
    assert diff <= TOLERANCE
