"""Values forward hands its blocks in shapes the context-parallel reading sees through
(`tests/fixtures/models/third_party/handed_values_dits.py`).

Before: a block subclass returning `{"x": super().forward(x, c)}` had "no attention read" (CP
refused); `blk(x.to(torch.float32).contiguous(), t)` left the root split without an input
(refused); blocks taking the text first and handing the image back first had the image output
left split by the gather (a (1, 8, 4) output for (1, 16, 4) on 2 ranks); `x, t =
self.prepare(tokens, timestep)` root-split the timestep as if it were tokens; a table passed as
`table if self.use_table else None` was not seen as built from the stream's length (a root
split, every rank counting its positions from 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES

SHAPES = FIXTURES / "models" / "third_party" / "handed_values_dits.py"


def _cp(cls: str) -> dict[str, Any]:
    (t,) = analyze_path(SHAPES, cls, registry=False).to_json()["transformers"]
    return t["contextParallel"]


def test_attention_of_the_base_forward_reached_through_super_is_routed() -> None:
    cp = _cp("KeyedOutDiT")
    assert cp["approach"] == "root_split"
    assert [r["class"] for r in cp["sdpaRoutes"]] == ["SdpaBlock"]


def test_a_stream_cast_on_its_way_into_the_blocks_is_root_split() -> None:
    assert set(_cp("CastInDiT")["plan"][""]) == {"tokens"}


def test_only_tokens_are_root_split_when_a_method_returns_tokens_and_timestep() -> None:
    """`x, t = self.prepare(tokens, timestep)`: each name is read from its own element."""
    for cls in ("KeyedOutDiT", "CastInDiT", "FlaggedTableDiT", "TextLeadDiT"):
        assert "timestep" not in _cp(cls)["plan"].get("", {}), cls


def test_blocks_handing_the_image_back_first_have_every_split_output_gathered() -> None:
    cp = _cp("TextLeadDiT")
    assert set(cp["plan"][""]) == {"tokens", "text"}
    gather = cp["plan"]["blocks.<last>"]
    assert gather["outputs"] == 2 and not gather.get("skip")


def test_a_table_passed_under_a_flag_is_split_where_the_blocks_receive_it() -> None:
    cp = _cp("FlaggedTableDiT")
    assert cp["approach"] == "single_point"
    assert cp["plan"]["blocks.*"]["table"]["split_dim"] == 0
    assert any("position drift" in e["message"] for e in cp["evidence"])


@pytest.mark.parametrize(
    ("cls", "says"),
    [
        ("GatedPoolLoopDiT", "reduces `x` over its tokens between blocks (line"),
        ("KeyedPairDiT", "hands back as a record (`{'img': img, 'txt': txt}`)"),
    ],
)
def test_loop_reductions_and_record_gathers_refuse(cls: str, says: str) -> None:
    """A gate pooled over the tokens in the loop (`peak = x.amax(dim=1)` before each block) ran
    0.092 off on 2 ranks under a root split; a gather on blocks returning a dict stopped in
    cache-dit's gather hook. Both are refused before anything runs."""
    cp = _cp(cls)
    assert cp["approach"] == "none"
    messages = [w["message"] for w in cp["warnings"] if w["code"] == "CDIT220"]
    assert any(says in m for m in messages), messages


def test_the_plans_run_right_on_two_gloo_ranks(tmp_path: Path) -> None:
    """Generated modules match one process on 2 gloo ranks (Ulysses); the controls without
    their SDPA route are off, so the tokens were split."""
    pytest.importorskip("torch")
    pytest.importorskip("cache_dit")
    from tests.cp_runs import offsets, routed_cases

    classes = ("KeyedOutDiT", "CastInDiT", "TextLeadDiT", "FlaggedTableDiT")
    cases = routed_cases(SHAPES, classes, tmp_path, ("KeyedOutDiT", "FlaggedTableDiT"))
    for name, off in offsets(cases, tmp_path).items():
        assert off > 1e-2 if name.startswith("unrouted") else off < 1e-4, (name, off)
