"""`render_adapter`: the BlockAdapter construction, one test per rule (before/after text)."""

from __future__ import annotations

from dataclasses import replace

from render_cases import WIDTH, acme_plan, assert_code, assert_delta, code

from lsp_server.codegen.plan import BlockListPlan, CachePlan
from lsp_server.codegen.render_adapter import (
    adapter_arguments,
    checkout_adapter_factory,
    merged_lists,
    safe_import_line,
    standalone_block_adapter,
)

FLUX_LISTS = (
    BlockListPlan("transformer_blocks", "Pattern_0", check_num_outputs=True),
    BlockListPlan(
        "single_transformer_blocks",
        "Pattern_0",
        check_num_outputs=True,
        continues="transformer_blocks",
    ),
)


def _factory(plan=None, functor=None, width=WIDTH):  # type: ignore[no-untyped-def]
    return checkout_adapter_factory(plan or acme_plan(), "acme_adapter", functor, width)


def test_standalone_block_adapter_takes_pipe_or_transformer() -> None:
    assert_code(
        standalone_block_adapter(acme_plan(), None, WIDTH),
        code(
            '''
            def block_adapter(pipe: Any = None, **kwargs: Any) -> BlockAdapter:
                """The cache-dit BlockAdapter for `AcmeTransformer2DModel`.

                Cached block lists: `blocks` (Pattern_3). `pipe` may be None when
                `transformer=` is given (transformer-only use, which needs
                `DBCacheConfig(num_inference_steps=...)`). Other keyword arguments go to
                `BlockAdapter`.
                """
                transformer = kwargs.pop("transformer", None)
                if transformer is None:
                    transformer = _transformer_of(pipe)
                return BlockAdapter(
                    pipe=pipe,
                    transformer=transformer,
                    blocks=transformer.blocks,
                    forward_pattern=ForwardPattern.Pattern_3,
                    check_forward_pattern=True,
                    has_separate_cfg=False,
                    **kwargs,
                )
            '''
        ),
    )


def test_checkout_factory_of_a_diffusers_model_asserts_its_class() -> None:
    assert_code(
        _factory(),
        code(
            """
            @BlockAdapterRegister.register("Acme")
            def acme_adapter(pipe, **kwargs) -> BlockAdapter:
                try:
                    from acme.transformer_acme import AcmeTransformer2DModel
                except ImportError:
                    AcmeTransformer2DModel = None  # needs a diffusers version that has it

                if AcmeTransformer2DModel is not None:
                    _relaxed_assert(pipe.transformer, AcmeTransformer2DModel)

                return BlockAdapter(
                    pipe=pipe,
                    transformer=pipe.transformer,
                    blocks=pipe.transformer.blocks,
                    forward_pattern=ForwardPattern.Pattern_3,
                    check_forward_pattern=True,
                    has_separate_cfg=False,
                    **kwargs,
                )
            """
        ),
    )


def test_checkout_factory_of_a_model_outside_diffusers_imports_nothing() -> None:
    assert_code(
        _factory(acme_plan(is_diffusers_model=False)),
        code(
            """
            @BlockAdapterRegister.register("Acme")
            def acme_adapter(pipe, **kwargs) -> BlockAdapter:
                return BlockAdapter(
                    pipe=pipe,
                    transformer=pipe.transformer,
                    blocks=pipe.transformer.blocks,
                    forward_pattern=ForwardPattern.Pattern_3,
                    check_forward_pattern=True,
                    has_separate_cfg=False,
                    **kwargs,
                )
            """
        ),
    )


def test_patch_functor_is_imported_and_passed() -> None:
    plan = acme_plan(is_diffusers_model=False)
    assert_delta(
        _factory(plan),
        _factory(plan, functor="AcmePatchFunctor"),
        code(
            """
            @@
             def acme_adapter(pipe, **kwargs) -> BlockAdapter:
            +    from cache_dit.caching.patch_functors import AcmePatchFunctor
            +
                 return BlockAdapter(
            @@
                     has_separate_cfg=False,
            +        patch_functor=AcmePatchFunctor(),
                     **kwargs,
            """
        ),
    )
    standalone = standalone_block_adapter(plan, "AcmePatchFunctor", WIDTH)
    assert "        patch_functor=AcmePatchFunctor(),\n        **kwargs,\n" in standalone


def test_separate_cfg_comes_from_the_plan() -> None:
    plan = acme_plan()
    cfg = replace(plan, cache=replace(plan.cache, has_separate_cfg=True))
    assert_delta(
        standalone_block_adapter(plan, None, WIDTH),
        standalone_block_adapter(cfg, None, WIDTH),
        code(
            """
            @@
                     check_forward_pattern=True,
            -        has_separate_cfg=False,
            +        has_separate_cfg=True,
                     **kwargs,
            """
        ),
    )


def test_several_lists_are_passed_as_lists_one_element_per_line_when_long() -> None:
    plan = acme_plan(
        block_lists=(
            BlockListPlan("transformer_blocks", "Pattern_0"),
            BlockListPlan("single_transformer_blocks", "Pattern_3"),
        )
    )
    assert_delta(
        _factory(acme_plan(is_diffusers_model=False)),
        _factory(replace(plan, model=replace(plan.model, is_diffusers_model=False))),
        code(
            """
            @@
                     transformer=pipe.transformer,
            -        blocks=pipe.transformer.blocks,
            -        forward_pattern=ForwardPattern.Pattern_3,
            +        blocks=[
            +            pipe.transformer.transformer_blocks,
            +            pipe.transformer.single_transformer_blocks,
            +        ],
            +        forward_pattern=[ForwardPattern.Pattern_0, ForwardPattern.Pattern_3],
                     check_forward_pattern=True,
            """
        ),
    )


def test_a_list_that_continues_the_previous_one_is_cached_with_it() -> None:
    plan = acme_plan(block_lists=FLUX_LISTS)
    assert [[b.attr for b in g] for g in merged_lists(plan, None)] == [
        ["transformer_blocks", "single_transformer_blocks"]
    ]
    assert adapter_arguments(plan, "transformer", None) == [
        "transformer=transformer",
        "blocks=transformer.transformer_blocks + transformer.single_transformer_blocks",
        "forward_pattern=ForwardPattern.Pattern_0",
        "check_forward_pattern=True",
        'blocks_name="transformer_blocks"',
        'dummy_blocks_names=["single_transformer_blocks"]',
        "check_num_outputs=True",
        "has_separate_cfg=False",
    ]


def test_merged_and_separate_lists_together_name_each_cached_list() -> None:
    lists = (*FLUX_LISTS, BlockListPlan("refiner", "Pattern_3", check_forward_pattern=False))
    assert adapter_arguments(acme_plan(block_lists=lists), "transformer", None) == [
        "transformer=transformer",
        "blocks=[transformer.transformer_blocks + transformer.single_transformer_blocks, "
        "transformer.refiner]",
        "forward_pattern=[ForwardPattern.Pattern_0, ForwardPattern.Pattern_3]",
        "check_forward_pattern=False",
        'blocks_name=["transformer_blocks", "refiner"]',
        'dummy_blocks_names=["single_transformer_blocks"]',
        "has_separate_cfg=False",
    ]


def test_lists_are_not_merged_with_a_patch_functor() -> None:
    plan = acme_plan(block_lists=FLUX_LISTS)
    assert [[b.attr for b in g] for g in merged_lists(plan, "F")] == [
        ["transformer_blocks"],
        ["single_transformer_blocks"],
    ]
    args = adapter_arguments(plan, "transformer", "F")
    assert not any(a.startswith(("blocks_name", "dummy_blocks_names")) for a in args)
    assert args[-1] == "patch_functor=F()"


def test_lists_with_different_patterns_are_not_merged() -> None:
    lists = (FLUX_LISTS[0], replace(FLUX_LISTS[1], forward_pattern="Pattern_3"))
    groups = merged_lists(acme_plan(block_lists=lists), None)
    assert [len(g) for g in groups] == [1, 1]


def test_check_flags_hold_for_every_list_or_are_off() -> None:
    lists = (
        BlockListPlan("a", "Pattern_3", check_num_outputs=True),
        BlockListPlan("b", "Pattern_3", check_forward_pattern=False, check_num_outputs=False),
    )
    args = adapter_arguments(acme_plan(block_lists=lists), "t", None)
    assert "check_forward_pattern=False" in args
    assert "check_num_outputs=True" not in args
    both = (lists[0], replace(lists[1], check_forward_pattern=True, check_num_outputs=True))
    args = adapter_arguments(acme_plan(block_lists=both), "t", None)
    assert "check_forward_pattern=True" in args and "check_num_outputs=True" in args


def test_cache_plan_without_functor_reasons_renders_the_same_adapter() -> None:
    """`patch_functor` is the caller's decision (`functor` argument), not the plan flag."""
    plan = acme_plan()
    flagged = replace(plan, cache=CachePlan(block_lists=plan.cache.block_lists, patch_functor=True))
    assert standalone_block_adapter(flagged, None, WIDTH) == standalone_block_adapter(
        plan, None, WIDTH
    )


def test_safe_import_line_exports_a_name() -> None:
    assert_code(
        safe_import_line("acme_adapter", ".adapters", "acme_adapter"),
        'acme_adapter = _safe_import(".adapters", "acme_adapter")\n',
    )


def test_an_iterated_sequential_becomes_a_module_list_before_the_adapter() -> None:
    plan = acme_plan(is_diffusers_model=False)
    sequential = acme_plan(
        is_diffusers_model=False,
        block_lists=(BlockListPlan("blocks", "Pattern_3", container="Sequential"),),
    )
    assert_delta(
        _factory(plan),
        _factory(sequential),
        code(
            """
            @@
             def acme_adapter(pipe, **kwargs) -> BlockAdapter:
            +    # `blocks` is an nn.Sequential that forward iterates: cache-dit caches
            +    # ModuleLists (the same modules, so the same state-dict keys)
            +    if not isinstance(pipe.transformer.blocks, torch.nn.ModuleList):
            +        pipe.transformer.blocks = torch.nn.ModuleList(pipe.transformer.blocks)
                 return BlockAdapter(
            """
        ),
    )
    standalone = standalone_block_adapter(sequential, None, WIDTH)
    assert "        transformer.blocks = torch.nn.ModuleList(transformer.blocks)\n" in standalone
