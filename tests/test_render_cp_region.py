"""`render_cp_region`: attention outside the split lists runs locally, one test per rule."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from render_cases import GATHER, SPLIT, WIDTH, assert_code, code, run_generated

from lsp_server.codegen.render_cp_region import local_attention_code, split_region_lists


def test_split_region_bounded_by_one_list_names_it() -> None:
    plan = {"blocks.0": {"x": SPLIT}, "blocks.*": {"rope": SPLIT}, "blocks.<last>": GATHER}
    assert split_region_lists(plan) == ("blocks",)


def test_split_region_over_several_lists_names_each_once_in_order() -> None:
    plan = {
        "double.0": {"x": SPLIT},
        "double.*": {"rope": SPLIT},
        "single.*": {"rope": SPLIT},
        "single.<last>": GATHER,
    }
    assert split_region_lists(plan) == ("double", "single")


@pytest.mark.parametrize(
    "plan",
    [
        pytest.param({"blocks.0": {"x": SPLIT}}, id="no-gather"),
        pytest.param({"": {"x": SPLIT}, "blocks.<last>": GATHER}, id="root-split"),
        pytest.param({"blocks.0": {"x": SPLIT}, "proj_out": GATHER}, id="gather-at-a-head"),
        pytest.param({"blocks.0.attn": {"x": SPLIT}, "blocks.<last>": GATHER}, id="submodule"),
    ],
)
def test_split_region_not_bounded_by_lists_is_the_whole_model(plan: dict[str, Any]) -> None:
    assert split_region_lists(plan) == ()


def test_local_attention_clears_the_config_outside_the_lists() -> None:
    assert_code(
        local_attention_code(("double", "single"), WIDTH),
        code(
            '''
            _SPLIT_LISTS = ("double", "single",)


            def _local_attention_outside(transformer: torch.nn.Module) -> None:
                """Clear cache-dit's parallel config on the attention processors outside
                the split lists: their blocks run on the whole sequence on every rank,
                so their attention must stay local. A processor shared with a block
                inside the lists keeps it.
                """
                inside: set[int] = set()
                outside: list[Any] = []
                for name, module in transformer.named_modules():
                    processor = getattr(module, 'processor', None)
                    if processor is None or not hasattr(processor, '_parallel_config'):
                        continue
                    if name.split('.')[0] in _SPLIT_LISTS:
                        inside.add(id(processor))
                    else:
                        outside.append(processor)
                for processor in outside:
                    if id(processor) not in inside:
                        processor._parallel_config = None
                        if hasattr(processor, '_cp_config'):
                            processor._cp_config = None
            '''
        ),
    )


def test_one_list_is_still_a_tuple() -> None:
    assert local_attention_code(("blocks",), WIDTH).startswith('_SPLIT_LISTS = ("blocks",)\n')


class _Processor:
    def __init__(self) -> None:
        self._parallel_config = "cp"
        self._cp_config = "cp"


def test_generated_function_keeps_processors_shared_with_the_split_lists() -> None:
    inner, outer, shared = _Processor(), _Processor(), _Processor()
    modules = [
        ("blocks.0.attn", SimpleNamespace(processor=inner)),
        ("blocks.1.attn", SimpleNamespace(processor=shared)),
        ("refiner.0.attn", SimpleNamespace(processor=outer)),
        ("refiner.1.attn", SimpleNamespace(processor=shared)),
        ("norm_out", SimpleNamespace()),
    ]
    transformer = SimpleNamespace(named_modules=lambda: iter(modules))
    torch = SimpleNamespace(nn=SimpleNamespace(Module=object))
    scope = run_generated(local_attention_code(("blocks",), WIDTH), torch=torch)
    scope["_local_attention_outside"](transformer)
    assert (outer._parallel_config, outer._cp_config) == (None, None)
    assert (inner._parallel_config, shared._parallel_config) == ("cp", "cp")
