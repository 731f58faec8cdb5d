"""Per-block steps (`lsp_server/codegen/block_steps.py`): what moves into a block's own call,
and what is refused with the reason. Run end to end under cache-dit in
`tests/test_codegen_parts.py::test_index_dependent_loop_work_runs_inside_each_block`."""

from __future__ import annotations

import textwrap

import pytest

from lsp_server.codegen.block_steps import StepError, transform

FORWARD = """
def _patched_forward(self, hidden_states, context, residuals=None):
    temb = self.time(hidden_states)
    {loop}
    return self.head(hidden_states)
"""


def _code(loop: str) -> str:
    body = textwrap.indent(textwrap.dedent(loop).strip(), "    ").lstrip()
    return FORWARD.format(loop=body)


def test_index_work_moves_into_the_step_and_the_loop_becomes_a_clean_call() -> None:
    steps = transform(
        _code(
            """
            for i, block in enumerate(self.blocks):
                ctx = context[:, i] if i < len(self.blocks) - 1 else None
                hidden_states = block(hidden_states, temb, ctx=ctx)
                if residuals is not None:
                    hidden_states = hidden_states + residuals[i]
            """
        ),
        "blocks",
        ["x", "t"],
        1,
        frozenset({"blocks"}),
    )
    assert "for block in self.blocks:\n        hidden_states = block(hidden_states, context=" in (
        steps.code
    )
    # the step's other parameters go by keyword: hooks that name them find them in the call
    assert "residuals=residuals, temb=temb)" in steps.code
    assert steps.bindings == {"t": "temb"} and steps.streams == ("x",)
    fn = steps.function
    assert fn.startswith("def _blocks_step(step, x, context, residuals, temb):")
    assert "hidden_states = x" in fn  # the block's own parameter name, for pattern matching
    assert "i = step.__dict__['_cdit_index']" in fn
    assert "type(step).forward(step, hidden_states, temb, ctx=ctx)" in fn
    assert "len(self._cdit_blocks['blocks'])" in fn and steps.block_refs == ["blocks"]


@pytest.mark.parametrize(
    ("loop", "reason"),
    [
        (
            """
            for i, block in enumerate(self.blocks):
                hidden_states = block(hidden_states, temb + acc)
                acc = hidden_states.mean()
            """,
            "carries acc from one block to the next",
        ),
        (
            """
            for i, block in enumerate(self.blocks):
                hidden_states = block(hidden_states, temb)
                last = i
            """,
            "",  # `last` is not read after the loop: fine (no error expected)
        ),
        (
            """
            for i, block in enumerate(self.blocks):
                out = block(hidden_states[i], temb)
            """,
            "not plain names",
        ),
    ],
)
def test_what_cannot_move_is_refused_with_the_reason(loop: str, reason: str) -> None:
    code = _code(loop)
    if not reason:
        transform(code, "blocks", ["x"], 1)
        return
    with pytest.raises(StepError, match=reason):
        transform(code, "blocks", ["x"], 1)


def test_per_layer_state_moves_into_the_step_and_is_named() -> None:
    """`kv.get_layer(i)` selects per-layer state: it runs in the step with its block (a cached
    step skips it with the block) and the step names it, for the generated notes."""
    steps = transform(
        _code(
            """
            for i, block in enumerate(self.blocks):
                cache = kv.get_layer(i)
                hidden_states = block(hidden_states, temb, cache=cache)
            """
        ).replace("residuals", "kv"),
        "blocks",
        ["x"],
        1,
    )
    assert steps.state_calls == ["kv.get_layer(i)"]
    assert "cache = kv.get_layer(i)" in steps.function
    assert "kv=kv" in steps.code  # the state's owner is a loop value handed to each step


def test_a_value_set_in_the_loop_and_read_after_it_is_refused() -> None:
    code = _code(
        """
        for i, block in enumerate(self.blocks):
            hidden_states = block(hidden_states, temb)
            last = i
        """
    ).replace("return self.head(hidden_states)", "return self.head(hidden_states) * last")
    with pytest.raises(StepError, match="forward reads last after the loop"):
        transform(code, "blocks", ["x"], 1)


def test_the_cp_plan_of_stepped_blocks_names_the_step_parameters() -> None:
    """Hooks on a block find their inputs by name among the call's keywords: inputs a plan names
    on a stepped list's blocks are renamed to the step parameters that carry them; one computed
    inside the step refuses (no hook can reach it)."""
    from lsp_server.codegen.block_steps import stepped_cp_plan

    steps = transform(
        _code(
            """
            for i, block in enumerate(self.blocks):
                ctx = context[:, i]
                hidden_states = block(hidden_states, temb, rope=freqs, ctx=ctx)
            """
        ).replace("residuals", "freqs"),
        "blocks",
        ["x", "t", "rope", "ctx"],
        1,
        frozenset({"blocks"}),
    )
    split = {"split_dim": 1, "expected_dims": 3}
    gather = {"gather_dim": 1, "expected_dims": 3}
    plan = {
        "blocks.0": {"x": split},
        "blocks.*": {"rope": split},
        "blocks.<last>": gather,
        "blocks.*.attn": {"rope": split},  # a submodule's own parameters: unchanged
    }
    renamed, why = stepped_cp_plan(plan, [steps])
    assert why is None
    assert renamed == {
        "blocks.0": {"x": split},
        "blocks.*": {"freqs": split},
        "blocks.<last>": gather,
        "blocks.*.attn": {"rope": split},
    }
    _, why = stepped_cp_plan({"blocks.*": {"ctx": split}}, [steps])
    assert why is not None and "compute the blocks' `ctx` inside the step" in why
