"""`render_cp`: the context-parallel hook plan as literal cache-dit objects, one test per rule.

The generated body is also run (with stand-ins for cache-dit's plan classes): `<last>` and
`<each>` keys resolve against the transformer's lists, and `_merge` unites inputs and pairs a
split with a gather on one module, as cache-dit expects.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from render_cases import GATHER, SPLIT, assert_code, assert_parses, code, run_generated

from lsp_server.codegen.render_cp import MERGE_HELPER, CpNames, cp_plan_body


def _body(plan: dict[str, Any], **kwargs: Any) -> tuple[list[str], bool]:
    return cp_plan_body(plan, **kwargs)


def _text(body: list[str]) -> str:
    """The body's statements as text, without the function's indentation."""
    return textwrap.dedent("\n".join(body) + "\n")


@dataclass(frozen=True)
class _In:
    """Stand-in for `_ContextParallelInput`."""

    split_dim: int
    expected_dims: int | None = None
    split_output: bool = False


@dataclass(frozen=True)
class _Out:
    """Stand-in for `_ContextParallelOutput`."""

    gather_dim: int
    expected_dims: int | None = None


def _run(plan: dict[str, Any], transformer: Any) -> dict[str, Any]:
    """The hook plan the generated `cp_plan` returns for `transformer`."""
    body, merge = _body(plan)
    source = "def cp_plan(transformer):\n" + "\n".join(body) + "\n"
    if merge:
        source += "\n\n" + MERGE_HELPER
    scope = run_generated(source, _ContextParallelInput=_In, _ContextParallelOutput=_Out)
    return scope["cp_plan"](transformer)


def test_static_keys_become_one_dict_literal() -> None:
    body, merge = _body({"": {"x": SPLIT}, "proj_out": GATHER})
    assert not merge
    assert_code(
        _text(body),
        code(
            """
            plan: dict[str, Any] = {
                "": {
                    "x": _ContextParallelInput(split_dim=1, expected_dims=3),
                },
                "proj_out": _ContextParallelOutput(gather_dim=1, expected_dims=3),
            }
            return plan
            """
        ),
    )


def test_an_entry_too_wide_for_one_line_takes_one_argument_per_line() -> None:
    body, _ = _body({"": {"encoder_hidden_states": SPLIT}})
    assert body[1:-2] == [
        '        "": {',
        '            "encoder_hidden_states": _ContextParallelInput(',
        "                split_dim=1,",
        "                expected_dims=3,",
        "            ),",
        "        },",
    ]


def test_last_key_resolves_to_the_last_block_through_merge() -> None:
    body, merge = _body({"blocks.<last>": GATHER})
    assert merge
    assert_code(
        _text(body),
        code(
            """
            plan: dict[str, Any] = {}
            _merge(
                plan,
                f"blocks.{len(transformer.blocks) - 1}",
                _ContextParallelOutput(gather_dim=1, expected_dims=3),
            )
            return plan
            """
        ),
    )
    model = SimpleNamespace(blocks=[0, 1, 2])
    assert _run({"blocks.<last>": GATHER}, model) == {"blocks.2": _Out(1, 3)}


def test_each_key_becomes_a_loop_over_the_list() -> None:
    body, merge = _body({"blocks.<each>.attn": {"rope": SPLIT}})
    assert merge
    assert_code(
        _text(body),
        code(
            """
            plan: dict[str, Any] = {}
            for index in range(len(transformer.blocks)):
                _merge(
                    plan,
                    f"blocks.{index}.attn",
                    {
                        "rope": _ContextParallelInput(split_dim=1, expected_dims=3),
                    },
                )
            return plan
            """
        ),
    )
    plan = _run({"blocks.<each>.attn": {"rope": SPLIT}}, SimpleNamespace(blocks=[0, 1]))
    assert plan == {"blocks.0.attn": {"rope": _In(1, 3)}, "blocks.1.attn": {"rope": _In(1, 3)}}


def test_a_list_under_an_index_is_reached_with_get_submodule() -> None:
    body, _ = _body({"stages.0.<last>": GATHER})
    assert '        f"stages.0.{len(transformer.get_submodule("stages.0")) - 1}",' in body


def test_a_split_and_a_gather_on_one_module_are_paired_and_inputs_united() -> None:
    plan = {
        "blocks.0": {"x": SPLIT},
        "blocks.<each>": {"temb": SPLIT},
        "blocks.<last>": GATHER,
    }
    assert _run(plan, SimpleNamespace(blocks=[0, 1])) == {
        "blocks.0": {"x": _In(1, 3), "temb": _In(1, 3)},
        "blocks.1": [{"temb": _In(1, 3)}, _Out(1, 3)],
    }


def test_two_gathers_on_one_module_are_refused_at_run_time() -> None:
    plan = {"blocks.1": GATHER, "blocks.<last>": GATHER}
    with pytest.raises(ValueError, match=r"two gathers on module 'blocks\.1'"):
        _run(plan, SimpleNamespace(blocks=[0, 1]))


def test_a_gather_of_several_outputs_is_a_tuple_of_gathers() -> None:
    body, _ = _body({"proj_out": {**GATHER, "outputs": 2}})
    assert body[1:-2] == [
        '        "proj_out": (',
        "            _ContextParallelOutput(gather_dim=1, expected_dims=3),",
        "            _ContextParallelOutput(gather_dim=1, expected_dims=3),",
        "        ),",
    ]


def test_output_splits_are_keyed_by_index_and_flagged() -> None:
    rope = {"0": {**SPLIT, "split_output": True}, "1": [{"split_dim": 1}, {"split_dim": 2}]}
    body, _ = _body({"rope": rope})
    assert body[1:-2] == [
        '        "rope": {',
        "            0: _ContextParallelInput(",
        "                split_dim=1,",
        "                expected_dims=3,",
        "                split_output=True,",
        "            ),",
        "            1: [",
        "                _ContextParallelInput(split_dim=1),",
        "                _ContextParallelInput(split_dim=2),",
        "            ],",
        "        },",
    ]


def test_documentation_keys_are_left_out() -> None:
    documented = {"x": {**SPLIT, "split_output": False}, "reason": "why", "line": 12}
    assert _body({"": documented}) == _body({"": {"x": SPLIT}})
    assert _body({"o": {**GATHER, "reason": "two outputs"}}) == _body({"o": GATHER})


def test_names_transformer_indent_and_width_are_the_callers() -> None:
    body, _ = _body(
        {"blocks.<last>": {"gather_dim": 1}},
        transformer="model",
        names=CpNames(split="In", gather="Out"),
        indent="  ",
        width=100,
    )
    assert body == [
        "  plan: dict[str, Any] = {}",
        '  _merge(plan, f"blocks.{len(model.blocks) - 1}", Out(gather_dim=1))',
        "  return plan",
    ]


def test_an_entry_that_is_not_an_object_is_an_error() -> None:
    with pytest.raises(ValueError, match="CP plan entry is not an object"):
        _body({"": ["x"]})


def test_merge_helper_is_one_module_level_function() -> None:
    assert_parses(MERGE_HELPER)
    assert MERGE_HELPER.startswith("def _merge(plan: dict[str, Any], key: str, entry: Any)")
