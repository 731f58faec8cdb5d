"""PSNR/SSIM on known image pairs and verdicts against the thresholds."""

from __future__ import annotations

import math

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("skimage")

from cdit_runtime.contract import Thresholds  # noqa: E402
from cdit_runtime.metrics import Comparison, compare, psnr, ssim, verdict  # noqa: E402

T = Thresholds()


def _rng(seed: int = 0):
    return np.random.default_rng(seed)


def test_identical_images_give_inf_and_one() -> None:
    image = _rng().random((32, 32, 3), dtype=np.float32)
    assert psnr(image, image) == math.inf
    assert ssim(image, image) == pytest.approx(1.0)
    result = compare(image[None], image[None])
    assert result.psnr_db == math.inf and result.ssim == pytest.approx(1.0)


def test_random_pair_gives_the_true_low_psnr_not_the_uint8_wraparound() -> None:
    rng = _rng(1)
    a = rng.integers(0, 256, (64, 64, 3)).astype(np.uint8)
    b = rng.integers(0, 256, (64, 64, 3)).astype(np.uint8)
    true = psnr(a / 255.0, b / 255.0)
    # Two uniform random images: E[(a-b)^2] = 1/6 of the range squared -> 7.78 dB.
    assert 7.0 < true < 8.5
    wrapped_mse = np.mean((a - b) ** 2)  # what cache-dit's default "custom" PSNR computes
    wrapped = 10 * math.log10(255.0**2 / wrapped_mse)
    assert wrapped > 24.0  # cannot go below ~24.17 dB
    assert ssim(a / 255.0, b / 255.0) < 0.1
    assert verdict("ulysses", compare(a / 255.0, b / 255.0), T)[0] == "fail"


def test_garbled_pair_has_plausible_psnr_and_low_ssim() -> None:
    rng = _rng(2)
    flat = np.full((64, 64, 3), 0.5)
    noisy = np.clip(flat + rng.normal(0, 0.05, flat.shape), 0, 1)
    comparison = compare(flat[None], noisy[None])
    assert 20.0 < comparison.psnr_db < 30.0
    assert comparison.ssim < 0.5
    name, reason = verdict("cache", comparison, T)
    assert name == "garbled" and "structure" in reason


@pytest.mark.parametrize(
    ("kind", "p", "s", "expected"),
    [
        ("cache", 31.0, 0.95, "pass"),
        ("cache", 27.0, 0.95, "warn"),
        ("cache", 24.0, 0.95, "fail"),
        ("cache", 40.0, 0.85, "fail"),
        ("ulysses", 34.0, 0.99, "fail"),
        ("ulysses", 36.0, 0.99, "pass"),
        ("tp", math.inf, 1.0, "pass"),
        ("tp_tep", 28.0, 0.3, "garbled"),
        ("hybrid", 15.0, 0.3, "fail"),
    ],
)
def test_verdicts(kind: str, p: float, s: float, expected: str) -> None:
    assert verdict(kind, Comparison(psnr_db=p, ssim=s), T)[0] == expected


def test_parallel_phase_with_cache_uses_cache_thresholds() -> None:
    c = Comparison(psnr_db=31.0, ssim=0.95)
    assert verdict("ulysses", c, T)[0] == "fail"
    assert verdict("ulysses", c, T, with_cache=True)[0] == "pass"


def test_video_is_judged_on_its_worst_frame() -> None:
    rng = _rng(3)
    video = rng.random((1, 4, 32, 32, 3))
    test = video.copy()
    test[0, 2] = np.clip(test[0, 2] + rng.normal(0, 0.05, test[0, 2].shape), 0, 1)
    comparison = compare(video, test)
    assert comparison.frames == 4
    assert comparison.min_frame_psnr_db is not None and comparison.min_frame_psnr_db < 30
    assert comparison.psnr_db > comparison.min_frame_psnr_db  # the mean hides the bad frame
    name, reason = verdict("ulysses", comparison, T)
    assert name == "fail" and reason.startswith("worst frame")


def test_shape_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="shapes differ"):
        compare(np.zeros((1, 8, 8, 3)), np.zeros((1, 16, 16, 3)))


def test_errors_are_classified_with_hints() -> None:
    from cdit_runtime.errors import classify

    cases = {
        "CUDA out of memory. Tried to allocate 2.00 GiB": "OOM",
        "'NoneType' object has no attribute 'type'": "NEEDS_ACCELERATOR",
        "Fn_compute_blocks 8 must be less than the number of transformer blocks 4": "CACHE_OPTIONS",
        "ProcessGroupNCCL: NCCL error in: ... unhandled system error": "DIST_INIT",
        "No planner registered under name: Foo": "INTEGRATION",
        "something else": "PHASE_FAILED",
    }
    for message, code in cases.items():
        info = classify(RuntimeError(message))
        assert info.code == code, message
        assert info.hint and info.traceback
    # gloo's own text for UAA's uneven shards (more cases: test_runtime_cpu_parallel.py).
    uneven = (
        "ProcessGroupGloo::allgather: invalid tensor size at index 1 "
        "(expected (1, 145, 16), got (1, 144, 16))"
    )
    assert classify(RuntimeError(uneven), phase_kind="uaa").code == "UAA_UNEVEN_GLOO"
