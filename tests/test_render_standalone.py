"""`standalone.render_standalone`: the pieces of the standalone module that no `render_*`
module writes (the interface constants, the functions of parts that are not generated, the CP
plan function, mask guards, the TP registration, `_cache_config`), one test per rule. The
renderer is called directly (no target, manifest or formatter)."""

from __future__ import annotations

from pathlib import Path

from render_cases import (
    SPLIT,
    acme_plan,
    assert_code,
    assert_parses,
    code,
    cp_plan_of,
    top_level,
    top_level_names,
    tp_plan_of,
)

from lsp_server.codegen.naming import names_for
from lsp_server.codegen.plan import (
    CachePlan,
    ComponentPlan,
    FunctorReason,
    IntegrationPlan,
    Sources,
)
from lsp_server.codegen.standalone import RenderedModule, render_standalone

NAMES = names_for("Acme", "acme")
NO_CACHE = CachePlan(block_lists=(), enabled=False)
ROOT_SPLIT = {"": {"x": SPLIT}}


def _render(plan: IntegrationPlan) -> RenderedModule:
    out = render_standalone(plan, NAMES)
    if out.code:
        assert_parses(out.code)
    return out


def _constants(text: str) -> str:
    return top_level(text, "TRANSFORMER_CLASS") + top_level(text, "NOT_GENERATED")


def test_module_interface_in_order() -> None:
    text = _render(acme_plan(cp=cp_plan_of(ROOT_SPLIT), tp=tp_plan_of({"blocks.*.q": "colwise"})))
    assert top_level_names(text.code) == [
        "TRANSFORMER_CLASS",
        "NOT_GENERATED",
        "block_adapter",
        "cp_plan",
        "AcmeTensorParallelismPlanner",
        "_register_tp_planner",
        "_cache_config",
        "_transformer_of",
        "enable",
    ]


def test_parts_not_generated_are_listed_with_why() -> None:
    assert_code(
        _constants(_render(acme_plan()).code),
        code(
            """
            TRANSFORMER_CLASS = "AcmeTransformer2DModel"
            NOT_GENERATED: dict[str, str] = {
                "contextParallel": "disabled in the plan",
                "tensorParallel": "disabled in the plan",
            }
            """
        ),
    )


def test_a_long_reason_is_split_into_string_pieces() -> None:
    why = "the attention receives a mask which ring attention cannot take; use Ulysses or UAA"
    text = _render(acme_plan(cp=cp_plan_of(ROOT_SPLIT, ring_unsupported=why))).code
    assert_code(
        top_level(text, "NOT_GENERATED"),
        code(
            """
            NOT_GENERATED: dict[str, str] = {
                "tensorParallel": "disabled in the plan",
                "ring": (
                    "the attention receives a mask which ring attention cannot take; use "
                    "Ulysses or UAA"
                ),
            }
            """
        ),
    )


def test_everything_generated_leaves_an_empty_dict() -> None:
    plan = acme_plan(cp=cp_plan_of(ROOT_SPLIT), tp=tp_plan_of({"blocks.*.q": "colwise"}))
    assert top_level(_render(plan).code, "NOT_GENERATED") == "NOT_GENERATED: dict[str, str] = {}\n"


def test_components_are_left_to_the_checkout_target_with_a_warning() -> None:
    vae = ComponentPlan("vae", "AutoencoderKLAcme", "vae")
    out = _render(acme_plan(components=(vae,)))
    assert '"components[0]"' not in out.code
    assert out.warnings == [
        "VAE-P for AutoencoderKLAcme (vae): planners for pipeline components are generated for "
        "the cache-dit checkout target only"
    ]


def test_a_part_not_generated_keeps_its_function_which_raises_why() -> None:
    text = _render(acme_plan(cache=NO_CACHE, cp=cp_plan_of(ROOT_SPLIT))).code
    assert_code(
        top_level(text, "block_adapter"),
        code(
            '''
            def block_adapter(pipe: Any = None, **kwargs: Any) -> BlockAdapter:
                """Caching is not part of this integration."""
                raise NotImplementedError(
                    "cache is not part of this integration: disabled in the plan"
                )
            '''
        ),
    )
    assert "_cache_config" not in top_level_names(text)
    assert "import copy" not in text and "ForwardPattern" not in text
    assert_code(
        top_level(_render(acme_plan()).code, "cp_plan"),
        code(
            '''
            def cp_plan(transformer: torch.nn.Module) -> dict[str, Any]:
                """Context parallelism is not part of this integration."""
                raise NotImplementedError(
                    "context parallelism is not part of this integration: disabled in the "
                    "plan"
                )
            '''
        ),
    )


def test_cp_plan_documents_the_approach_and_uneven_lengths() -> None:
    plan = acme_plan(cp=cp_plan_of(ROOT_SPLIT, ulysses_anything=True))
    assert_code(
        top_level(_render(plan).code, "cp_plan"),
        code(
            '''
            def cp_plan(transformer: torch.nn.Module) -> dict[str, Any]:
                """Context-parallel hook plan for `AcmeTransformer2DModel`.

                Approach: ulysses; inputs are split across ranks, outputs gathered.

                Sequence lengths may not divide by the CP size: use
                `ParallelismConfig(ulysses_anything=True)`.
                """
                plan: dict[str, Any] = {
                    "": {
                        "x": _ContextParallelInput(split_dim=1, expected_dims=3),
                    },
                }
                return plan
            '''
        ),
    )


def test_cp_imports_cache_dits_plan_classes() -> None:
    text = _render(acme_plan(cp=cp_plan_of(ROOT_SPLIT))).code
    assert (
        "from cache_dit.distributed.core import (\n"
        "    _ContextParallelInput,\n"
        "    _ContextParallelOutput,\n"
        ")\n"
    ) in text
    assert "_ContextParallelInput" not in _render(acme_plan()).code


def test_mask_guards_name_the_parameters_and_the_reason() -> None:
    cp = cp_plan_of(
        ROOT_SPLIT,
        mask_guard_params=("attention_mask", "encoder_attention_mask"),
        mask_guard_reason="the processor builds the mask from local lengths",
    )
    text = _render(acme_plan(cp=cp)).code
    assert_code(
        top_level(text, "_CP_MASK_PARAMS") + top_level(text, "_CP_MASK_REASON"),
        code(
            """
            _CP_MASK_PARAMS = ("attention_mask", "encoder_attention_mask",)
            _CP_MASK_REASON = (
                "the processor builds the mask from local lengths"
            )
            """
        ),
    )
    assert_code(
        top_level(text, "_stop_masks"),
        code(
            '''
            def _stop_masks(
                transformer: torch.nn.Module, names: tuple[str, ...], what: str, why: str
            ) -> None:
                """Stop calls that pass one of `names` (a mask): `what` cannot serve them,
                `why`.
                """
                import inspect

                signature = inspect.signature(type(transformer).forward)

                def check(module: Any, args: tuple, kwargs: dict) -> None:
                    given = signature.bind_partial(module, *args, **kwargs).arguments
                    for name in names:
                        if given.get(name) is not None:
                            raise NotImplementedError(
                                f"{what} is not part of this integration for calls that pass "
                                f"`{name}`: {why}"
                            )

                transformer.register_forward_pre_hook(check, with_kwargs=True)
            '''
        ),
    )


def test_tp_planner_is_registered_ahead_of_cache_dits_own() -> None:
    plan = acme_plan(tp=tp_plan_of({"blocks.*.q": "colwise_replicate"}))
    text = _render(plan).code
    assert "from torch.distributed.tensor import Replicate\n" in text
    assert_code(
        top_level(text, "_register_tp_planner"),
        code(
            '''
            def _register_tp_planner() -> None:
                """Register the TP planner under the transformer class name, first.

                cache-dit activates its built-in planners only while its registry is empty,
                so they are activated first; lookup takes the first matching prefix, so
                this planner goes to the front.
                """
                from cache_dit.distributed.transformers.planners import (
                    _activate_tp_planners,
                )

                registry = TensorParallelismPlannerRegister._tp_planner_registry
                if not registry:
                    _activate_tp_planners()
                others = {k: v for k, v in registry.items() if k != TRANSFORMER_CLASS}
                registry.clear()
                registry[TRANSFORMER_CLASS] = AcmeTensorParallelismPlanner
                registry.update(others)
            '''
        ),
    )


def test_cache_config_copies_and_sets_separate_cfg_from_the_adapter() -> None:
    assert_code(
        top_level(_render(acme_plan()).code, "_cache_config"),
        code(
            '''
            def _cache_config(cache_config: Any, adapter: BlockAdapter) -> Any:
                """A copy of `cache_config` with `enable_separate_cfg` from the adapter.

                With `enable_separate_cfg=None` cache-dit ignores a False
                `has_separate_cfg` of the BlockAdapter and asks its own registry by
                pipeline class name (whose adapter may assert on the transformer class, or
                force separate CFG by name prefix). A value the caller set is kept; the
                caller's object is not changed.
                """
                config = copy.copy(cache_config)
                if config.enable_separate_cfg is None:
                    config.enable_separate_cfg = bool(adapter.has_separate_cfg)
                return config
            '''
        ),
    )


def test_a_functor_that_cannot_be_written_refuses_the_cache_part(tmp_path: Path) -> None:
    reason = FunctorReason("block_list_access", "reads the list", 3, "blocks")
    cache = CachePlan(
        block_lists=acme_plan().cache.block_lists, patch_functor=True, functor_reasons=(reason,)
    )
    out = _render(acme_plan(cache=cache, sources=Sources(str(tmp_path / "gone.py"))))
    assert out.code == "" and list(out.refused) == ["cache"]
    assert out.refused["cache"][0].startswith("the PatchFunctor needs the transformer source")
