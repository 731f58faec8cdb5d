"""Per-block steps that route a stream or take the streams the other way round
(`lsp_server/codegen/loop_streams.py`, `block_loop.py`, `block_steps.py`), and what stays refused
because a step could not be the loop's own computation. End to end under cache-dit:
`tests/test_cache_redteam.py` (`TokenRouteDiT`, `IndexRouteDiT`, `StreamCondDiT`,
`TextFirstDiT`, `TextLeadDiT`)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from lsp_server.analysis import analyze_path
from lsp_server.codegen.block_steps import StepError, stepped_cp_plan, transform
from tests.conftest import FIXTURES
from tests.transformer_cache_runs import (
    assert_caches_exactly,
    generate_standalone,
    seeded_model,
    tokens,
)

SOURCE = FIXTURES / "models" / "third_party" / "cache_redteam_dits.py"
FORWARD = """
def _patched_forward(self, x, ctx, c):
    {loop}
    return self.head(x)
"""
SPLIT = {"split_dim": 1, "expected_dims": 3}


def _code(loop: str) -> str:
    return FORWARD.format(loop=textwrap.indent(textwrap.dedent(loop).strip(), "    ").lstrip())


def test_a_routed_stream_is_the_steps_stream_and_refuses_a_cp_split() -> None:
    steps = transform(
        _code(
            """
            for blk in self.blocks:
                idx = self.router(x).topk(4, dim=1).indices
                out = blk(x.index_select(1, idx[0]), c)
                x = x.index_copy(1, idx[0], out)
            """
        ),
        "blocks",
        ["h", "c"],
        1,
    )
    assert steps.function.startswith("def _blocks_step(step, h, c):")
    assert "    x = h\n" in steps.function and steps.function.endswith("    return x\n")
    assert "x = blk(x, c=c)" in steps.code
    assert steps.routed == "x.index_select(1, idx[0])"
    _, why = stepped_cp_plan({"": {"x": SPLIT}}, [steps])
    assert why is not None and "each rank would compute it from its own tokens" in why


@pytest.mark.parametrize(
    ("loop", "reason"),
    [
        (  # two streams in one argument: which one the block's output goes back into is open
            """
            for blk in self.blocks:
                both = blk(torch.cat([x, ctx], 1), c)
                x, ctx = both.split([16, 5], 1)
            """,
            "reads ctx, x of the names the loop carries",
        ),
        (  # the route for the next block chosen after this one: carried between blocks
            """
            for blk in self.blocks:
                out = blk(torch.gather(x, 1, idx), c)
                x = x.scatter(1, idx, out)
                idx = self.router(x).topk(4, dim=1).indices
            """,
            "reads idx, x of the names the loop carries",
        ),
        (  # the output written nowhere back into the stream
            """
            for blk in self.blocks:
                out = blk(torch.gather(x, 1, idx), c)
            """,
            "reads none of the names the loop carries",
        ),
    ],
)
def test_routing_a_step_cannot_carry_is_refused(loop: str, reason: str) -> None:
    with pytest.raises(StepError, match=reason):
        transform(_code(loop), "blocks", ["h", "c"], 1)


def test_a_reordering_step_takes_the_second_stream_first() -> None:
    steps = transform(
        _code(
            """
            for blk in self.blocks:
                x, ctx = blk(ctx, x, c)
            """
        ),
        "blocks",
        ["text", "image", "temb"],
        2,
        reorder=True,
    )
    assert steps.function.startswith("def _blocks_step(step, image, text, c):")
    assert "x = blk(x, ctx, c=c)" in steps.code
    assert "x, ctx = type(step).forward(step, ctx, x, c)" in steps.function
    assert steps.streams == ("image", "text") and steps.reordered
    # hooks find a block's positional inputs by its class signature: a split of a stream there
    # would take the other one; anything else is unchanged
    _, why = stepped_cp_plan({"blocks.0": {"image": SPLIT}}, [steps])
    assert why is not None and "another order than the block's signature" in why
    plan = {"": {"x": SPLIT}, "blocks.*": {"temb": SPLIT}}
    assert stepped_cp_plan(plan, [steps]) == ({"": {"x": SPLIT}, "blocks.*": {"c": SPLIT}}, None)
    with pytest.raises(StepError, match="two distinct streams"):
        transform(
            _code("for blk in self.blocks:\n    x = blk(x, c)"), "blocks", ["x"], 1, reorder=True
        )


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = SOURCE.read_text()
    assert old in text
    path = tmp_path / "cache_redteam_variant.py"
    path.write_text(text.replace(old, new))
    return path


def _kinds(path: Path, cls: str) -> set[str]:
    (t,) = analyze_path(path, cls, registry=False).to_json()["transformers"]
    return {r["kind"] for r in t["patchFunctor"]["reasons"]}


def test_a_stream_derived_argument_in_the_call_is_per_block_work(tmp_path: Path) -> None:
    """`x = blk(x, c + self.pool(x.mean(1)).tanh())`: the conditioning in the call itself."""
    pytest.importorskip("cache_dit")
    path = _variant(
        tmp_path,
        "            cond = c + self.pool(x.mean(1)).tanh()\n            x = blk(x, cond)\n",
        "            x = blk(x, c + self.pool(x.mean(1)).tanh())\n",
    )
    assert _kinds(path, "StreamCondDiT") == {"per_block_work"}
    result = generate_standalone(path, "StreamCondDiT", tmp_path)
    assert result["refused"] == []
    from tests.module_loading import load_module

    module = load_module("cond_inline", tmp_path / "streamconddit_integration.py")

    def model() -> Any:
        return seeded_model(path, "StreamCondDiT", "cache_redteam_variant")

    assert_caches_exactly(module, model, tokens)


def test_a_stream_derived_value_carried_to_the_next_block_is_refused(tmp_path: Path) -> None:
    """The conditioning for the next block computed after this one: a value carried from block
    to block, which no step can hand on (each block gets the wrapper's one call's)."""
    path = _variant(
        tmp_path,
        "        for blk in self.blocks:\n            cond = c + self.pool(x.mean(1)).tanh()\n"
        "            x = blk(x, cond)\n",
        "        cond = c\n        for blk in self.blocks:\n            x = blk(x, cond)\n"
        "            cond = c + self.pool(x.mean(1)).tanh()\n",
    )
    assert "per_block_work" in _kinds(path, "StreamCondDiT")
    result = generate_standalone(path, "StreamCondDiT", tmp_path)
    (refused,) = result["refused"]
    assert refused["part"] == "cache" and "carries cond" in refused["reasons"][0]
