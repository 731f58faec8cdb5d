"""`render_components`: text-encoder TP and VAE-P planner modules, one test per rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from render_cases import WIDTH, assert_code, assert_delta, code

from lsp_server.codegen.plan import ComponentPlan
from lsp_server.codegen.render_components import (
    component_module,
    planner_class,
    text_encoder_module,
    vae_module,
)

TEXT_ENCODER = ComponentPlan("text_encoder", "UMT5EncoderModel", "text_encoder")


def _vae(source: Path) -> ComponentPlan:
    return ComponentPlan("vae", "AutoencoderKLAcme", "vae", library="diffusers", source=str(source))


@pytest.fixture
def kl_vae(tmp_path: Path) -> ComponentPlan:
    source = tmp_path / "autoencoder_kl_acme.py"
    source.write_text("class AutoencoderKLAcme:\n    tile_sample_min_size = 512\n")
    return _vae(source)


def test_module_and_class_names_follow_the_component_class() -> None:
    assert component_module(TEXT_ENCODER) == "umt5_encoder_model"
    assert planner_class(TEXT_ENCODER) == "UMT5EncoderModelTensorParallelismPlanner"
    vae = ComponentPlan("vae", "AutoencoderKLAcme", "vae")
    assert component_module(vae) == "autoencoder_kl_acme"
    assert planner_class(vae) == "AutoencoderKLAcmeDataParallelismPlanner"


def test_text_encoder_planner_shards_each_layer_by_the_configs_tp_plan() -> None:
    assert_code(
        text_encoder_module(TEXT_ENCODER, WIDTH),
        code(
            '''
            """Text-encoder TP for `UMT5EncoderModel` (generated; review `CDIT-REVIEW`)."""

            from typing import Any

            import torch
            from torch.distributed.tensor.parallel import (
                ColwiseParallel,
                RowwiseParallel,
                parallelize_module,
            )

            from ...logger import init_logger
            from ..config import ParallelismConfig
            from .register import (
                TextEncoderTensorParallelismPlanner,
                TextEncoderTensorParallelismPlannerRegister,
            )

            logger = init_logger(__name__)

            _STYLES = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}


            @TextEncoderTensorParallelismPlannerRegister.register("UMT5EncoderModel")
            class UMT5EncoderModelTensorParallelismPlanner(TextEncoderTensorParallelismPlanner):
                """Shards each layer as the encoder config's `base_model_tp_plan` says."""

                def _apply(
                    self,
                    text_encoder: torch.nn.Module,
                    parallelism_config: ParallelismConfig,
                    **kwargs: Any,
                ) -> tuple[torch.nn.Module, list[dict[str, Any]]]:
                    tp_mesh = self.mesh(parallelism_config=parallelism_config)
                    # CDIT-REVIEW: attention code that reshapes with a head count attribute
                    #   (instead of `view(..., -1, head_dim)`) needs that attribute divided
                    #   by the TP size.
                    config = getattr(text_encoder, "config", None)
                    tp_plan = dict(getattr(config, "base_model_tp_plan", None) or {})
                    base = getattr(text_encoder, "base_model", text_encoder)
                    per_list: dict[str, dict[str, Any]] = {}
                    for key, style in tp_plan.items():
                        head, sep, path = key.partition(".*.")
                        if not sep or style not in _STYLES:
                            logger.warning(f"TE-P: skipping {key} ({style})")
                            continue
                        per_list.setdefault(head, {})[path] = _STYLES[style]()
                    layer_plans = []
                    for head, layer_plan in per_list.items():
                        for layer in base.get_submodule(head):
                            parallelize_module(
                                module=layer,
                                device_mesh=tp_mesh,
                                parallelize_plan=layer_plan,
                            )
                            layer_plans.append(layer_plan)
                    return text_encoder, layer_plans
            '''
        ),
    )


def test_vae_planner_reuses_autoencoder_kl_tiling(kl_vae: ComponentPlan) -> None:
    assert_code(
        vae_module(kl_vae, WIDTH),
        code(
            '''
            """VAE-P for `AutoencoderKLAcme` (generated; review `CDIT-REVIEW`)."""

            from typing import Any

            import torch

            from ..config import ParallelismConfig
            from .autoencoder_kl import AutoencoderKLDataParallelismPlanner
            from .register import AutoEncoderDataParallelismPlannerRegister


            @AutoEncoderDataParallelismPlannerRegister.register("AutoencoderKLAcme")
            class AutoencoderKLAcmeDataParallelismPlanner(AutoencoderKLDataParallelismPlanner):
                """Distributes tiled encode/decode like
                `AutoencoderKLDataParallelismPlanner`.
                """

                def _apply(
                    self,
                    auto_encoder: torch.nn.Module,
                    parallelism_config: ParallelismConfig,
                    **kwargs: Any,
                ) -> torch.nn.Module:
                    # CDIT-REVIEW: the parent's tiling code assumes the tile attributes and
                    #   `blend_v`/`blend_h` helpers of its own VAE; check `AutoencoderKLAcme`
                    #   has the same ones.
                    dp_mesh = self.mesh(parallelism_config=parallelism_config)
                    return self.parallelize_tiling(auto_encoder=auto_encoder, dp_mesh=dp_mesh)
            '''
        ),
    )


def test_a_vae_with_wan_tile_attributes_reuses_the_wan_planner(
    kl_vae: ComponentPlan, tmp_path: Path
) -> None:
    wan = tmp_path / "autoencoder_kl_acme_video.py"
    wan.write_text("class AutoencoderKLAcme:\n    tile_sample_min_height = 256\n")
    assert_delta(
        vae_module(kl_vae, WIDTH),
        vae_module(_vae(wan), WIDTH),
        code(
            """
            @@
             from ..config import ParallelismConfig
            -from .autoencoder_kl import AutoencoderKLDataParallelismPlanner
            +from .autoencoder_kl_wan import AutoencoderKLWanDataParallelismPlanner
             from .register import AutoEncoderDataParallelismPlannerRegister
            @@
             @AutoEncoderDataParallelismPlannerRegister.register("AutoencoderKLAcme")
            -class AutoencoderKLAcmeDataParallelismPlanner(AutoencoderKLDataParallelismPlanner):
            +class AutoencoderKLAcmeDataParallelismPlanner(AutoencoderKLWanDataParallelismPlanner):
                 \"\"\"Distributes tiled encode/decode like
            -    `AutoencoderKLDataParallelismPlanner`.
            +    `AutoencoderKLWanDataParallelismPlanner`.
                 \"\"\"
            """
        ),
    )


def test_a_vae_source_that_cannot_be_read_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        vae_module(_vae(tmp_path / "missing.py"), WIDTH)
