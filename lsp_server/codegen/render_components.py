"""Text-encoder TP and VAE-P planner modules for components cache-dit does not support yet.

* Text encoder: a planner that shards every decoder layer from the encoder config's own
  `base_model_tp_plan` (the HF tensor-parallel plan: `colwise` / `rowwise` per layer path).
* VAE: a planner that reuses cache-dit's tiled encode/decode distribution of the closest shipped
  VAE planner (Wan-style tile attributes or AutoencoderKL-style), registered under the exact
  class name.

Both are marked `CDIT-REVIEW`: they are starting points to verify with TE-P / VAE-P runs.
"""

from __future__ import annotations

from .layout import INDENT, comment, docstring, quote
from .naming import snake_case
from .plan import ComponentPlan
from .source_files import read_source_text


def component_module(component: ComponentPlan) -> str:
    return snake_case(component.class_name)


def planner_class(component: ComponentPlan) -> str:
    suffix = (
        "TensorParallelismPlanner"
        if component.kind == "text_encoder"
        else ("DataParallelismPlanner")
    )
    return f"{component.class_name}{suffix}"


def text_encoder_module(component: ComponentPlan, width: int) -> str:
    b = INDENT
    cls = planner_class(component)
    lines = [
        *docstring(
            f"Text-encoder TP for `{component.class_name}` (generated; review `CDIT-REVIEW`).",
            indent="",
            width=width,
        ),
        "",
        "from typing import Any",
        "",
        "import torch",
        "from torch.distributed.tensor.parallel import (",
        f"{b}ColwiseParallel,",
        f"{b}RowwiseParallel,",
        f"{b}parallelize_module,",
        ")",
        "",
        "from ...logger import init_logger",
        "from ..config import ParallelismConfig",
        "from .register import (",
        f"{b}TextEncoderTensorParallelismPlanner,",
        f"{b}TextEncoderTensorParallelismPlannerRegister,",
        ")",
        "",
        "logger = init_logger(__name__)",
        "",
        '_STYLES = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}',
        "",
        "",
        f"@TextEncoderTensorParallelismPlannerRegister.register({quote(component.class_name)})",
        f"class {cls}(TextEncoderTensorParallelismPlanner):",
        *docstring(
            "Shards each layer as the encoder config's `base_model_tp_plan` says.",
            indent=b,
            width=width,
        ),
        "",
        f"{b}def _apply(",
        f"{2 * b}self,",
        f"{2 * b}text_encoder: torch.nn.Module,",
        f"{2 * b}parallelism_config: ParallelismConfig,",
        f"{2 * b}**kwargs: Any,",
        f"{b}) -> tuple[torch.nn.Module, list[dict[str, Any]]]:",
        f"{2 * b}tp_mesh = self.mesh(parallelism_config=parallelism_config)",
        *comment(
            "CDIT-REVIEW: attention code that reshapes with a head count attribute (instead "
            "of `view(..., -1, head_dim)`) needs that attribute divided by the TP size.",
            indent=2 * b,
            width=width,
        ),
        f'{2 * b}config = getattr(text_encoder, "config", None)',
        f'{2 * b}tp_plan = dict(getattr(config, "base_model_tp_plan", None) or {{}})',
        f'{2 * b}base = getattr(text_encoder, "base_model", text_encoder)',
        f"{2 * b}per_list: dict[str, dict[str, Any]] = {{}}",
        f"{2 * b}for key, style in tp_plan.items():",
        f'{3 * b}head, sep, path = key.partition(".*.")',
        f"{3 * b}if not sep or style not in _STYLES:",
        f'{4 * b}logger.warning(f"TE-P: skipping {{key}} ({{style}})")',
        f"{4 * b}continue",
        f"{3 * b}per_list.setdefault(head, {{}})[path] = _STYLES[style]()",
        f"{2 * b}layer_plans = []",
        f"{2 * b}for head, layer_plan in per_list.items():",
        f"{3 * b}for layer in base.get_submodule(head):",
        f"{4 * b}parallelize_module(",
        f"{5 * b}module=layer,",
        f"{5 * b}device_mesh=tp_mesh,",
        f"{5 * b}parallelize_plan=layer_plan,",
        f"{4 * b})",
        f"{4 * b}layer_plans.append(layer_plan)",
        f"{2 * b}return text_encoder, layer_plans",
    ]
    return "\n".join(lines) + "\n"


def vae_module(component: ComponentPlan, width: int) -> str:
    b = INDENT
    cls = planner_class(component)
    source = read_source_text(component.source or "")  # checked by `checkout_files`
    if "tile_sample_min_height" in source:
        parent_module, parent = ".autoencoder_kl_wan", "AutoencoderKLWanDataParallelismPlanner"
    else:
        parent_module, parent = ".autoencoder_kl", "AutoencoderKLDataParallelismPlanner"
    lines = [
        *docstring(
            f"VAE-P for `{component.class_name}` (generated; review `CDIT-REVIEW`).",
            indent="",
            width=width,
        ),
        "",
        "from typing import Any",
        "",
        "import torch",
        "",
        "from ..config import ParallelismConfig",
        f"from {parent_module} import {parent}",
        "from .register import AutoEncoderDataParallelismPlannerRegister",
        "",
        "",
        f"@AutoEncoderDataParallelismPlannerRegister.register({quote(component.class_name)})",
        f"class {cls}({parent}):",
        *docstring(
            f"Distributes tiled encode/decode like `{parent}`.",
            indent=b,
            width=width,
        ),
        "",
        f"{b}def _apply(",
        f"{2 * b}self,",
        f"{2 * b}auto_encoder: torch.nn.Module,",
        f"{2 * b}parallelism_config: ParallelismConfig,",
        f"{2 * b}**kwargs: Any,",
        f"{b}) -> torch.nn.Module:",
        *comment(
            f"CDIT-REVIEW: the parent's tiling code assumes the tile attributes and "
            f"`blend_v`/`blend_h` helpers of its own VAE; check `{component.class_name}` has "
            "the same ones.",
            indent=2 * b,
            width=width,
        ),
        f"{2 * b}dp_mesh = self.mesh(parallelism_config=parallelism_config)",
        f"{2 * b}return self.parallelize_tiling(auto_encoder=auto_encoder, dp_mesh=dp_mesh)",
    ]
    return "\n".join(lines) + "\n"
