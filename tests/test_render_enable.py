"""`render_enable`: the standalone module's `enable()`, one test per rule.

The smallest plan (cache only) gives the whole function; each other rule is the exact change
one plan feature makes to it (`delta`: a unified diff with one line of context).
"""

from __future__ import annotations

from dataclasses import replace

from render_cases import (
    GATHER,
    SPLIT,
    WIDTH,
    acme_plan,
    assert_code,
    assert_delta,
    assert_parses,
    code,
    cp_plan_of,
    tp_plan_of,
)

from lsp_server.codegen.plan import CachePlan, IntegrationPlan, MaskReorder
from lsp_server.codegen.render_enable import enable_code, part_message
from lsp_server.codegen.render_ring_masks import ring_masks_enable_lines

ROOT_SPLIT = {"": {"x": SPLIT}}
LIST_SPLIT = {"blocks.0": {"x": SPLIT}, "blocks.<last>": GATHER}
NO_CACHE = CachePlan(block_lists=(), enabled=False)


def _enable(plan: IntegrationPlan, tp_class: str | None = None) -> str:
    return enable_code(plan, tp_class, plan.not_generated(), WIDTH)


def _with_cp(**changes: object) -> IntegrationPlan:
    return acme_plan(cp=cp_plan_of(ROOT_SPLIT, **changes))  # type: ignore[arg-type]


def test_cache_only_enable_refuses_tp_and_runs_enable_cache() -> None:
    assert_code(
        _enable(acme_plan()),
        code(
            '''
            def enable(
                pipe: Any,
                *,
                cache_config: Any = None,
                parallelism_config: Any = None,
                transformer: Any = None,
            ) -> Any:
                """Enable cache-dit on `pipe` (or on `transformer` alone with `pipe=None`).

                Returns what `cache_dit.enable_cache` returns. The cache config is copied
                with `enable_separate_cfg` from the adapter (see `_cache_config`); without
                any config, cache-dit's default `DBCacheConfig()` is used. With CP
                requested and no `parallelism_config.cp_plan`, the plan comes from
                `cp_plan`; with TP requested, this module's TP planner is registered first.
                """
                model = transformer if transformer is not None else _transformer_of(pipe)
                config = parallelism_config
                if config is not None:
                    if config.cp_enabled() and config.cp_plan is None:
                        config.cp_plan = cp_plan(model)
                    if config.tp_enabled():
                        raise NotImplementedError(
                            "tensor parallelism is not part of this integration: disabled "
                            "in the plan"
                        )
                adapter = block_adapter(pipe, transformer=model)
                if cache_config is None and config is None:
                    cache_config = cache_dit.DBCacheConfig()
                if cache_config is not None:
                    cache_config = _cache_config(cache_config, adapter)
                return cache_dit.enable_cache(
                    adapter,
                    cache_config=cache_config,
                    parallelism_config=config,
                )
            '''
        ),
    )


def test_without_cache_enable_needs_a_parallelism_config_and_returns_the_pipe() -> None:
    assert_code(
        _enable(acme_plan(cache=NO_CACHE, cp=cp_plan_of(ROOT_SPLIT))),
        code(
            '''
            def enable(
                pipe: Any,
                *,
                cache_config: Any = None,
                parallelism_config: Any = None,
                transformer: Any = None,
            ) -> Any:
                """Enable parallelism on `pipe` (or `transformer` with `pipe=None`).

                Caching is not part of this integration: a `cache_config` raises
                `NotImplementedError` with the reason. Returns `pipe` (or `transformer`),
                changed in place.
                """
                if cache_config is not None or parallelism_config is None:
                    raise NotImplementedError(
                        "cache is not part of this integration: disabled in the plan"
                    )
                model = transformer if transformer is not None else _transformer_of(pipe)
                config = parallelism_config
                if config is not None:
                    if config.cp_enabled() and config.cp_plan is None:
                        config.cp_plan = cp_plan(model)
                    if config.tp_enabled():
                        raise NotImplementedError(
                            "tensor parallelism is not part of this integration: disabled "
                            "in the plan"
                        )
                cache_dit.enable_cache(model, parallelism_config=config)
                return pipe if pipe is not None else model
            '''
        ),
    )


def test_a_refused_part_is_named_with_its_reason() -> None:
    plan = acme_plan().with_refused({"tensorParallel": ("layer key must look like x",)})
    assert part_message(plan, "tensorParallel", plan.not_generated()) == (
        "tensor parallelism is not part of this integration: refused: layer key must look like x"
    )
    assert_delta(
        _enable(acme_plan()),
        _enable(plan),
        code(
            """
            @@
                         raise NotImplementedError(
            -                "tensor parallelism is not part of this integration: disabled "
            -                "in the plan"
            +                "tensor parallelism is not part of this integration: refused: "
            +                "layer key must look like x"
                         )
            """
        ),
    )


def test_tp_planner_is_registered_when_tp_is_generated() -> None:
    plan = acme_plan(tp=tp_plan_of({"blocks.*.to_q": "colwise"}))
    assert_delta(
        _enable(acme_plan()),
        _enable(plan, "AcmeTensorParallelismPlanner"),
        code(
            """
            @@
                     if config.tp_enabled():
            -            raise NotImplementedError(
            -                "tensor parallelism is not part of this integration: disabled "
            -                "in the plan"
            -            )
            +            _register_tp_planner()
                 adapter = block_adapter(pipe, transformer=model)
            """
        ),
    )


def test_tp_of_a_transformer_outside_model_mixin_is_applied_by_the_module() -> None:
    """cache-dit's TP asserts a diffusers ModelMixin: the module's planner shards a plain
    `nn.Module` itself, cache-dit gets the rest of the config, and TP alone (no cache config)
    returns without enabling a default cache."""
    tp = acme_plan(tp=tp_plan_of({"blocks.*.to_q": "colwise"}))
    plain = replace(tp, model=replace(tp.model, is_diffusers_model=False))
    produced = _enable(plain, "AcmeTensorParallelismPlanner")
    assert "_register_tp_planner()" not in produced
    assert (
        "            AcmeTensorParallelismPlanner().apply(\n"
        "                transformer=model,\n"
        "                parallelism_config=config,\n"
        "            )\n"
        "            config = _without_tp(config)\n"
    ) in produced
    assert (
        "    if cache_config is None and parallelism_config is None:\n"
        "        cache_config = cache_dit.DBCacheConfig()\n"
        "    if cache_config is None and config is None:  # TP alone, applied above\n"
        "        return pipe if pipe is not None else model\n"
    ) in produced
    assert_parses(produced)


def test_ring_that_cannot_run_the_plan_is_refused_first() -> None:
    assert_delta(
        _enable(_with_cp()),
        _enable(_with_cp(ring_unsupported="the attention receives a mask")),
        code(
            """
            @@
                 if config is not None:
            +        if (config.ring_size or 1) > 1:
            +            raise NotImplementedError(
            +                "ring attention is not part of this integration: the attention "
            +                "receives a mask"
            +            )
                     if config.cp_enabled() and config.cp_plan is None:
            """
        ),
    )


def test_cp_helpers_are_not_called_when_cp_is_not_generated() -> None:
    routes = (("P", "processor", ()),)
    cp = cp_plan_of(LIST_SPLIT, ring_unsupported="mask", ring_masks=True, sdpa_routes=routes)
    cp = replace(cp, enabled=False)
    assert _enable(acme_plan(cp=cp)) == _enable(acme_plan())


def test_masked_ring_steps_are_installed_after_the_cp_plan() -> None:
    ring = "".join("+" + line + "\n" for line in ring_masks_enable_lines("config", " " * 8, WIDTH))
    assert_delta(
        _enable(_with_cp()),
        _enable(_with_cp(ring_masks=True)),
        "@@\n"
        "             config.cp_plan = cp_plan(model)\n"
        f"{ring}"
        "         if config.tp_enabled():\n",
    )


def test_mask_reorder_runs_over_the_cp_world() -> None:
    reorder = MaskReorder("blocks", "mask", ("x", "c"))
    assert_delta(
        _enable(_with_cp()),
        _enable(_with_cp(mask_reorder=reorder)),
        code(
            """
            @@
                         config.cp_plan = cp_plan(model)
            +        if config.cp_enabled():
            +            world = max(config.ulysses_size or 1, config.ring_size or 1)
            +            _reorder_masks(model, world)
                     if config.tp_enabled():
            """
        ),
    )


def test_mask_guards_stop_cp_calls_that_pass_a_mask() -> None:
    assert_delta(
        _enable(_with_cp()),
        _enable(_with_cp(mask_guard_params=("attention_mask",))),
        code(
            """
            @@
                         config.cp_plan = cp_plan(model)
            +        if config.cp_enabled():
            +            _stop_masks(
            +                model,
            +                _CP_MASK_PARAMS,
            +                "context parallelism",
            +                _CP_MASK_REASON,
            +            )
                     if config.tp_enabled():
            """
        ),
    )


def test_attention_outside_the_split_lists_is_made_local_after_enable_cache() -> None:
    assert_delta(
        _enable(_with_cp()),
        _enable(acme_plan(cp=cp_plan_of(LIST_SPLIT))),
        code(
            """
            @@
                     cache_config = _cache_config(cache_config, adapter)
            -    return cache_dit.enable_cache(
            +    enabled = cache_dit.enable_cache(
                     adapter,
            @@
                 )
            +    if config is not None and config.cp_enabled():
            +        _local_attention_outside(model)
            +    return enabled
            """
        ),
    )


def test_sdpa_routes_are_installed_after_enable_cache() -> None:
    assert_delta(
        _enable(_with_cp()),
        _enable(_with_cp(sdpa_routes=(("AttnProcessor2_0", "processor", ()),))),
        code(
            """
            @@
                     cache_config = _cache_config(cache_config, adapter)
            -    return cache_dit.enable_cache(
            +    enabled = cache_dit.enable_cache(
                     adapter,
            @@
                 )
            +    if config is not None and config.cp_enabled():
            +        _route_sdpa(model)
            +    return enabled
            """
        ),
    )


def test_without_cache_the_post_enable_helpers_run_before_the_return() -> None:
    routes = (("AttnProcessor2_0", "processor", ()),)
    before = acme_plan(cache=NO_CACHE, cp=cp_plan_of(ROOT_SPLIT))
    after = acme_plan(cache=NO_CACHE, cp=cp_plan_of(LIST_SPLIT, sdpa_routes=routes))
    assert_delta(
        _enable(before),
        _enable(after),
        code(
            """
            @@
                 cache_dit.enable_cache(model, parallelism_config=config)
            +    if config is not None and config.cp_enabled():
            +        _local_attention_outside(model)
            +        _route_sdpa(model)
                 return pipe if pipe is not None else model
            """
        ),
    )
