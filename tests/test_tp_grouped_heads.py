"""Projections whose output is split into groups ahead of the heads, under tensor parallelism
(`tests/fixtures/models/third_party/attention_bias_dits.py`).

A differential attention takes two query maps and two key maps from one projection each
(`self.q(x).reshape(b, n, 2, heads, -1)`); another attention takes two groups of values from one
projection (`self.v(x).unflatten(-1, (2, heads, -1))`). Column shards of such a projection hold
whole groups (rank 0 every head of group 0), not a share of every group's heads, so sharding it
with the head count divided ran and was wrong on 2 gloo ranks (0.018 and 0.063 off; the
fused-QKV reading only looked for one projection in two roles of one call). The plan now
replicates these projections and leaves the head count whole.

An attention holding a parameter per head (a temperature `nn.Parameter(torch.ones(1, heads, 1,
1))`, a rotation angle per head) cannot have its heads sharded by the projections alone: the
parameter stays whole beside each rank's share of the heads (it stopped on a shape error). Its
projections are replicated too; a per-head parameter built only under a configuration flag is
reported without changing the plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES, diffusers_file
from tests.transformer_cache_runs import generate_standalone

SHAPES = FIXTURES / "models" / "third_party" / "attention_bias_dits.py"
SPARSE = FIXTURES / "models" / "third_party" / "block_sparse_dit.py"
WORKER = Path(__file__).resolve().parent / "tp_gloo" / "worker.py"
GROUPED = {"DiffAttnDiT": ("q", "k"), "DualValueDiT": ("v",)}


def _tp(cls: str) -> dict[str, Any]:
    (t,) = analyze_path(SHAPES, cls, registry=False).to_json()["transformers"]
    return t["tensorParallel"]


@pytest.mark.parametrize(("cls", "grouped"), sorted(GROUPED.items()))
def test_a_projection_split_into_groups_of_heads_is_replicated(
    cls: str, grouped: tuple[str, ...]
) -> None:
    tp = _tp(cls)
    for name in grouped:
        assert tp["layers"][f"blocks.*.attn.{name}"] == "colwise_replicate", tp["layers"]
    assert tp["layers"]["blocks.*.attn.proj"] == "rowwise_replicate_input"
    assert "blocks.*.attn.heads" not in tp["shardDivAttrs"]
    assert tp["layers"]["blocks.*.mlp.fc1"] == "colwise"  # the MLP is still sharded
    messages = [w["message"] for w in tp["warnings"] if w["code"] == "CDIT303"]
    assert any("groups ahead of its heads" in m for m in messages), messages


def test_per_head_projections_stay_sharded() -> None:
    """`tap_dit.py`'s projections split their last dim into heads only: sharded, with the head
    count divided."""
    (t,) = analyze_path(FIXTURES / "models" / "third_party" / "tap_dit.py", "TapDiT").to_json()[
        "transformers"
    ]
    tp = t["tensorParallel"]
    assert "blocks.*.heads" in tp["shardDivAttrs"]
    assert not [w for w in tp["warnings"] if "groups ahead of its heads" in w["message"]]


def test_an_attention_holding_a_parameter_per_head_is_replicated() -> None:
    tp = _tp("HeadScaleDiT")
    for name in ("q", "k", "v"):
        assert tp["layers"][f"blocks.*.attn.{name}"] == "colwise_replicate"
    assert "blocks.*.attn.heads" not in tp["shardDivAttrs"]
    messages = [w["message"] for w in tp["warnings"] if w["code"] == "CDIT303"]
    assert any("holds `temperature` per head" in m for m in messages), messages
    (t,) = analyze_path(SPARSE, "DenseRotaryDiT").to_json()["transformers"]
    assert t["tensorParallel"]["layers"]["blocks.*.attn.to_q"] == "colwise_replicate"


def test_a_per_head_parameter_of_another_configuration_is_reported_only() -> None:
    """Helios builds `history_key_scale` per head only when `is_amplify_history` and
    `history_scale_mode == "per_head"`: the default plan keeps its heads sharded and says so."""
    path = diffusers_file("models/transformers/transformer_helios.py")
    (t,) = analyze_path(path, "HeliosTransformer3DModel").to_json()["transformers"]
    tp = t["tensorParallel"]
    assert tp["layers"]["blocks.*.attn1.to_q"] == "colwise"
    assert "blocks.*.attn1.heads" in tp["shardDivAttrs"]
    messages = [w["message"] for w in tp["warnings"] if w["code"] == "CDIT303"]
    assert any("holds `history_key_scale` per head when `is_amplify_history" in m for m in messages)


def test_the_generated_planners_run_right_on_two_gloo_ranks(tmp_path: Path) -> None:
    """The generated planners match one process; the control, every projection sharded with
    the head count divided (the plan before), is off."""
    torch = pytest.importorskip("torch")
    from tests.gloo_launch import run_two_ranks
    from tests.tp_gloo.worker import build

    cases: dict[str, dict[str, Any]] = {}
    for cls in GROUPED:
        generate_standalone(SHAPES, cls, tmp_path)
        module = tmp_path / f"{cls.lower()}_integration.py"
        cases[cls] = {"file": str(SHAPES), "class": cls, "planner": str(module)}
        sharded = {
            k: ("colwise" if v == "colwise_replicate" and ".attn." in k else v)
            for k, v in _tp(cls)["layers"].items()
        }
        sharded["blocks.*.attn.proj"] = "rowwise"
        cases[f"sharded {cls}"] = {
            "file": str(SHAPES),
            "class": cls,
            "layers": sharded,
            "shardDivAttrs": ["blocks.*.attn.heads"],
        }
    generate_standalone(SHAPES, "HeadScaleDiT", tmp_path)
    cases["HeadScaleDiT"] = {
        "file": str(SHAPES),
        "class": "HeadScaleDiT",
        "planner": str(tmp_path / "headscaledit_integration.py"),
    }
    got = run_two_ranks(WORKER, cases, tmp_path)
    for name, spec in cases.items():
        model, x = build(spec["file"], spec["class"])
        with torch.no_grad():
            baseline = model(*x)
        assert isinstance(got[name], torch.Tensor), got[name]
        off = (got[name] - baseline).abs().max().item()
        assert off > 1e-3 if name.startswith("sharded") else off < 1e-4, (name, off)
