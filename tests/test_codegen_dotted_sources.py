"""Sources given as dotted module names are resolved by codegen as the analysis resolves them
(issue 12, class 3).

Gate-check answers in the form of `examples/demo/flux_answers.json` (dotted module names) for
diffusers' DiTTransformer2DModel, whose forward reads `self.transformer_blocks[0]` after the block
loop, so it needs a PatchFunctor with a real copy of that forward. The generated module must hold
the copy and its imports, and run on a tiny model with cache-dit: with caching effectively off it
reproduces the uncached output at every step, and with a permissive threshold it caches steps.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from module_loading import e2e_models, load_module

from lsp_server.cli_generate import run_generate
from lsp_server.codegen import parse_plan
from lsp_server.codegen.source_files import SourceNotFound, source_module, source_path
from lsp_server.services.plan import plan_from_file

DIT = "diffusers.models.transformers.dit_transformer_2d"
DIT_PIPELINE = "diffusers.pipelines.dit.pipeline_dit"
STEPS = 4


def _answers(tmp: Path, transformer: str = DIT) -> Path:
    answers = {
        "model": {
            "transformerClass": "DiTTransformer2DModel",
            "pipelineClass": "DiTPipeline",
            "sources": {"transformer": transformer, "pipeline": DIT_PIPELINE},
        },
        "target": {"kind": "standalone", "path": "generated/cdit_dit.py"},
    }
    path = tmp / "dit_answers.json"
    path.write_text(json.dumps(answers))
    return path


def _load(path: Path) -> ModuleType:
    return load_module(f"cdit_dotted_{abs(hash(path))}", path)


def test_codegen_resolves_sources_with_the_analysis_resolver() -> None:
    from lsp_server.analysis.analyze import resolve_target

    assert source_path(DIT) == resolve_target(DIT)
    assert source_path(DIT).name == "dit_transformer_2d.py"
    assert source_module(DIT) == DIT
    assert source_module(str(source_path(DIT_PIPELINE))) == DIT_PIPELINE
    with pytest.raises(SourceNotFound, match="no such file or importable module"):
        source_path("diffusers.models.transformers.no_such_module")
    with pytest.raises(SourceNotFound, match="no such file"):
        source_path("/no/such/transformer.py")


def test_dotted_answers_generate_the_real_forward_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_from_file(_answers(tmp_path))
    assert plan.model.sources.transformer == DIT  # kept as given
    assert plan.model.transformer_module == DIT  # not a guess from a file name
    assert plan.cache.patch_functor
    assert [r.kind for r in plan.cache.functor_reasons] == ["block_list_access"]

    assert run_generate(str(_answers(tmp_path))) == 0
    err = capsys.readouterr().err
    assert "PatchFunctor" not in err  # no refusal, no "write it by hand"
    text = (tmp_path / "generated" / "cdit_dit.py").read_text()
    assert "def _patched_forward(" in text
    assert "Copy of DiTTransformer2DModel.forward (dit_transformer_2d.py:" in text
    assert 'self._cdit_blocks["transformer_blocks"][0].norm1.emb(' in text
    assert "from diffusers.models.modeling_outputs import Transformer2DModelOutput" in text
    assert "NotImplementedError" not in text.split("def cp_plan")[0]


def test_the_generated_functor_runs_with_cache_dit(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    cache_dit = pytest.importorskip("cache_dit")
    assert run_generate(str(_answers(tmp_path))) == 0
    module = _load(tmp_path / "generated" / "cdit_dit.py")
    e2e = e2e_models()
    case = e2e.CASES["dit"]

    model, inputs = case.build()
    with torch.no_grad():
        baseline = [e2e.output(model(**{**inputs, "timestep": case.timestep(s)})) for s in range(4)]

    def run(threshold: float) -> list[Any]:
        config = cache_dit.DBCacheConfig(
            num_inference_steps=STEPS,
            Fn_compute_blocks=1,
            Bn_compute_blocks=0,
            residual_diff_threshold=threshold,
            max_warmup_steps=0,
        )
        module.enable(None, transformer=model, cache_config=config)
        assert getattr(model, "_is_patched", False)  # the functor was applied
        with torch.no_grad():
            outs = [
                e2e.output(model(**{**inputs, "timestep": case.timestep(s)})) for s in range(STEPS)
            ]
        stats = cache_dit.summary(model)
        cache_dit.disable_cache(model)
        return [outs, stats]

    # caching off (every residual diff is measured and above the threshold): the patched forward
    # and the cached blocks reproduce the uncached model at every step
    control, stats = run(1e-12)
    assert not any(s.cached_steps for s in stats)
    for got, want in zip(control, baseline, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    # a permissive threshold caches steps, through the same functor
    cached, stats = run(10.0)
    assert stats and all(s.cached_steps for s in stats)
    assert all(torch.isfinite(x).all() for x in cached)


def test_an_unresolvable_dotted_source_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _answers(tmp_path, "diffusers.models.transformers.no_such_dit")
    assert run_generate(str(path)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "cdit-integrate: error: model.sources.transformer: diffusers.models.transformers."
        "no_such_dit: no such file or importable module"
    ]


def test_a_functor_whose_source_is_gone_refuses_the_cache_part(tmp_path: Path) -> None:
    plan = plan_from_file(_answers(tmp_path))
    data = plan.to_json()
    data["model"]["sources"]["transformer"] = "diffusers.models.transformers.gone_since"
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(data))
    parsed, _ = parse_plan(data)
    assert parsed is not None and parsed.generates_cache  # known only against the file system
    assert run_generate(str(plan_file)) == 0
    module = _load(tmp_path / "generated" / "cdit_dit.py")
    # the cache part is refused for the missing source; CP does not read it (the processor's
    # SDPA calls are routed by name, independent of the source)
    assert set(module.NOT_GENERATED) == {"cache"}
    assert "gone_since: no such file or importable module" in module.NOT_GENERATED["cache"]
    with pytest.raises(NotImplementedError, match="PatchFunctor needs the transformer source"):
        module.block_adapter(None, transformer=object())
