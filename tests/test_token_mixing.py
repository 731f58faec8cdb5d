"""Expert-choice MoE layers pick, per expert, the tokens they take among the tokens they see (a
capacity from the sequence length, `torch.topk` over the token axis): a token split changes what
every expert computes, so context parallelism is refused before anything runs (NucleusMoE-Image
with its experts on, the invented `expert_choice_dit.py`), and only then: a configuration whose
experts are off keeps its plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES, diffusers_file

EC = FIXTURES / "models" / "third_party" / "expert_choice_dit.py"


def _cp(path: Path, cls: str | None, config: Path | None = None) -> dict[str, Any]:
    (t,) = analyze_path(path, cls, registry=False, config_path=config).to_json()["transformers"]
    return t["contextParallel"]


def _refusal(cp: dict[str, Any]) -> str:
    (found,) = [w["message"] for w in cp["warnings"] if "picks among the tokens" in w["message"]]
    return found


@pytest.mark.parametrize("cls", ["ECDiT", "GatedECDiT"])
def test_expert_choice_routing_refuses_context_parallelism(cls: str) -> None:
    cp = _cp(EC, cls)
    assert cp["approach"] == "none" and cp["plan"] == {}
    message = _refusal(cp)
    assert "`torch.topk(scores, k=capacity, dim=-1)`" in message
    assert "(`use_moe` holds here)" in message


def test_the_configuration_decides_whether_the_experts_exist(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"use_moe": False}))
    cp = _cp(EC, "GatedECDiT", config)
    assert cp["approach"] != "none"
    assert not any("picks among the tokens" in w["message"] for w in cp["warnings"])
    # NucleusMoE-Image: experts on by default (refused), off in the suite's dense configuration
    path = diffusers_file("models/transformers/transformer_nucleusmoe_image.py")
    assert "(`moe_enabled` holds here)" in _refusal(_cp(path, None))
    config.write_text(json.dumps({"moe_enabled": False}))
    assert _cp(path, None, config)["approach"] == "single_point"


def test_a_token_split_changes_what_the_experts_compute() -> None:
    """Why it is refused: the layer on the whole sequence is not the layer on its halves."""
    torch = pytest.importorskip("torch")
    from tests.module_loading import load_module

    fixture = load_module("expert_choice_dit", EC)
    torch.manual_seed(0)
    layer = fixture.ExpertChoiceMoE(16)
    x = torch.randn(1, 12, 16)
    with torch.no_grad():
        whole = layer(x)
        halves = torch.cat([layer(x[:, :6]), layer(x[:, 6:])], dim=1)
    assert (whole - halves).abs().max().item() > 1e-2
