"""Run in a fresh interpreter: import cache-dit from a generated checkout and use the new models.

Usage: `python checkout_check.py SRC_DIR` (SRC_DIR holds the `cache_dit` package copy). Prints
one JSON object: where cache_dit was imported from, and per model whether
`cache_dit.enable_cache(pipe)` found the new adapter by the pipeline's class name, the cached
steps of a 4-step run, whether the output with caching disabled equals the baseline, whether the
CLI example and the CP/TP planners are registered under their names.

The pipelines are minimal `DiffusionPipeline` subclasses named `<RegisterName>TinyPipeline`
(the real ones need text encoders and tokenizers from a hub); their `__call__` runs a 4-step
loop over the tiny random-weight transformer.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

STEPS = 4


def _ideogram4() -> tuple[Any, dict[str, Any]]:
    import torch
    from diffusers.models.transformers.transformer_ideogram4 import (
        LLM_TOKEN_INDICATOR,
        OUTPUT_IMAGE_INDICATOR,
        Ideogram4Transformer2DModel,
    )

    torch.manual_seed(0)
    model = Ideogram4Transformer2DModel(
        in_channels=4,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=2,
        intermediate_size=32,
        adaln_dim=16,
        llm_features_dim=16,
        mrope_section=(2, 1, 1),
    )
    length = 12
    indicator = torch.full((1, length), OUTPUT_IMAGE_INDICATOR)
    indicator[:, :4] = LLM_TOKEN_INDICATOR
    positions = torch.zeros(1, length, 3, dtype=torch.long)
    positions[..., 1] = torch.arange(length)
    g = torch.Generator().manual_seed(1)
    inputs = {
        "hidden_states": torch.randn(1, length, 4, generator=g),
        "timestep": torch.tensor([0.5]),
        "encoder_hidden_states": torch.randn(1, length, 16, generator=g),
        "position_ids": positions,
        "segment_ids": torch.zeros(1, length, dtype=torch.long),
        "indicator": indicator,
        "return_dict": False,
    }
    return model.eval(), inputs


def _motif_video() -> tuple[Any, dict[str, Any]]:
    import torch
    from diffusers.models.transformers.transformer_motif_video import (
        MotifVideoTransformer3DModel,
    )

    torch.manual_seed(0)
    model = MotifVideoTransformer3DModel(
        in_channels=4,
        out_channels=4,
        num_attention_heads=2,
        attention_head_dim=8,
        num_layers=2,
        num_single_layers=2,
        patch_size=2,
        patch_size_t=1,
        text_embed_dim=16,
        rope_axes_dim=(2, 2, 4),
    )
    g = torch.Generator().manual_seed(1)
    inputs = {
        "hidden_states": torch.randn(1, 4, 2, 4, 4, generator=g),
        "timestep": torch.tensor([500]),
        "encoder_hidden_states": torch.randn(1, 6, 16, generator=g),
        "return_dict": False,
    }
    return model.eval(), inputs


def _nucleus_moe_image() -> tuple[Any, dict[str, Any]]:
    import torch
    from diffusers.models.transformers.transformer_nucleusmoe_image import (
        NucleusMoEImageTransformer2DModel,
    )

    torch.manual_seed(0)
    model = NucleusMoEImageTransformer2DModel(
        patch_size=2,
        in_channels=16,
        out_channels=4,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=16,
        axes_dims_rope=(2, 2, 4),
        moe_enabled=False,
    )
    g = torch.Generator().manual_seed(1)
    inputs = {
        "hidden_states": torch.randn(1, 16, 16, generator=g),
        "img_shapes": [(1, 4, 4)],
        "encoder_hidden_states": torch.randn(1, 6, 16, generator=g),
        "timestep": torch.tensor([0.5]),
        "return_dict": False,
    }
    return model.eval(), inputs


MODELS = {
    "Ideogram4": (_ideogram4, "ideogram4"),
    "MotifVideo": (_motif_video, "motif_video"),
    "NucleusMoEImage": (_nucleus_moe_image, "nucleus_moe_image"),
}


def tiny_pipeline(prefix: str, transformer: Any) -> Any:
    import torch
    from diffusers import DiffusionPipeline

    def __init__(self: Any, transformer: Any) -> None:
        DiffusionPipeline.__init__(self)
        self.register_modules(transformer=transformer)

    def __call__(self: Any, inputs: dict[str, Any]) -> Any:
        out = None
        with torch.no_grad():
            for _ in range(STEPS):
                out = self.transformer(**inputs)[0]
        return out

    cls = type(
        f"{prefix}TinyPipeline", (DiffusionPipeline,), {"__init__": __init__, "__call__": __call__}
    )
    return cls(transformer)


def main(src: str) -> int:
    sys.path.insert(0, src)
    os.environ.setdefault("CACHE_DIT_LOG_LEVEL", "error")
    import cache_dit
    import cache_dit._utils
    import torch
    from cache_dit._utils.registers import ExampleRegister
    from cache_dit.caching.block_adapters import BlockAdapterRegister
    from cache_dit.distributed.transformers.planners import (
        _activate_cp_planners,
        _activate_tp_planners,
    )
    from cache_dit.distributed.transformers.register import (
        ContextParallelismPlannerRegister,
        TensorParallelismPlannerRegister,
    )

    _activate_cp_planners()
    _activate_tp_planners()
    report: dict[str, Any] = {"cache_dit": cache_dit.__file__, "models": {}}
    for name, (build, example) in MODELS.items():
        model, inputs = build()
        with torch.no_grad():
            baseline = model(**inputs)[0]
        pipe = tiny_pipeline(name, model)
        entry: dict[str, Any] = {
            "supported": BlockAdapterRegister.is_supported(pipe),
            "adapter": BlockAdapterRegister._adapters.get(name).__name__
            if name in BlockAdapterRegister._adapters
            else None,
        }
        config = cache_dit.DBCacheConfig(
            Fn_compute_blocks=1,
            Bn_compute_blocks=0,
            residual_diff_threshold=10.0,
            max_warmup_steps=0,
        )
        cache_dit.enable_cache(pipe, cache_config=config)
        pipe(inputs)
        entry["cached_steps"] = [s.cached_steps for s in cache_dit.summary(pipe)]
        cache_dit.disable_cache(pipe)
        with torch.no_grad():
            entry["equal_after_disable"] = bool(torch.equal(model(**inputs)[0], baseline))
        entry["example"] = example in ExampleRegister._example_registry
        cls_name = type(model).__name__
        for kind, register in (
            ("cp", ContextParallelismPlannerRegister),
            ("tp", TensorParallelismPlannerRegister),
        ):
            try:
                entry[f"{kind}_planner"] = register.get_planner(cls_name).__name__
            except ValueError:
                entry[f"{kind}_planner"] = None
        report["models"][name] = entry
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
