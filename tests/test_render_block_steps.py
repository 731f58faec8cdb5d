"""`block_steps` + `block_loop`: a loop with index-dependent work becomes a clean call plus a
per-block step; exact before/after text, one test per rule (refusals with their reason).

`tests/test_block_steps.py` checks fragments and the CP plan renaming; here the whole rewritten
forward and the whole step are compared.
"""

from __future__ import annotations

import pytest
from render_cases import assert_code, assert_parses, code

from lsp_server.codegen.block_steps import StepError, Steps, transform

STEP_DOC = '''\
    """One block of `blocks` with the loop's per-block work.

    Installed as the block's forward by the PatchFunctor: cache-dit calls every
    block with the same arguments.
    """
'''


def _transform(forward: str, params: list[str] | None = None, streams: int = 1) -> Steps:
    steps = transform(code(forward), "blocks", params or [], streams, frozenset({"blocks"}))
    assert_parses(steps.code)
    assert_parses(steps.function)
    return steps


def _step(body: str) -> str:
    """The expected step: signature line, the standard docstring, then `body`."""
    head, _, rest = code(body).partition("\n")
    return f"{head}\n{STEP_DOC}{rest}"


def test_enumerate_loop_becomes_a_clean_call_and_a_step() -> None:
    steps = _transform(
        """
        def _patched_forward(self, hidden_states, temb, hints):
            \"\"\"Doc.\"\"\"
            for i, block in enumerate(self.blocks):
                hidden_states = block(hidden_states, temb)
                if i in self.hint_ids:
                    hidden_states = hidden_states + hints[i]
            return self.norm(hidden_states)
        """,
        params=["x", "temb"],
    )
    assert_code(
        steps.code,
        code(
            '''
            def _patched_forward(self, hidden_states, temb, hints):
                """Doc."""
                # CDIT: per-block work runs inside each block's step (_blocks_step)
                for block in self.blocks:
                    hidden_states = block(hidden_states, hints=hints, temb=temb)
                return self.norm(hidden_states)
            '''
        ),
    )
    assert_code(
        steps.function,
        _step(
            """
            def _blocks_step(step, x, hints, temb):
                self = step.__dict__['_cdit_owner']
                i = step.__dict__['_cdit_index']
                hidden_states = x
                hidden_states = type(step).forward(step, hidden_states, temb)
                if i in self.hint_ids:
                    hidden_states = hidden_states + hints[i]
                return hidden_states
            """
        ),
    )
    assert (steps.name, steps.attr, steps.streams) == ("_blocks_step", "blocks", ("x",))
    assert steps.bindings == {"temb": "temb"} and steps.block_refs == []


def test_a_nested_loop_keeps_its_indentation() -> None:
    steps = _transform(
        """
        def _patched_forward(self, x, temb):
            with torch.autocast("cuda"):
                if self.enabled:
                    for i, block in enumerate(self.blocks):
                        x = block(x, temb * i)
            return x
        """
    )
    assert_code(
        steps.code,
        code(
            """
            def _patched_forward(self, x, temb):
                with torch.autocast("cuda"):
                    if self.enabled:
                        # CDIT: per-block work runs inside each block's step (_blocks_step)
                        for block in self.blocks:
                            x = block(x, temb=temb)
                return x
            """
        ),
    )


def test_two_stream_blocks_take_both_streams_positionally() -> None:
    steps = _transform(
        """
        def _patched_forward(self, hidden_states, context, temb):
            for i, block in enumerate(self.blocks):
                context, hidden_states = block(
                    hidden_states=hidden_states, encoder_hidden_states=context, temb=temb[i]
                )
            return hidden_states
        """,
        params=["hidden_states", "encoder_hidden_states", "temb"],
        streams=2,
    )
    assert (
        "    for block in self.blocks:\n"
        "        context, hidden_states = block(hidden_states, context, temb=temb)\n"
    ) in steps.code
    assert_code(
        steps.function,
        _step(
            """
            def _blocks_step(step, hidden_states, encoder_hidden_states, temb):
                self = step.__dict__['_cdit_owner']
                i = step.__dict__['_cdit_index']
                context = encoder_hidden_states
                context, hidden_states = type(step).forward(step, hidden_states=hidden_states, encoder_hidden_states=context, temb=temb[i])
                return (context, hidden_states)
            """  # noqa: E501 - ast.unparse writes the call on one line
        ),
    )
    assert steps.streams == ("hidden_states", "encoder_hidden_states")


def test_gradient_checkpointing_branches_are_left_out_of_the_step() -> None:
    steps = _transform(
        """
        def _patched_forward(self, x, temb):
            for i, block in enumerate(self.blocks):
                if torch.is_grad_enabled() and self.gradient_checkpointing:
                    x = self._gradient_checkpointing_func(block, x, temb)
                else:
                    x = block(x, temb)
                x = x * self.scales[i]
            return x
        """
    )
    assert_code(
        steps.function,
        _step(
            """
            def _blocks_step(step, x, temb):
                self = step.__dict__['_cdit_owner']
                i = step.__dict__['_cdit_index']
                x = type(step).forward(step, x, temb)
                x = x * self.scales[i]
                return x
            """
        ),
    )


def test_zipped_lists_read_the_partner_block_by_index() -> None:
    steps = _transform(
        """
        def _patched_forward(self, x):
            for block, refiner in zip(self.blocks, self.refiners):
                x = block(x)
                x = refiner(x)
            return x
        """
    )
    assert "    for block in self.blocks:\n        x = block(x)\n" in steps.code
    assert_code(
        steps.function,
        _step(
            """
            def _blocks_step(step, x):
                self = step.__dict__['_cdit_owner']
                index = step.__dict__['_cdit_index']
                x = type(step).forward(step, x)
                x = self.refiners[index](x)
                return x
            """
        ),
    )


def test_starred_block_arguments_are_read_through_their_tuple() -> None:
    steps = _transform(
        """
        def _patched_forward(self, hidden_states, temb, rope):
            for index, block in enumerate(self.blocks):
                args = (hidden_states, temb)
                hidden_states = block(*args, rope=rope[index % 2])
            return hidden_states
        """,
        params=["x", "t"],
    )
    assert "        hidden_states = block(hidden_states, rope=rope, temb=temb)\n" in steps.code
    assert steps.streams == ("x",) and steps.bindings == {"t": "temb"}


def test_the_cached_lists_read_in_the_step_are_the_real_blocks() -> None:
    steps = _transform(
        """
        def _patched_forward(self, x):
            for i, block in enumerate(self.blocks):
                x = block(x, last=i == len(self.blocks) - 1)
            return x
        """
    )
    real = "len(self._cdit_blocks['blocks'])"
    assert f"    x = type(step).forward(step, x, last=i == {real} - 1)\n" in steps.function
    assert steps.block_refs == ["blocks"]


@pytest.mark.parametrize(
    ("loop", "reason"),
    [
        pytest.param(
            """
            for pair in enumerate(self.blocks):
                x = pair[1](x)
            """,
            r"binds `pair`, not \(index, block\)",
            id="not-index-and-block",
        ),
        pytest.param(
            """
            for i, block in enumerate(self.blocks):
                x = block(x, temb)
            for i, block in enumerate(self.blocks):
                x = block(x, temb)
            """,
            r"expected one loop over `self.blocks` \(or enumerate / zip of it\), found 2",
            id="two-loops",
        ),
        pytest.param(
            """
            for i, block in enumerate(self.blocks):
                block(x * i, temb)
            """,
            r"expected one `... = block\(...\)` statement",
            id="no-assigned-call",
        ),
        pytest.param(
            """
            for i, block in enumerate(self.blocks):
                out = block(x, temb[i])
            """,
            r"assigns out, not the streams it is given \(x\)",
            id="assigns-another-name",
        ),
    ],
)
def test_a_loop_that_cannot_become_steps_is_refused_with_the_reason(loop: str, reason: str) -> None:
    body = "\n".join("    " + line for line in code(loop).splitlines())
    forward = f"def _patched_forward(self, x, temb):\n{body}\n    return x\n"
    with pytest.raises(StepError, match=reason):
        transform(forward, "blocks", [], 1)


def test_a_stream_parameter_named_like_a_loop_value_is_refused() -> None:
    forward = code(
        """
        def _patched_forward(self, hidden_states, x, temb):
            for i, block in enumerate(self.blocks):
                hidden_states = block(hidden_states, temb[i] + x)
            return hidden_states
        """
    )
    with pytest.raises(StepError, match=r"stream parameter\(s\) x clash with loop values"):
        transform(forward, "blocks", ["x", "t"], 1)
