"""The bundled trained model (`skimage-dit`): cache verdicts on it are about quality.

On CPU, at cache-dit's default threshold (0.08; DBCache Fn 1, Bn 0, 4 warmup steps, 28 steps) the
trained model caches at least a quarter of the steps and stays >= 35 dB from its uncached image,
while an untrained copy (same configuration, fresh weights) caches none: the measurement sees the
training, not the plumbing. Also: the pipeline loads through diffusers like any saved pipeline,
and short prompts name classes.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cache_dit")

from cdit_runtime.bundled_models import (  # noqa: E402
    bundled_path,
    load,
    sample_with_cache,
    untrained_copy,
)

STEPS = 28
DEFAULT_THRESHOLD = 0.08  # cache-dit's DBCacheConfig default


def _psnr(a, b) -> float:
    mse = float(((a - b) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


@pytest.fixture(scope="module")
def pipe():
    return load()


def test_the_bundled_folder_is_a_saved_diffusers_pipeline() -> None:
    import json

    index = json.loads((bundled_path() / "model_index.json").read_text())
    assert index["_class_name"] == "SkimageClassPipeline"
    assert index["transformer"] == ["diffusers", "FluxTransformer2DModel"]
    weights = bundled_path() / "transformer" / "diffusion_pytorch_model.safetensors"
    assert weights.stat().st_size < 8 * 2**20  # bfloat16, a few MB


def test_short_prompts_name_classes(pipe) -> None:
    names = pipe.class_names
    assert pipe.labels("a photo of a cat sitting on a red sofa", None, 1) == [
        names.index("chelsea")
    ]
    assert pipe.labels("Rocket", None, 2) == [names.index("rocket")] * 2
    with pytest.raises(ValueError, match="names no class"):
        pipe.labels("a bowl of soup", None, 1)


def test_trained_model_caches_real_steps_and_an_untrained_copy_none(pipe) -> None:
    base, _ = sample_with_cache(pipe, label=0, steps=STEPS, threshold=None)
    image, cached = sample_with_cache(pipe, label=0, steps=STEPS, threshold=DEFAULT_THRESHOLD)
    print(f"trained: {cached}/{STEPS} cached, {_psnr(image, base):.1f} dB")
    assert cached >= STEPS // 4
    assert _psnr(image, base) >= 35.0

    untrained = untrained_copy(pipe)
    base, _ = sample_with_cache(untrained, label=0, steps=STEPS, threshold=None)
    image, cached = sample_with_cache(untrained, label=0, steps=STEPS, threshold=DEFAULT_THRESHOLD)
    assert cached == 0
    assert (image == base).all()


def test_verify_on_the_trained_model_caches_real_steps_at_a_user_threshold(tmp_path) -> None:
    """`verify --tiny skimage-dit` with the generated Flux integration (the demo's): the cache
    phase caches real steps at cache-dit's CLI threshold and passes on quality, its no-cache
    control reproduces the baseline exactly."""
    from lsp_server.analysis import analyze_path
    from lsp_server.codegen import build_plan, generate, parse_plan, write
    from tests.conftest import diffusers_file
    from tests.runtime_cli import assert_documents_valid, db, verify

    analysis = analyze_path(
        diffusers_file("models/transformers/transformer_flux.py"), "FluxTransformer2DModel"
    )
    target = tmp_path / "flux_integration.py"
    plan, errors = parse_plan(
        build_plan(analysis.to_json(), {"target": {"kind": "standalone", "path": str(target)}})
    )
    assert plan is not None, errors
    write(generate(plan, manifest_path=tmp_path / ".cdit" / "generated.json"))
    run = verify(
        tmp_path / "out",
        "--tiny",
        "skimage-dit",
        "--integration",
        str(target),
        "--phases",
        "baseline,cache",
        "--rdt",
        "0.12",
        "--ws",
        "4",
        timeout=600,
    )
    assert run.code == 0, run.stderr[-2000:]
    assert_documents_valid(run)
    cache = run.phase("cache")
    assert cache["verdict"] == "pass", cache["verdictReason"]
    assert cache["cachedSteps"] >= 8 and cache["steps"] == STEPS
    assert 35.0 <= db(cache["psnrDb"]) < math.inf
    assert cache["control"]["verdict"] == "pass" and db(cache["control"]["psnrDb"]) == math.inf
