"""Plan parts are validated and generated independently (issue 12, class 9).

A real plan (diffusers Flux, analyzed from dotted module names) is mutated: an invalid TP layer
key refuses tensor parallelism only, with its reason, while the cache and CP parts are still
generated and run; a disabled part is neither validated nor emitted; a plan with nothing left
to generate is one clear error; `generate --print-plan` prints the built plan and writes nothing.
The generated modules are imported and run on a tiny random-weight Flux on CPU.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from module_loading import e2e_models, load_module

from lsp_server.analysis import analyze_path
from lsp_server.cli_generate import run_generate
from lsp_server.codegen import build_plan, generate, parse_plan, write

FLUX = "diffusers.models.transformers.transformer_flux"
FLUX_PIPELINE = "diffusers.pipelines.flux.pipeline_flux"
BAD_KEYS = {
    "transformer_blocks.0.attn.to_q": "colwise",  # an index instead of `*`
    "proj_out": "rowwise",  # a layer of the transformer itself, not of a block list
}


@pytest.fixture(scope="module")
def flux_plan() -> dict[str, Any]:
    """The Flux plan document built from the analysis (standalone target filled in per test)."""
    analysis = analyze_path(FLUX, "FluxTransformer2DModel", FLUX_PIPELINE, registry=False)
    answers = {"target": {"kind": "standalone", "path": "/unused/cdit_flux.py"}}
    return build_plan(analysis.to_json(), answers)


def _plan(data: dict[str, Any], tmp: Path, name: str = "cdit_flux") -> dict[str, Any]:
    data = copy.deepcopy(data)
    data["target"] = {"kind": "standalone", "path": str(tmp / f"{name}.py")}
    return data


def _generate(data: dict[str, Any], tmp: Path) -> Any:
    plan, errors = parse_plan(data)
    assert plan is not None, errors
    result = generate(plan, manifest_path=tmp / ".cdit" / "generated.json")
    assert result.ok, result.to_json()
    write(result)
    return result


def _load(path: Path) -> ModuleType:
    return load_module(f"cdit_parts_{path.stem}_{abs(hash(path))}", path)


def test_the_real_plan_is_complete(flux_plan: dict[str, Any]) -> None:
    plan, errors = parse_plan(_plan(flux_plan, Path("/p")))
    assert plan is not None, errors
    assert plan.refused == {}
    assert plan.generates_cache and plan.generates_cp and plan.generates_tp


@pytest.mark.parametrize("bad_key", sorted(BAD_KEYS))
def test_a_bad_tp_key_refuses_tp_only(
    bad_key: str, flux_plan: dict[str, Any], tmp_path: Path
) -> None:
    data = _plan(flux_plan, tmp_path)
    data["tensorParallel"]["layers"][bad_key] = BAD_KEYS[bad_key]
    plan, errors = parse_plan(data)
    assert plan is not None and errors == []
    assert set(plan.refused) == {"tensorParallel"}
    (reason,) = plan.refused["tensorParallel"]
    assert reason.startswith(f"tensorParallel.layers[{bad_key!r}]: layer key must look like")
    assert plan.generates_cache and plan.generates_cp and not plan.generates_tp

    result = _generate(data, tmp_path)
    assert result.refused == {"tensorParallel": (reason,)}
    assert result.warnings[0] == f"tensor parallelism not generated: {reason}"
    assert result.to_json()["refused"] == [
        {"part": "tensorParallel", "label": "tensor parallelism", "reasons": [reason]}
    ]
    text = (tmp_path / "cdit_flux.py").read_text()
    assert "TensorParallelismPlanner" not in text and "parallelize_module" not in text
    module = _load(tmp_path / "cdit_flux.py")
    assert {"tensorParallel": f"refused: {reason}"} == module.NOT_GENERATED


def test_bad_tp_entries_beside_the_layers_refuse_tp(
    flux_plan: dict[str, Any], tmp_path: Path
) -> None:
    data = _plan(flux_plan, tmp_path)
    tp = data["tensorParallel"]
    # no `*` (not per block), and an index where an attribute name belongs
    tp["shardDivAttrs"] = [*tp["shardDivAttrs"], "transformer_blocks.heads", "norm.*.3"]
    tp["conditionalLayers"] = {"single_transformer_blocks.*.nope": "never"}
    tp["distributedNorms"] = ["norm_out"]
    plan, _ = parse_plan(data)
    assert plan is not None
    reasons = plan.refused["tensorParallel"]
    bad_attrs = [r for r in reasons if r.startswith("tensorParallel.shardDivAttrs[")]
    assert len(bad_attrs) == 2, reasons
    assert any("conditionalLayers['single_transformer_blocks.*.nope']" in r for r in reasons)
    assert any(r.startswith("tensorParallel.distributedNorms[0]: 'norm_out'") for r in reasons)
    assert set(plan.refused) == {"tensorParallel"}


def test_cache_and_cp_still_run_when_tp_is_refused(
    flux_plan: dict[str, Any], tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    cache_dit = pytest.importorskip("cache_dit")
    data = _plan(flux_plan, tmp_path)
    data["tensorParallel"]["layers"]["proj_out"] = "rowwise"
    _generate(data, tmp_path)
    module = _load(tmp_path / "cdit_flux.py")
    e2e = e2e_models()

    model, inputs = e2e.build_flux()
    # the CP part: a real hook plan for this model (every key names a submodule)
    plan = module.cp_plan(model)
    assert plan and all(key == "" or model.get_submodule(key) is not None for key in plan)
    # TP asked for: refused with the reason, before anything is changed
    with pytest.raises(NotImplementedError, match="layer key must look like"):
        module.enable(None, transformer=model, parallelism_config=_TpOnly())
    assert not hasattr(model, "_context_kwargs")

    with torch.no_grad():
        baseline = e2e.output(model(**inputs))
    control = cache_dit.DBCacheConfig(
        num_inference_steps=3,
        Fn_compute_blocks=1,
        Bn_compute_blocks=0,
        residual_diff_threshold=1e-12,  # measured, never below: every block runs
        max_warmup_steps=0,
    )
    module.enable(None, transformer=model, cache_config=control)
    with torch.no_grad():
        for _ in range(3):  # float32 rounding only (a wrong integration is off by >1e-2)
            torch.testing.assert_close(e2e.output(model(**inputs)), baseline, rtol=0, atol=1e-5)
    cache_dit.disable_cache(model)

    cached = cache_dit.DBCacheConfig(
        num_inference_steps=3,
        Fn_compute_blocks=1,
        Bn_compute_blocks=0,
        residual_diff_threshold=10.0,  # permissive: cache whenever allowed
        max_warmup_steps=0,
    )
    module.enable(None, transformer=model, cache_config=cached)
    with torch.no_grad():
        for _ in range(3):
            assert torch.isfinite(e2e.output(model(**inputs))).all()
    stats = cache_dit.summary(model)
    assert stats and all(s.cached_steps for s in stats)
    cache_dit.disable_cache(model)


class _TpOnly:
    """What `enable` reads from a ParallelismConfig that asks for TP only."""

    cp_plan = None

    def cp_enabled(self) -> bool:
        return False

    def tp_enabled(self) -> bool:
        return True


def test_disabled_tp_is_neither_validated_nor_emitted(
    flux_plan: dict[str, Any], tmp_path: Path
) -> None:
    data = _plan(flux_plan, tmp_path)
    data["tensorParallel"]["layers"].update(BAD_KEYS)
    data["tensorParallel"]["enabled"] = False
    plan, errors = parse_plan(data)
    assert plan is not None and errors == [] and plan.refused == {}
    result = _generate(data, tmp_path)
    assert not any("tensor" in w for w in result.warnings)
    text = (tmp_path / "cdit_flux.py").read_text()
    assert "TensorParallelismPlanner" not in text
    module = _load(tmp_path / "cdit_flux.py")
    assert module.NOT_GENERATED == {"tensorParallel": "disabled in the plan"}
    with pytest.raises(NotImplementedError, match="tensor parallelism is not part of this"):
        module.enable(None, transformer=_NoModel(), parallelism_config=_TpOnly())


class _NoModel:
    """A transformer stand-in for calls that must fail before touching it."""


def test_disabled_and_refused_cp(flux_plan: dict[str, Any], tmp_path: Path) -> None:
    data = _plan(flux_plan, tmp_path)
    data["contextParallel"]["enabled"] = False
    data["contextParallel"]["plan"]["x.*.*"] = {"gather_dim": "one"}  # not validated: disabled
    result = _generate(data, tmp_path)
    assert result.refused == {}
    module = _load(tmp_path / "cdit_flux.py")
    with pytest.raises(NotImplementedError, match="disabled in the plan"):
        module.cp_plan(_NoModel())

    data["contextParallel"]["enabled"] = True
    plan, _ = parse_plan(data)
    assert plan is not None and set(plan.refused) == {"contextParallel"}
    assert "module key may contain at most one" in " ".join(plan.refused["contextParallel"])
    assert plan.generates_cache and plan.generates_tp


def test_disabled_cache_keeps_the_parallel_parts(flux_plan: dict[str, Any], tmp_path: Path) -> None:
    pytest.importorskip("cache_dit")
    data = _plan(flux_plan, tmp_path)
    data["cache"] = {"enabled": False}  # no block lists: not validated
    result = _generate(data, tmp_path)
    assert result.refused == {}
    module = _load(tmp_path / "cdit_flux.py")
    assert module.NOT_GENERATED == {"cache": "disabled in the plan"}
    text = (tmp_path / "cdit_flux.py").read_text()
    assert "BlockAdapter(" not in text and "TensorParallelismPlanner" in text
    with pytest.raises(NotImplementedError, match="cache is not part of this integration"):
        module.block_adapter(None, transformer=_NoModel())
    with pytest.raises(NotImplementedError, match="cache is not part of this integration"):
        module.enable(None, transformer=_NoModel(), cache_config=object())
    model, _ = e2e_models().build_flux()
    assert module.cp_plan(model)


def test_a_refused_component_leaves_the_rest_of_a_checkout(tmp_path: Path) -> None:
    from tests.test_codegen_codemods import BEFORE, _materialize, _plan_json

    _materialize(BEFORE, tmp_path / "cache-dit")
    data = _plan_json(tmp_path, "checkout")
    data["components"][0]["class"] = "not a class"
    data["components"][1]["source"] = str(tmp_path / "missing_vae.py")
    plan, errors = parse_plan(data)
    assert plan is not None, errors
    assert set(plan.refused) == {"components[0]"}
    result = generate(plan, manifest_path=tmp_path / ".cdit" / "generated.json")
    assert result.ok, result.to_json()
    assert set(result.refused) == {"components[0]", "components[1]"}
    assert "no such file" in result.refused["components[1]"][0].lower()
    names = {c.path.name for c in result.edits.changes}
    assert "adapters.py" in names and "toy.py" in names  # cache, CP and TP
    assert not {"toy_text_encoder_model.py", "autoencoder_kl_toy.py"} & names
    labels = [w.split(" not generated: ")[0] for w in result.warnings if "not generated" in w]
    assert labels == [
        "text-encoder TP for not a class (text_encoder)",
        "VAE-P for AutoencoderKLToy (vae)",
    ]


def test_nothing_to_generate_is_one_error(
    flux_plan: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _plan(flux_plan, tmp_path)
    data["cache"]["blockLists"][0]["forwardPattern"] = "Pattern_9"
    data["contextParallel"]["enabled"] = False
    data["tensorParallel"]["layers"]["proj_out"] = "rowwise"
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(data))
    assert run_generate(str(plan_file)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("cdit-integrate: error: <plan>: nothing to generate (cache: refused:")
    assert "context parallelism: disabled in the plan" in err[0]
    assert "tensor parallelism: refused: tensorParallel.layers['proj_out']" in err[0]
    assert not (tmp_path / "cdit_flux.py").exists()


def test_print_plan_prints_the_built_plan_and_writes_nothing(
    flux_plan: dict[str, Any], tmp_path: Path
) -> None:
    from lsp_server.cli import main

    answers = {
        "model": {
            "transformerClass": "FluxTransformer2DModel",
            "pipelineClass": "FluxPipeline",
            "sources": {"transformer": FLUX, "pipeline": FLUX_PIPELINE},
        },
        "target": {"kind": "standalone", "path": "out/cdit_flux.py"},
        "tensorParallel": {"enabled": False},
    }
    plan_file = tmp_path / "answers.json"
    plan_file.write_text(json.dumps(answers))
    out, err = io.StringIO(), io.StringIO()
    assert run_generate(str(plan_file), print_plan=True, out=out, err=err) == 0
    printed = json.loads(out.getvalue())
    plan, errors = parse_plan(printed)
    assert plan is not None, errors
    assert printed["model"]["transformerModule"] == FLUX
    assert printed["target"]["path"] == str((tmp_path / "out" / "cdit_flux.py").resolve())
    assert [b["attr"] for b in printed["cache"]["blockLists"]] == [
        "transformer_blocks",
        "single_transformer_blocks",
    ]
    assert printed["tensorParallel"]["enabled"] is False and printed["refused"] == []
    assert not (tmp_path / "out").exists() and not (tmp_path / ".cdit").exists()

    data = _plan(flux_plan, tmp_path)
    data["tensorParallel"]["layers"]["proj_out"] = "rowwise"
    plan_file.write_text(json.dumps(data))
    assert main(["generate", str(plan_file), "--print-plan"]) == 0
    assert not (tmp_path / "cdit_flux.py").exists()


def test_print_plan_of_a_bad_plan_is_an_error(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"schemaVersion": 1, "model": {}, "cache": {}}))
    out, err = io.StringIO(), io.StringIO()
    assert run_generate(str(plan_file), print_plan=True, out=out, err=err) == 2
    assert out.getvalue() == ""
    assert "model.transformerClass: is required" in err.getvalue()


def _zephyr(tmp_path: Path) -> tuple[Any, ModuleType]:
    source = Path(__file__).parent / "fixtures" / "models" / "zephyr_control_video.py"
    analysis = analyze_path(source, None, None, registry=False)
    answers = {"target": {"kind": "standalone", "path": str(tmp_path / "cdit_zephyr.py")}}
    plan, errors = parse_plan(build_plan(analysis.to_json(), answers))
    assert plan is not None, errors
    result = generate(plan, manifest_path=tmp_path / ".cdit" / "generated.json")
    assert result.ok and plan.generates_cache, result.to_json()
    write(result)
    return result, load_module(f"cdit_zephyr_{abs(hash(tmp_path))}", tmp_path / "cdit_zephyr.py")


def _zephyr_model() -> tuple[Any, dict[str, Any]]:
    import torch

    fixture = load_module(
        "zephyr_control_video",
        Path(__file__).parent / "fixtures" / "models" / "zephyr_control_video.py",
    )
    torch.manual_seed(0)
    model = fixture.ZephyrControlTransformer3DModel(
        num_attention_heads=4, attention_head_dim=8, in_channels=4, control_in_channels=6,
        text_dim=24, num_layers=4, control_layers=(0, 2),
    ).eval()  # fmt: skip
    g = torch.Generator().manual_seed(1)
    inputs = {
        "hidden_states": torch.randn(1, 4, 3, 8, 8, generator=g),
        "timestep": torch.tensor([500]),
        "encoder_hidden_states": torch.randn(1, 5, 24, generator=g),
        "control_hidden_states": torch.randn(1, 6, 3, 8, 8, generator=g),
    }
    return model, inputs


def test_index_dependent_loop_work_runs_inside_each_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Zephyr adds a control hint after some blocks (`hints[hint_index[i]]`): the loop becomes a
    clean call and each block's step adds its own hint. Through cache-dit's cached-blocks wrapper
    (which calls every block with the first call's arguments) with caching effectively off, the
    output equals the model's; had the hint stayed in the loop, it would be added once."""
    import cache_dit
    import torch
    from cache_dit import PatchFunctor
    from cache_dit.envs import ENV

    # the fixture lives outside the diffusers package, where cache-dit skips PatchFunctors
    # unless its environment switch is set (read once, at import): the generated functor says
    # it applies to this class, so the switch stays off
    monkeypatch.setattr(ENV, "CACHE_DIT_PATCH_FUNCTOR_DISABLE_DIFFUSERS_CHECK", False)
    result, module = _zephyr(tmp_path)
    assert any("moved into _blocks_step" in a for a in result.applied)
    assert "CDIT-REVIEW" not in (tmp_path / "cdit_zephyr.py").read_text()
    model, inputs = _zephyr_model()
    with torch.no_grad():
        baseline = model(**inputs).sample
    config = cache_dit.DBCacheConfig(
        num_inference_steps=3,
        Fn_compute_blocks=1,
        Bn_compute_blocks=0,
        residual_diff_threshold=1e-12,  # every block computed, through cache-dit's wrapper
        max_warmup_steps=0,
    )
    module.enable(None, transformer=model, cache_config=config)
    with torch.no_grad():
        diffs = [(model(**inputs).sample - baseline).abs().max().item() for _ in range(3)]
    cache_dit.disable_cache(model)
    # the first call computes every block; later ones may reuse the identical residual
    assert diffs[0] == 0.0 and max(diffs) < 1e-5, diffs

    # control: the same module with cache-dit's own check (its default for classes outside
    # diffusers skips the functor) leaves the hint in the loop, where the wrapper runs it once
    functor = type(module.block_adapter(None, transformer=model).patch_functor)
    monkeypatch.setattr(functor, "is_from_diffusers", PatchFunctor.is_from_diffusers)
    model, inputs = _zephyr_model()
    module.enable(None, transformer=model, cache_config=config)
    with torch.no_grad():
        wrong = (model(**inputs).sample - baseline).abs().max().item()
    cache_dit.disable_cache(model)
    assert wrong > 0.1, wrong


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("dtensorUnsafe", ["FluxSingleTransformerBlock runs a triton kernel"], "takes no DTensor"),
        (
            "weightRearrangement",
            [
                {
                    "layer": "single_transformer_blocks.*.proj_mlp",
                    "kind": "fused_qkv_mlp",
                    "reason": "packs q/k/v and an MLP branch",
                }
            ],
            "needs a weight rearrangement that is not generated",
        ),
    ],
)
def test_what_the_tp_planner_cannot_write_refuses_tp(
    flux_plan: dict[str, Any], tmp_path: Path, field: str, value: Any, reason: str
) -> None:
    data = _plan(flux_plan, tmp_path)
    data["tensorParallel"][field] = value
    plan, errors = parse_plan(data)
    assert plan is not None, errors
    assert not plan.generates_tp and plan.generates_cache
    assert any(reason in r for r in plan.refused["tensorParallel"])
