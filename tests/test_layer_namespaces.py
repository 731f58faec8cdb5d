"""Serving frameworks build every layer from an `operations` namespace handed to the constructors
(`operations.Linear(...)`: a subclass of `nn.Linear` that only skips weight initialisation), run the
block loops in a helper of `forward` that lets a `transformer_options` dict replace any block by
index, and add ControlNet residuals per index. `third_party/switchyard_dit.py` has that shape.

Before: the tensor-parallel reading saw `operations.Linear` neither as a class of the namespace nor
as a linear layer, and planned nothing. Now a class defined in a class body is read as its
attribute, and a subclass of a torch layer that defines no `__init__`, `forward` or `__call__`
computes as that layer: the plan shards the projections (exact on 2 gloo ranks; the same planner
with an MLP's first projection replicating its output fails). Context parallelism of this shape
is refused upfront with its reason (the loops run in `forward_orig`); caching runs through
per-block steps (`tests/test_helper_loop_steps.py`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

SOURCE = FIXTURES / "models" / "third_party" / "switchyard_dit.py"
CLS = "SwitchyardDiT"
SHARDED_MLP = '"img.ff_in": ColwiseParallel(),'


def test_layers_built_from_a_namespace_are_sharded() -> None:
    (t,) = analyze_path(SOURCE, registry=False).to_json()["transformers"]
    layers = t["tensorParallel"]["layers"]
    assert layers["double_blocks.*.img.ff_in"] == "colwise"
    assert layers["double_blocks.*.img.ff_out"] == "rowwise"
    assert layers["double_blocks.*.txt.qkv"] == "colwise_replicate"  # fused q/k/v
    assert layers["single_blocks.*.linear2"] == "rowwise"
    assert len(layers) == 13


def test_cp_of_loops_in_a_helper_of_forward_is_refused_with_its_reason() -> None:
    (t,) = analyze_path(SOURCE, registry=False).to_json()["transformers"]
    cp = t["contextParallel"]
    assert cp["approach"] == "none"
    assert any("`self.forward_orig(...)`" in e["message"] for e in cp["evidence"])


def test_the_tp_plan_matches_one_process_on_two_gloo_ranks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.tp_planner_runs import assert_exact_and_control_fails, planned_and_control

    replicated = '"img.ff_in": ColwiseParallel(output_layouts=Replicate()),'
    assert_exact_and_control_fails(
        *planned_and_control(SOURCE, CLS, tmp_path, SHARDED_MLP, replicated)
    )
