"""Ring, TP, TE-P, VAE-P and hybrid CP + TP verified on CPU (gloo) through `cpu_patches`.

One real ``python -m cdit_runtime verify`` run (controller + worker processes: one 2-process launch
for ring, tp, tp_tep and vae_p, one 4-process launch for hybrid) on the tiny random-weight Flux
pipeline with the hand-written standalone fixture, in float32. A correct parallel run is
near-exact there: measured 137.5-138 dB output PSNR, max |diff| 7e-7 .. 1.1e-6 on [0, 1] images,
on this 2-core host (a wrong plan lands far below: a RoPE split on the wrong axis gave 39.8 dB in
issue 11).

The tiny Flux family's T5 has ``d_ff=37``, which no TP plan can shard over 2 ranks (a model fact,
not a CPU one: `test_runtime_runs` checks that this fails as a plan error); this module builds the
same pipeline with ``d_ff=38`` so that TE-P can be judged. VAE-P decodes in tiles (cache-dit enables
tiling to spread them over the ranks), so its image is compared with a single-process tiled decode
computed here, and its final latents with the baseline's.

Also: the CPU patches at unit level, and `errors.classify` on real exception texts.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from runtime_cli import db as _psnr
from runtime_cli import env

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("cache_dit")
np = pytest.importorskip("numpy")

from cdit_runtime.errors import classify  # noqa: E402
from tests.gloo_launch import free_port  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FLUX_FIXTURE = REPO / "tests" / "runtime_fixtures" / "flux_standalone.py"
RUN_TIMEOUT_S = 480
# Measured on this host (float32): 137.5-138.0 dB, max |diff| 7e-7 .. 1.1e-6 (outputs in [0, 1]);
# latents max |diff| 5e-7 .. 7e-7. Margins: 25 dB and 10x.
MIN_PSNR_DB = 110.0
MAX_ABS_DIFF = 1e-5
PARALLEL = ["ring-2", "tp-2", "tp_tep-2", "hybrid-u2-tp2"]
VAE_P = ["vae_p-tp2", "vae_p-ring2"]


def _build_even_flux(path: Path) -> Path:
    """The tiny Flux pipeline with a T5 FFN width that divides by 2 (``d_ff`` 38 instead of 37)."""
    from transformers import T5Config, T5EncoderModel

    from cdit_runtime.tiny_pipelines import build_tiny

    build_tiny("flux", path)
    config = T5Config.from_pretrained(path / "text_encoder_2")
    config.d_ff = 38
    torch.manual_seed(1)
    T5EncoderModel(config).save_pretrained(path / "text_encoder_2")
    (path / "cdit_tiny.json").unlink()  # a plain local pipeline from here on
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("cpu_parallel")
    model = _build_even_flux(root / "model")
    out = root / "out"
    request = {
        "model": {"source": "local", "path": str(model)},
        "integration": {"kind": "standalone", "path": str(FLUX_FIXTURE)},
        "phases": [
            {"kind": "baseline"},
            {"kind": "ring"},
            {"kind": "tp"},
            {"kind": "tp_tep"},
            {"kind": "vae_p", "vaeBase": "tp"},
            {"kind": "vae_p", "vaeBase": "ring"},
            {"kind": "hybrid"},
        ],
        "height": 64,
        "width": 64,
        "steps": 4,
        "warmup": 0,
        "dtype": "float32",
        "device": "cpu",
        "extraCallKwargs": {"max_sequence_length": 32},
        "outputDir": str(out),
    }
    path = root / "request.json"
    path.write_text(json.dumps(request))
    proc = subprocess.run(
        [sys.executable, "-m", "cdit_runtime", "verify", str(path), "--quiet"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=REPO,
        env=env(),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((out / "results.json").read_text())
    return {"out": out, "model": model, "result": result}


def _phase(run: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in run["result"]["phases"] if p["name"] == name)


def _array(run: dict[str, Any], name: str) -> Any:
    return np.load(run["out"] / "arrays" / f"{name}.npy").astype(np.float64)


def test_no_phase_is_refused_on_cpu(run: dict[str, Any]) -> None:
    result = run["result"]
    assert result["environment"]["device"] == "cpu"
    launches = [(launch["worldSize"], launch["phases"]) for launch in result["launches"]]
    assert launches == [
        (2, ["baseline", "ring-2", "tp-2", "tp_tep-2", "vae_p-tp2", "vae_p-ring2"]),
        (4, ["hybrid-u2-tp2"]),
    ]
    assert all(launch["backend"] == "gloo" for launch in result["launches"])
    for phase in result["phases"]:
        assert phase["status"] == "ok", (phase["name"], phase["error"])


@pytest.mark.parametrize("name", PARALLEL)
def test_parallel_phase_matches_the_baseline_near_exactly(run: dict[str, Any], name: str) -> None:
    phase = _phase(run, name)
    assert _psnr(phase["psnrDb"]) > MIN_PSNR_DB and phase["ssim"] > 0.9999
    assert phase["verdict"] == "pass", phase["verdictReason"]
    diff = np.abs(_array(run, name) - _array(run, "baseline")).max()
    assert diff < MAX_ABS_DIFF
    assert phase["latentMaxAbsDiff"] is not None and phase["latentMaxAbsDiff"] < MAX_ABS_DIFF
    world = 4 if name.startswith("hybrid") else 2
    assert phase["config"]["devices"] == ["cpu"] * world


def test_each_phase_applied_what_its_label_says(run: dict[str, Any]) -> None:
    config = {name: _phase(run, name)["config"] for name in PARALLEL + VAE_P}
    assert config["ring-2"]["parallel"] == {"ring_size": 2}
    assert config["tp-2"]["parallel"] == {"tp_size": 2}
    assert config["tp-2"]["backend"] == "Native_PyTorch"
    assert config["tp_tep-2"]["extraParallelModules"] == ["text_encoder"]
    assert config["hybrid-u2-tp2"]["parallel"] == {"ulysses_size": 2, "tp_size": 2}
    assert config["hybrid-u2-tp2"]["backend"] == "Native_Hybrid"
    assert config["vae_p-ring2"]["parallel"] == {"ring_size": 2}
    assert all(config[name]["extraParallelModules"] == ["vae"] for name in VAE_P)


@pytest.fixture(scope="module")
def tiled_reference(run: dict[str, Any]) -> dict[str, Any]:
    """The baseline call repeated in this process: untiled (must equal the baseline) and tiled."""
    from diffusers import DiffusionPipeline

    launch = json.loads((run["out"] / "launches" / "launch1.json").read_text())
    kwargs = dict(launch["callKwargs"], num_inference_steps=launch["steps"])
    seed = launch["request"]["seed"]
    threads = torch.get_num_threads()
    torch.set_num_threads(int(launch.get("threads", 1)))
    try:
        pipe = DiffusionPipeline.from_pretrained(run["model"], dtype=torch.float32)
        pipe.set_progress_bar_config(disable=True)
        images = {}
        for tiled in (False, True):
            if tiled:
                pipe.vae.enable_tiling()
            generator = torch.Generator("cpu").manual_seed(seed)
            images[tiled] = np.asarray(pipe(generator=generator, **kwargs).images, np.float64)
    finally:
        torch.set_num_threads(threads)
    return {"untiled": images[False], "tiled": images[True]}


@pytest.mark.parametrize("name", VAE_P)
def test_vae_parallel_decode_equals_the_single_process_tiled_decode(
    run: dict[str, Any], tiled_reference: dict[str, Any], name: str
) -> None:
    baseline = _array(run, "baseline")
    untiled, tiled = tiled_reference["untiled"], tiled_reference["tiled"]
    assert np.abs(untiled.reshape(baseline.shape) - baseline).max() < MAX_ABS_DIFF
    phase = _phase(run, name)
    output = _array(run, name)
    assert np.abs(output - tiled.reshape(output.shape)).max() < MAX_ABS_DIFF
    # The denoiser is untouched by VAE-P: its final latents match the baseline near-exactly ...
    assert phase["latentMaxAbsDiff"] is not None and phase["latentMaxAbsDiff"] < MAX_ABS_DIFF
    # ... and the image differs from the untiled baseline by tiling alone (tile blending: the
    # tiny VAE decodes 64 x 64 in four overlapping 32 x 32 tiles): 26.7 dB measured.
    assert np.abs(tiled - untiled).max() > 0.05
    # So the runtime judges the image against the tiled decode of the baseline, not the baseline.
    assert phase["verdict"] == "pass", phase["verdictReason"]
    assert _psnr(phase["psnrDb"]) > 80.0
    assert any("tiled vs untiled decode of the baseline" in note for note in phase["notes"])
    assert phase["images"]["reference"].endswith(".tiled-reference.png")


# ------------------------------------------------------------------------------ unit: patches


def _distributed_rmsnorms() -> list[Any]:
    """cache-dit's DistributedRMSNorm classes, with every planner loaded as cache-dit loads them.

    (Importing one planner module first would leave cache-dit's lazily filled registries partial
    for the rest of this test process.)
    """
    from cache_dit.distributed.transformers import dispatch

    dispatch._ensure_cp_planners_activated()
    dispatch._ensure_tp_planners_activated()
    from cache_dit.distributed.transformers import helios, ltx_video, wan

    return [module.DistributedRMSNorm for module in (wan, helios, ltx_video)]


@pytest.fixture
def restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the CPU patches change in cache-dit is put back after the test."""
    from cache_dit.attention.backends import native
    from cache_dit.distributed.autoencoders import register as vae_register
    from cache_dit.distributed.core import _templated_ring
    from cache_dit.distributed.text_encoders import register as te_register
    from cache_dit.distributed.transformers import register as tp_register

    monkeypatch.setattr(native, "_native_attention_forward_op", native._native_attention_forward_op)
    monkeypatch.setattr(
        _templated_ring, "fused_merge_attn_states", _templated_ring.fused_merge_attn_states
    )
    for cls in (
        tp_register.TensorParallelismPlanner,
        te_register.TextEncoderTensorParallelismPlanner,
        vae_register.AutoEncoderDataParallelismPlanner,
    ):
        monkeypatch.setattr(cls, "mesh", cls.mesh)
    monkeypatch.setattr(
        tp_register.TensorParallelismPlanner, "apply", tp_register.TensorParallelismPlanner.apply
    )
    for norm in _distributed_rmsnorms():
        monkeypatch.setattr(norm, "forward", norm.forward)


@pytest.fixture
def patched(restored: None) -> Any:
    """The CPU patches applied in this process (undone after the test)."""
    from cache_dit.attention.backends import native

    from cdit_runtime.cpu_patches import apply_cpu_patches

    return apply_cpu_patches(), native


def test_patches_apply_once_and_report(patched: Any) -> None:
    from cache_dit.distributed.core import _templated_ring

    from cdit_runtime.cpu_patches import PATCHES, apply_cpu_patches

    status, native = patched
    assert set(status) == set(PATCHES)
    assert all(value in ("applied", "in place") for value in status.values()), status
    assert apply_cpu_patches() == dict.fromkeys(PATCHES, "in place")
    # cache-dit allow-lists attention masks by the forward op's name: it must be kept.
    assert native._native_attention_forward_op.__name__ == "_native_attention_forward_op"
    assert _templated_ring.fused_merge_attn_states is None


def test_ring_lse_from_the_cpu_flash_op_merges_to_full_attention(patched: Any) -> None:
    _, native = patched
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 24, 4, 16) for _ in range(3))  # (B, S, H, D) as cache-dit passes
    full = torch.nn.functional.scaled_dot_product_attention(
        *(x.transpose(1, 2) for x in (q, k, v))
    ).transpose(1, 2)
    op = native._native_attention_forward_op
    parts = [
        op(None, q, k[:, s], v[:, s], None, 0.0, False, None, False, True, _save_ctx=False)
        for s in (slice(0, 12), slice(12, 24))
    ]
    (out, lse), (out2, lse2) = parts
    assert out.shape == (1, 24, 4, 16) and lse.shape == (1, 24, 4, 1)
    scores = torch.einsum("bshd,bthd->bsht", q, k[:, :12]) / math.sqrt(16)
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1, keepdim=True))
    # cache-dit's ring merge (its PyTorch fallback, used on CPU):
    merged = out - torch.sigmoid(lse2 - lse) * (out - out2)
    torch.testing.assert_close(merged, full, atol=1e-6, rtol=1e-5)


def test_ring_lse_with_a_mask_stays_refused_as_on_gpus(patched: Any) -> None:
    _, native = patched
    q = torch.randn(1, 8, 2, 16)
    mask = torch.ones(1, 1, 8, 8, dtype=torch.bool)
    with pytest.raises(ValueError, match="attn_mask"):
        native._native_attention_forward_op(
            None, q, q, q, mask, 0.0, False, None, False, True, _save_ctx=False
        )


def test_tp_rmsnorm_runs_cache_dits_math_on_cpu_without_its_gpu_guard(
    restored: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    norms = _distributed_rmsnorms()
    torch.manual_seed(0)
    x = torch.randn(2, 5, 2, 8)
    reference = torch.nn.RMSNorm(8, eps=1e-6)
    torch.nn.init.normal_(reference.weight)
    # One rank: the all-reduce of the mean square over the TP group is the identity.
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda *args, **kwargs: None)
    mesh = type("Mesh", (), {"get_group": lambda self: None})()
    made = [norm(mesh, 8, reference.eps, True, reference.weight.detach().clone()) for norm in norms]
    for module in made:
        with pytest.raises(AssertionError) as guard:  # cache-dit's guard, as shipped
            module(x)
        assert classify(guard.value, phase_kind="tp").code == "NEEDS_ACCELERATOR"
    originals = [norm.forward for norm in norms]
    from cache_dit.distributed.transformers.register import TensorParallelismPlanner

    from cdit_runtime.cpu_patches import apply_cpu_patches

    assert apply_cpu_patches()["tp_rmsnorm"] == "applied"
    assert all(norm.forward is original for norm, original in zip(norms, originals, strict=True))

    class Planner(TensorParallelismPlanner):  # the norms are patched when a TP plan is applied
        def _apply(self, transformer: Any, parallelism_config: Any, **kwargs: Any) -> Any:
            return transformer, []

    Planner().apply(transformer=torch.nn.Linear(2, 2), parallelism_config=None)
    for norm, original, module in zip(norms, originals, made, strict=True):
        assert norm.forward is not original
        assert norm.forward.__code__.co_filename == original.__code__.co_filename
        assert norm.forward.__code__.co_firstlineno == original.__code__.co_firstlineno
        torch.testing.assert_close(module(x), reference(x))


# --------------------------------------------------------------------- unit: error labels


def _gloo_gather_errors() -> list[str]:
    """gloo's own messages for all_gather of mismatched shapes (a 1-process group suffices)."""
    script = """
import json, sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method=sys.argv[1], rank=0, world_size=1)
texts = []
for expected, got in (((1, 145, 16), (1, 144, 16)), ((1, 145, 16), (1, 16, 145))):
    try:
        dist.all_gather([torch.empty(*expected)], torch.empty(*got))
    except RuntimeError as exc:
        texts.append(str(exc))
dist.destroy_process_group()
print(json.dumps(texts))
"""
    init = f"tcp://127.0.0.1:{free_port()}"
    proc = subprocess.run(
        [sys.executable, "-c", script, init],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_only_gloos_uneven_gather_in_uaa_is_labelled_a_gloo_limit() -> None:
    uneven, wrong_axis = _gloo_gather_errors()
    assert "ProcessGroupGloo::allgather: invalid tensor size" in uneven
    info = classify(RuntimeError(uneven), phase_kind="uaa")
    assert info.code == "UAA_UNEVEN_GLOO" and "Not a plan error" in info.hint
    # Shards that are not one token apart: the ranks disagree about a split (a plan bug).
    info = classify(RuntimeError(wrong_axis), phase_kind="uaa")
    assert info.code == "PHASE_FAILED" and "not a hardware limit" in info.hint
    assert "run UAA on GPUs" not in info.hint
    # The same uneven gather outside UAA is not UAA's limit either (and not a DIST_INIT).
    assert classify(RuntimeError(uneven), phase_kind="ulysses").code == "PHASE_FAILED"


def _raised(fn: Any) -> BaseException:
    with pytest.raises(Exception) as caught:
        fn()
    return caught.value


def test_shape_mismatches_from_a_plan_are_plan_errors_not_hardware_limits() -> None:
    a, b = torch.ones(1, 145, 16), torch.ones(1, 144, 16)
    broadcast = _raised(lambda: a * b)  # e.g. RoPE frequencies not split with the sequence
    linear = _raised(lambda: torch.nn.functional.linear(torch.ones(32, 38), torch.ones(32, 37)))
    view = _raised(lambda: b.view(1, 145, 4, 4))
    cat = _raised(lambda: torch.cat([torch.ones(1, 145, 16), torch.ones(1, 144, 8)], dim=2))
    # DTensor's words for a TP plan that shards an FFN of 37 over 2 ranks (tiny Flux T5, tp_tep):
    dtensor = RuntimeError(
        "a and b must have same reduction dim, but got [32, 38] X [37, 32].\n\nSharding "
        "propagation failed for aten.mm.default(Spec(f32[32, 38](S(1))), Spec(f32[37, 32](S(0)))) "
        "on DeviceMesh((2,), 'cpu', stride=(1,)))"
    )
    for kind in ("uaa", "ulysses", "ring"):
        for exc in (broadcast, view, cat):
            info = classify(exc, phase_kind=kind)
            assert info.code == "PHASE_FAILED", (kind, exc)
            assert "CP plan does not fit the model" in info.hint
            assert "not a hardware limit" in info.hint
    for kind in ("tp", "tp_tep", "vae_p"):
        for exc in (linear, dtensor, broadcast):
            info = classify(exc, phase_kind=kind)
            assert info.code == "PHASE_FAILED", (kind, exc)
            assert "TP plan does not fit the model" in info.hint
    assert "hybrid" in classify(dtensor, phase_kind="hybrid").hint
    assert classify(dtensor, phase_kind="tp").message.startswith(
        "RuntimeError: a and b must have same reduction dim"
    )


def test_accelerator_only_steps_left_unpatched_still_say_so() -> None:
    flash = _raised(
        lambda: torch.ops.aten._scaled_dot_product_flash_attention(*(torch.ones(1, 2, 8, 16),) * 3)
    )
    info = classify(flash, phase_kind="ring")
    assert info.code == "NEEDS_ACCELERATOR" and "cpu-parallel.md" in info.hint
