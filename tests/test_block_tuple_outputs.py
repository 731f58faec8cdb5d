"""Blocks that return a tuple whose elements are not all token streams (handback_dit.py,
invented): `return x, c` hands the per-sample conditioning back beside the tokens. The loop that
unpacks both (`x, c = blk(x, c, pe)`) carries one token stream, so `c` is neither split nor
gathered; a loop that keeps the first element (`out = blk(...); x = out[0]`) gathers a tuple of
two with the second left alone. Before, `c` was split as a second token stream and the gather
took every element (or one, for a block returning two): the run stopped or the conditioning
doubled in width. 2-rank runs and controls: tests/test_cp_plans_gloo.py (`handback`,
`keep_first`)."""

from __future__ import annotations

from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from tests.conftest import FIXTURES, diffusers_file

THIRD_PARTY = FIXTURES / "models" / "third_party"


def _plan(path: str, cls: str) -> dict[str, Any]:
    (t,) = analyze_path(THIRD_PARTY / path, cls, registry=False).transformers
    return t.context_parallel.to_json()["plan"]


@pytest.mark.parametrize("cls", ["HandbackDiT", "KeepFirstDiT"])
def test_the_gather_leaves_the_handed_back_conditioning_alone(cls: str) -> None:
    plan = _plan("handback_dit.py", cls)
    assert set(plan["layers.0"]) == {"x"}  # the conditioning is not a token stream
    gather = plan["layers.<last>"]
    assert (gather["outputs"], gather["skip"]) == (2, [1])


def test_a_per_sample_second_value_is_not_a_second_stream() -> None:
    """MoE blocks returning their load-balancing loss (`x, _ = block(x, c)`, the block reading
    `self.ada(c)[:, None]`): the timestep is no longer split as per-token values."""
    plan = _plan("moe_dit.py", "MoEDiT")
    assert set(plan[""]) == {"x"}


def test_a_second_stream_used_as_tokens_stays_a_stream() -> None:
    """The control: HunyuanVideo-Framepack's blocks attend over the text they hand back
    (`hidden_states, encoder_hidden_states = block(...)`): both streams are split at the first
    block and both gathered after the last."""
    path = diffusers_file("models/transformers/transformer_hunyuan_video_framepack.py")
    (t,) = analyze_path(
        path, "HunyuanVideoFramepackTransformer3DModel", registry=False
    ).transformers
    plan = t.context_parallel.to_json()["plan"]
    assert set(plan["transformer_blocks.0"]) == {"hidden_states", "encoder_hidden_states"}
    gather = plan["single_transformer_blocks.<last>"]
    assert gather["outputs"] == 2 and "skip" not in gather
