"""Launch planning: what runs where, and what is refused with a reason (no torch needed)."""

from __future__ import annotations

from cdit_runtime.contract import PhaseSpec, VerificationRequest, load_request
from cdit_runtime.planning import REPLICATED, plan_launches
from cdit_runtime.shrink import shrink_config

ALL = ["baseline", "cache", "ulysses", "ring", "uaa", "tp", "tp_tep", "vae_p", "hybrid"]


def _request(kinds: list[str], **extra: object) -> VerificationRequest:
    return load_request(
        {
            "model": {"source": "tiny", "family": "flux"},
            "outputDir": "/tmp/x",
            "phases": [{"kind": k} for k in kinds],
            **extra,
        }
    )


def test_cpu_runs_every_phase_kind() -> None:
    # Ring, TP, TE-P, VAE-P and hybrid run on gloo through the workers' CPU patches.
    launches, refused = plan_launches(_request(ALL), "cpu", 0)
    assert refused == {}
    assert [(launch.world, launch.ids) for launch in launches] == [
        (2, ["baseline", "cache", "ulysses-2", "ring-2", "uaa-2", "tp-2", "tp_tep-2", "vae_p-tp2"]),
        (4, ["hybrid-u2-tp2"]),
    ]


def test_single_process_phases_share_the_first_launch() -> None:
    launches, _ = plan_launches(_request(["cache", "baseline", "ulysses", "tp"]), "cuda", 2)
    (launch,) = launches
    ranks = {spec.id: rank for spec, rank in launch.phases}
    # baseline alone on rank 0; cache on every rank (cache-dit all-reduces residual diffs).
    assert ranks == {"baseline": 0, "cache": REPLICATED, "ulysses-2": 0, "tp-2": 0}
    assert launch.ids[0] == "baseline"


def test_one_launch_per_world_size() -> None:
    request = load_request(
        {
            "model": {"source": "tiny", "family": "flux"},
            "outputDir": "/tmp/x",
            "phases": [{"kind": "baseline"}, {"kind": "ulysses", "size": 4}, {"kind": "tp"}],
        }
    )
    launches, refused = plan_launches(request, "cuda", 4)
    assert not refused
    assert [(launch.world, launch.ids) for launch in launches] == [
        (2, ["baseline", "tp-2"]),
        (4, ["ulysses-4"]),
    ]


def test_single_process_only_needs_no_process_group() -> None:
    launches, _ = plan_launches(_request(["baseline", "cache"]), "cpu", 0)
    assert [(launch.world, [r for _, r in launch.phases]) for launch in launches] == [(1, [0, 0])]


def test_hybrid_on_two_gpus_is_refused_not_degraded_to_tp() -> None:
    _, refused = plan_launches(_request(["baseline", "hybrid"]), "cuda", 2)
    info = refused["hybrid-u2-tp2"]
    assert info.code == "WORLD_TOO_SMALL"
    assert "TP only" in info.message and "4" in info.hint


def test_hybrid_below_four_processes_is_refused_everywhere() -> None:
    request = load_request(
        {
            "model": {"source": "tiny", "family": "flux"},
            "outputDir": "/tmp/x",
            "phases": [{"kind": "hybrid", "cpSize": 1, "tpSize": 2}],
        }
    )
    _, refused = plan_launches(request, "cuda", 8)
    assert refused["hybrid-u1-tp2"].code == "WORLD_TOO_SMALL"


def test_missing_gpus_for_the_requested_size() -> None:
    launches, refused = plan_launches(_request(["baseline", "ulysses"]), "cuda", 1)
    assert refused["ulysses-2"].code == "MISSING_GPUS"
    assert "needs 2 GPUs, 1 visible" in refused["ulysses-2"].message
    assert [launch.ids for launch in launches] == [["baseline"]]


def test_size_one_parallel_phase_is_a_bad_request() -> None:
    request = VerificationRequest(
        model=_request([]).model, output_dir="/tmp/x", phases=[PhaseSpec("tp", size=1)]
    )
    _, refused = plan_launches(request, "cuda", 2)
    assert refused["tp-1"].code == "BAD_REQUEST"


def test_shrink_keeps_interfaces_and_head_dim() -> None:
    flux_dev = {
        "_class_name": "FluxTransformer2DModel",
        "attention_head_dim": 128,
        "axes_dims_rope": [16, 56, 56],
        "in_channels": 64,
        "joint_attention_dim": 4096,
        "num_attention_heads": 24,
        "num_layers": 19,
        "num_single_layers": 38,
        "pooled_projection_dim": 768,
    }
    small = shrink_config(flux_dev)
    assert small["num_layers"] == 2 and small["num_single_layers"] == 2
    assert small["num_attention_heads"] == 4
    for key in ("attention_head_dim", "axes_dims_rope", "in_channels", "joint_attention_dim"):
        assert small[key] == flux_dev[key]


def test_shrink_scales_inner_widths_and_kv_heads() -> None:
    wan = {"num_attention_heads": 40, "attention_head_dim": 128, "ffn_dim": 13824, "num_layers": 40}
    assert shrink_config(wan) == {
        "num_attention_heads": 4,
        "attention_head_dim": 128,
        "ffn_dim": 1392,
        "num_layers": 2,
    }
    gqa = {"hidden_size": 3072, "num_heads": 24, "num_kv_heads": 8, "depth": 30, "mlp_dim": 8192}
    small = shrink_config(gqa, heads=6)
    assert small["num_heads"] == 6 and small["num_kv_heads"] == 2 and small["depth"] == 2
    assert small["hidden_size"] == 768  # no head dim configured: width follows the heads
    assert small["mlp_dim"] == 2048
    assert shrink_config({"num_res_blocks": 4, "num_layers": 1}) == {
        "num_res_blocks": 4,
        "num_layers": 1,
    }
