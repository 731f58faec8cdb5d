"""Verdicts that rest on controls: dtype-aware thresholds, final latents, the no-cache control,
threshold calibration and cache statistics (pure functions; no pipeline runs here)."""

from __future__ import annotations

import math

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("skimage")

from cdit_runtime.cache_stats import _measured, calibrate, warmup_steps  # noqa: E402
from cdit_runtime.contract import CacheOptions, Thresholds  # noqa: E402
from cdit_runtime.metrics import (  # noqa: E402
    Comparison,
    LatentComparison,
    compare_latents,
    control_verdict,
    verdict,
)

T = Thresholds()


def test_float32_parallel_phases_must_be_near_exact() -> None:
    # 39.8 dB: a CP plan that split RoPE on the wrong axis was seen passing the bf16 threshold.
    wrong = Comparison(psnr_db=39.8, ssim=0.995)
    assert verdict("ulysses", wrong, T, dtype="bfloat16")[0] == "pass"
    name, reason = verdict("ulysses", wrong, T, dtype="float32")
    assert name == "fail" and f"<= {T.parallel_psnr_db_float32}" in reason
    exact = Comparison(psnr_db=137.9, ssim=1.0)
    assert verdict("ulysses", exact, T, dtype="float32")[0] == "pass"


def test_latents_decide_when_the_decoder_hides_a_difference() -> None:
    # A decoder whose output ignores its input: identical images, different latents.
    images = Comparison(psnr_db=math.inf, ssim=1.0)
    latents = LatentComparison(psnr_db=31.0, max_abs_diff=0.4)
    name, reason = verdict("ulysses", images, T, dtype="float32", latents=latents)
    assert name == "fail" and "latent PSNR 31.00 dB" in reason
    assert verdict("ulysses", images, T, dtype="float32")[0] == "pass"


def test_latents_alone_when_the_output_is_unknown() -> None:
    good = LatentComparison(psnr_db=150.0, max_abs_diff=1e-7)
    assert verdict("tp", None, T, dtype="float32", latents=good)[0] == "pass"
    bad = LatentComparison(psnr_db=20.0, max_abs_diff=1.0)
    assert verdict("tp", None, T, dtype="float32", latents=bad)[0] == "fail"
    with pytest.raises(ValueError):
        verdict("tp", None, T)


def test_cache_threshold_does_not_depend_on_dtype() -> None:
    c = Comparison(psnr_db=33.0, ssim=0.98)
    assert verdict("cache", c, T, dtype="float32")[0] == "pass"
    assert verdict("cache", c, T, dtype="float32", latents=LatentComparison(27.0, 0.3))[0] == "warn"


def test_compare_latents_uses_the_reference_range() -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
    noise = rng.standard_normal(ref.shape) * 1e-3
    got = compare_latents(ref, ref + noise)
    peak = float(ref.max() - ref.min())
    expected = 10 * math.log10(peak**2 / float(np.mean(noise**2)))
    assert got.psnr_db == pytest.approx(expected, rel=1e-6)
    assert got.max_abs_diff == pytest.approx(float(np.abs(noise).max()), rel=1e-5)
    assert compare_latents(ref, ref).psnr_db == math.inf
    with pytest.raises(ValueError):
        compare_latents(ref, ref[..., :4])


def _control(**kwargs: object) -> tuple[str, str]:
    defaults: dict[str, object] = {
        "cached_steps": 0,
        "counted_steps": 6,
        "denoise_steps": 6,
    }
    defaults.update(kwargs)
    comparison = defaults.pop("comparison", Comparison(psnr_db=math.inf, ssim=1.0))
    latents = defaults.pop("latents", LatentComparison(math.inf, 0.0))
    dtype = str(defaults.pop("dtype", "float32"))
    return control_verdict(comparison, latents, T, dtype, **defaults)  # type: ignore[arg-type]


def test_control_passes_only_when_it_reproduces_the_baseline() -> None:
    assert _control()[0] == "pass"
    # A PatchFunctor that applied one layer's mask to every layer: 33 dB with nothing cached.
    name, reason = _control(comparison=Comparison(psnr_db=33.0, ssim=0.97))
    assert name == "fail" and "changes the math" in reason
    name, reason = _control(latents=LatentComparison(60.0, 1e-3))
    assert name == "fail" and "latent PSNR 60.00" in reason
    # bfloat16 allows kernel-level differences, not a changed computation.
    assert _control(dtype="bfloat16", comparison=Comparison(psnr_db=50.0, ssim=0.999))[0] == "pass"
    assert _control(dtype="bfloat16", comparison=Comparison(psnr_db=40.0, ssim=0.99))[0] == "fail"


def test_a_failing_control_is_read_against_the_pipelines_own_rerun() -> None:
    below = Comparison(psnr_db=38.46, ssim=0.98)
    # a bit-identical rerun: the difference is the integration's
    name, reason = _control(comparison=below, rerun_floor=math.inf)
    assert name == "fail" and "changes the math: a rerun of the pipeline is bit-identical" in reason
    # NucleusMoE on one H200: a plain rerun read 38.48 dB, the control 38.46 dB
    name, reason = _control(comparison=below, rerun_floor=38.48)
    assert name == "fail"  # never a pass: the control proves nothing on this device
    assert "at the pipeline's own rerun floor" in reason and "--deterministic" in reason
    # far below the floor: still the integration's doing
    name, reason = _control(comparison=Comparison(psnr_db=20.0, ssim=0.5), rerun_floor=38.48)
    assert "changes the math: below the pipeline's own rerun floor of 38.48 dB" in reason
    # a control above the floor but below the threshold is at the floor too
    assert "rerun floor" in _control(comparison=Comparison(45.0, 0.99), rerun_floor=38.48)[1]
    # no rerun measured (a reference run's baseline, warmup 0): as before
    assert _control(comparison=below)[1].endswith("(the integration changes the math)")


def test_control_catches_a_wrong_separate_cfg_by_the_step_count() -> None:
    name, reason = _control(counted_steps=3, denoise_steps=6, transformer_calls=6)
    assert name == "fail"
    assert "counted 3 denoising steps" in reason and "6 transformer calls, 1 per step" in reason
    name, _ = _control(counted_steps=12, denoise_steps=6, transformer_calls=12)
    assert name == "fail"
    assert _control(counted_steps=None)[0] == "pass"  # no cached list counted: nothing to check


def test_control_that_cached_is_a_failure() -> None:
    name, reason = _control(cached_steps=2)
    assert name == "fail" and "2 step(s) were cached" in reason


def test_measured_diffs_drop_cache_dit_sentinels() -> None:
    diffs, forced, reshaped = _measured({"1": -1.0, "2": -1.0})
    assert diffs == {} and forced and reshaped == []
    diffs, forced, reshaped = _measured({"1": -0.0, "2": -2.0, "3": 0.25, "4": [0.5, 0.7]})
    assert diffs == {"3": 0.25, "4": 0.5} and not forced
    assert reshaped == [2]  # a shape mismatch is kept: forced caching must compute that step


def _stats(*lists: dict[str, float]) -> list[dict[str, object]]:
    return [{"blocks": f"l{i}", "cachedSteps": [], "residualDiffs": d} for i, d in enumerate(lists)]


def test_calibration_picks_a_threshold_between_measured_diffs() -> None:
    options = CacheOptions(max_warmup_steps=1)
    diffs = {"1": 0.6, "2": 0.4, "3": 0.5, "4": 0.9, "5": 0.7}
    doc = calibrate(_stats(diffs), options, steps=6, share=0.5)
    # k = 3 steps: the three smallest eligible diffs (0.4, 0.5, 0.6) lie below it, 0.7 does not.
    assert doc["threshold"] == pytest.approx(0.65)
    assert doc["eligibleSteps"] == [1, 2, 3, 4, 5]
    # Every list must agree: the per-step maximum counts.
    doc = calibrate(_stats(diffs, {"1": 0.95, "2": 0.1}), options, steps=6, share=0.2)
    assert doc["probeDiffs"]["1"] == 0.95 and doc["threshold"] == pytest.approx(0.45)


def test_calibration_explains_why_it_cannot() -> None:
    doc = calibrate(_stats({"1": 0.3, "2": 0.3}), CacheOptions(max_warmup_steps=8), 3, 0.5)
    assert doc["threshold"] is None and "warmup" in doc["reason"] and "--ws" in doc["reason"]
    doc = calibrate(None, CacheOptions(), 6, 0.5)
    assert doc["threshold"] is None and "no residual diff" in doc["reason"]
    # Diffs at or above 1: only a forcing threshold (1.0) caches.
    doc = calibrate(_stats({"1": 1.4, "2": 1.2}), CacheOptions(max_warmup_steps=0), 3, 0.5)
    assert doc["threshold"] == 1.0


def test_warmup_steps_follow_cache_dit() -> None:
    assert warmup_steps(CacheOptions(max_warmup_steps=4, warmup_interval=2)) == {0, 2}
    assert warmup_steps(CacheOptions(max_warmup_steps=0)) == set()


def _engaged(kind: str, work: dict[str, float], base: dict[str, float], **spec: object) -> object:
    from cdit_runtime.contract import PhaseResult, PhaseSpec
    from cdit_runtime.engagement import judge_engagement

    phase = PhaseResult(name=kind, kind=kind, status="ok")  # type: ignore[arg-type]
    phase.verdict = "pass"
    specs = {"baseline": PhaseSpec(kind="baseline"), kind: PhaseSpec(kind=kind, **spec)}  # type: ignore[arg-type]
    records = {"baseline": {"work": base}, kind: {"work": work}}
    judge_engagement(phase, specs[kind], records[kind], records, specs)
    return phase


def test_a_parallel_phase_that_split_or_sharded_nothing_is_not_exercised() -> None:
    """Every rank computing the whole model reproduces the baseline exactly: without evidence
    that the plan split the tokens or sharded the weights that is no pass."""
    base = {"medianRows": 512, "paramElements": 1000}
    inert = _engaged("ulysses", {"medianRows": 512, "paramElements": 1000}, base)
    assert inert.verdict == "not_exercised" and "split nothing" in inert.verdict_reason
    split = _engaged("ring", {"medianRows": 256, "paramElements": 1000}, base)
    assert split.verdict == "pass"
    assert any("split the tokens" in n and "0.50x" in n for n in split.notes)
    unsharded = _engaged("tp", {"medianRows": 512, "paramElements": 1000}, base)
    assert unsharded.verdict == "not_exercised" and "sharded no weight" in unsharded.verdict_reason
    assert _engaged("tp", {"medianRows": 512, "paramElements": 540}, base).verdict == "pass"
    # hybrid needs both; VAE-P judges the parallelism of the rest by its base
    assert _engaged("hybrid", {"medianRows": 256, "paramElements": 1000}, base).verdict == (
        "not_exercised"
    )
    vae = _engaged("vae_p", {"medianRows": 512, "paramElements": 1000}, base, vae_base="ring")
    assert vae.verdict == "not_exercised"
    # TE-P: the text encoders must be sharded too
    tep_base = {**base, "textEncoderElements": 300}
    tep = _engaged("tp_tep", {"paramElements": 540, "textEncoderElements": 300}, tep_base)
    assert tep.verdict == "not_exercised" and "text-encoder" in tep.verdict_reason
    tep = _engaged("tp_tep", {"paramElements": 540, "textEncoderElements": 170}, tep_base)
    assert tep.verdict == "pass" and len(tep.notes) == 2
    # no measurement on either side (older records): nothing is concluded
    assert _engaged("ulysses", {}, base).verdict == "pass"
