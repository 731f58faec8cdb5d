"""`render_tp`: the tensor-parallel planner class, one test per rule.

The smallest plan (one list, two layers) gives the whole class; each other rule is the exact
change one plan feature makes to the loop over the list's blocks (`delta`), with the helpers it
needs and what it reports as applied.
"""

from __future__ import annotations

from render_cases import (
    WIDTH,
    acme_plan,
    assert_code,
    assert_delta,
    assert_parses,
    code,
    tp_plan_of,
)

from lsp_server.codegen.plan import BlockListPlan, Rearrangement
from lsp_server.codegen.render_tp import (
    DISTRIBUTED_RMSNORM,
    HAS_SUBMODULE_HELPER,
    REGROUP_HELPER,
    TpCode,
    tp_planner_code,
)

LAYERS = {"blocks.*.attn.to_q": "colwise", "blocks.*.attn.to_out.0": "rowwise"}


def _planner(layers: dict[str, str] = LAYERS, **tp: object) -> TpCode:
    plan = acme_plan(tp=tp_plan_of(layers, **tp))  # type: ignore[arg-type]
    return tp_planner_code(plan, "AcmeTensorParallelismPlanner", width=WIDTH)


def test_each_block_of_a_list_gets_its_layer_plan() -> None:
    out = _planner()
    assert (out.helpers, out.applied, out.uses_replicate) == ([], [], False)
    assert_code(
        out.code,
        code(
            '''
            class AcmeTensorParallelismPlanner(TensorParallelismPlanner):
                """Tensor-parallel planner for `AcmeTransformer2DModel`.

                Attention strategy: mha.
                """

                def _apply(
                    self,
                    transformer: torch.nn.Module,
                    parallelism_config: Any,
                    **kwargs: Any,
                ) -> tuple[torch.nn.Module, list[dict[str, Any]]]:
                    tp_mesh = self.mesh(parallelism_config=parallelism_config)
                    return self.parallelize_transformer(
                        transformer=transformer,
                        tp_mesh=tp_mesh,
                    )

                def parallelize_transformer(
                    self,
                    transformer: torch.nn.Module,
                    tp_mesh: Any,
                ) -> tuple[torch.nn.Module, list[dict[str, Any]]]:
                    tp_size = tp_mesh.size()
                    layer_plans: list[dict[str, Any]] = []
                    for block in transformer.blocks:
                        layer_plan = {
                            "attn.to_out.0": RowwiseParallel(),
                            "attn.to_q": ColwiseParallel(),
                        }
                        parallelize_module(
                            module=block,
                            device_mesh=tp_mesh,
                            parallelize_plan=layer_plan,
                        )
                        layer_plans.append(layer_plan)
                    return transformer, layer_plans
            '''
        ),
    )


def test_registered_planner_carries_the_register_decorator() -> None:
    plan = acme_plan(tp=tp_plan_of(LAYERS))
    registered = tp_planner_code(plan, "P", width=WIDTH, register="AcmeTransformer2DModel")
    plain = tp_planner_code(plan, "P", width=WIDTH)
    assert registered.code == (
        '@TensorParallelismPlannerRegister.register("AcmeTransformer2DModel")\n' + plain.code
    )


def test_attention_strategy_is_documented() -> None:
    assert_delta(
        _planner().code,
        _planner(attention_strategy="gqa").code,
        code(
            """
            @@

            -    Attention strategy: mha.
            +    Attention strategy: gqa.
                 \"\"\"
            """
        ),
    )


def test_replicate_styles_are_written_and_reported() -> None:
    layers = {
        "blocks.*.norm1.linear": "colwise_replicate",
        "blocks.*.proj": "rowwise_replicate_input",
    }
    out = _planner(layers)
    assert out.uses_replicate
    assert (
        "            layer_plan = {\n"
        '                "norm1.linear": ColwiseParallel(output_layouts=Replicate()),\n'
        '                "proj": RowwiseParallel(input_layouts=Replicate()),\n'
        "            }\n"
    ) in out.code


def test_shard_div_attr_divides_the_head_count_first() -> None:
    out = _planner(shard_div_attrs=("blocks.*.attn.heads",))
    assert out.helpers == []
    assert_delta(
        _planner().code,
        out.code,
        code(
            """
            @@
                     for block in transformer.blocks:
            +            shard_div_attr(block.attn, "heads", tp_size)
                         layer_plan = {
            """
        ),
    )


def test_a_path_with_an_index_is_reached_with_get_submodule() -> None:
    out = _planner(
        {"blocks.*.layers.0.to_q": "colwise"}, shard_div_attrs=("blocks.*.layers.0.heads",)
    )
    assert (
        "        for block in transformer.blocks:\n"
        '            shard_div_attr(block.get_submodule("layers.0"), "heads", tp_size)\n'
    ) in out.code


def test_conditional_layers_are_added_when_present_with_the_condition() -> None:
    out = _planner(conditional_layers={"blocks.*.attn.to_q": "added_kv_proj_dim is not None"})
    assert out.helpers == [HAS_SUBMODULE_HELPER]
    assert_delta(
        _planner().code,
        out.code,
        code(
            """
            @@
                             "attn.to_out.0": RowwiseParallel(),
            -                "attn.to_q": ColwiseParallel(),
                         }
            +            # exists when added_kv_proj_dim is not None
            +            if _has_submodule(block, "attn.to_q"):
            +                layer_plan["attn.to_q"] = ColwiseParallel()
                         parallelize_module(
            """
        ),
    )


def test_only_conditional_layers_start_from_an_empty_plan_and_guard_their_attrs() -> None:
    out = _planner(
        {"blocks.*.attn.add_q_proj": "colwise"},
        conditional_layers={"blocks.*.attn.add_q_proj": ""},
        shard_div_attrs=("blocks.*.attn.heads",),
    )
    assert (
        "        for block in transformer.blocks:\n"
        '            if _has_submodule(block, "attn"):\n'
        '                shard_div_attr(block.attn, "heads", tp_size)\n'
        "            layer_plan: dict[str, Any] = {}\n"
        '            if _has_submodule(block, "attn.add_q_proj"):\n'
        '                layer_plan["attn.add_q_proj"] = ColwiseParallel()\n'
        "            parallelize_module(\n"
    ) in out.code


def test_fused_weights_are_regrouped_before_sharding() -> None:
    rearrangement = (
        Rearrangement(
            "blocks.*.proj_out",
            "fused_out_down",
            "proj_out consumes a concatenation",
            ("blocks.*.attn.to_v", "blocks.*.proj_mlp"),
        ),
        Rearrangement("blocks.*.ff.proj", "packed_gated", "gate and up packed"),
    )
    out = _planner(weight_rearrangement=rearrangement)
    assert out.helpers == [REGROUP_HELPER]
    assert out.applied == [
        "packed_gated on ff.proj: gate and up packed",
        "fused_out_down on proj_out: proj_out consumes a concatenation",
    ]
    assert_delta(
        _planner().code,
        out.code,
        code(
            """
            @@
                     for block in transformer.blocks:
            +            # CDIT(packed_gated): gate and up packed
            +            _regroup(
            +                block.ff.proj,
            +                [block.ff.proj.out_features // 2] * 2,
            +                tp_size,
            +                dim=0,
            +            )
            +            # CDIT(fused_out_down): proj_out consumes a concatenation
            +            _regroup(
            +                block.proj_out,
            +                [block.attn.to_v.out_features, block.proj_mlp.out_features],
            +                tp_size,
            +                dim=1,
            +            )
                         layer_plan = {
            """
        ),
    )


def test_norms_over_the_sharded_width_become_distributed_after_sharding() -> None:
    out = _planner(distributed_norms=("blocks.*.attn.norm_q",))
    assert out.helpers == [HAS_SUBMODULE_HELPER, DISTRIBUTED_RMSNORM]
    assert_delta(
        _planner().code,
        out.code,
        code(
            """
            @@
                         )
            +            if _has_submodule(block, "attn.norm_q"):
            +                block.attn.norm_q = _DistributedRMSNorm(
            +                    tp_mesh,
            +                    block.attn.norm_q,
            +                )
                         layer_plans.append(layer_plan)
            """
        ),
    )


def test_a_norm_class_of_the_target_needs_no_helper_class() -> None:
    plan = acme_plan(tp=tp_plan_of(LAYERS, distributed_norms=("blocks.*.norm",)))
    out = tp_planner_code(plan, "P", width=WIDTH, norm_class="DistributedRMSNorm")
    assert out.helpers == [HAS_SUBMODULE_HELPER]
    assert "                block.norm = DistributedRMSNorm(tp_mesh, block.norm)\n" in out.code


def test_lists_are_sharded_in_execution_order() -> None:
    lists = (BlockListPlan("single", "Pattern_3"), BlockListPlan("double", "Pattern_0"))
    layers = {"double.*.to_q": "colwise", "single.*.to_q": "colwise"}
    out = tp_planner_code(acme_plan(block_lists=lists, tp=tp_plan_of(layers)), "P", width=WIDTH)
    loops = [line.strip() for line in out.code.splitlines() if line.strip().startswith("for ")]
    assert loops == ["for block in transformer.single:", "for block in transformer.double:"]


def test_helpers_are_module_level_code() -> None:
    for helper in (HAS_SUBMODULE_HELPER, REGROUP_HELPER, DISTRIBUTED_RMSNORM):
        assert_parses(helper)
        assert not helper.startswith((" ", "\n")) and helper.endswith("\n")
