"""The `cache_dit.generate` CLI example (checkout target): factory, env mapping, exports."""

from __future__ import annotations

from .layout import INDENT, comment, quote
from .plan import ExamplePlan, IntegrationPlan
from .source_files import source_module

_IMAGE_TASKS = {"I2V", "IE2I", "FLF2V"}


def example_default(plan: IntegrationPlan) -> str:
    """The model id / path the example defaults to (must equal its env-mapping value)."""
    return plan.model.default_model_id or plan.model.local_path or ""


def example_function(plan: IntegrationPlan, func_name: str, width: int) -> str:
    example = plan.example
    assert example is not None
    b = INDENT
    default = example_default(plan)
    pipeline = plan.model.pipeline_class or "DiffusionPipeline"
    lines = [
        f"@ExampleRegister.register({quote(example.name)}, default={quote(default)})",
        f"def {func_name}(args: argparse.Namespace, **kwargs) -> Example:",
        f"{b}from {_pipeline_module(plan)} import {pipeline}",
        "",
    ]
    if example.task_type in _IMAGE_TASKS:
        lines += comment(
            "CDIT-REVIEW: this task needs an input image; pass --image-path",
            indent=b,
            width=width,
        )
        lines += [
            f"{b}image = None",
            f"{b}if args.image_path is not None:",
            f'{2 * b}image = load_image(args.image_path).convert("RGB")',
            "",
        ]
    init = [
        f"task_type=ExampleType.{example.task_type}",
        f"model_name_or_path=_path({quote(default)})",
        f"pipeline_class={pipeline}",
    ]
    lines += [
        f"{b}return Example(",
        f"{2 * b}args=args,",
        f"{2 * b}init_config=ExampleInitConfig(",
        *(f"{3 * b}{arg}," for arg in init),
    ]
    if example.enable_separate_cfg is not None:
        lines += [
            f"{3 * b}extra_optimize_kwargs={{",
            f'{4 * b}"enable_separate_cfg": {example.enable_separate_cfg},',
            f"{3 * b}}},",
        ]
    lines += [
        f"{2 * b}),",
        f"{2 * b}input_data=ExampleInputData(",
        *(f"{3 * b}{arg}," for arg in _inputs(example)),
        f"{2 * b}),",
        f"{b})",
    ]
    return "\n".join(lines) + "\n"


def _pipeline_module(plan: IntegrationPlan) -> str:
    """Where the pipeline class is imported from: diffusers exports its pipelines at the top."""
    if not plan.model.pipeline_class or not plan.model.sources.pipeline:
        return "diffusers"
    module = source_module(plan.model.sources.pipeline)  # checked by `checkout_files`
    return "diffusers" if not module or module.startswith("diffusers") else module


def _inputs(example: ExamplePlan) -> list[str]:
    args = [f"prompt={quote(example.prompt)}"]
    for name, value in (
        ("height", example.height),
        ("width", example.width),
        ("num_frames", example.num_frames),
        ("num_inference_steps", example.num_inference_steps),
        ("guidance_scale", example.guidance_scale),
    ):
        if value is not None:
            args.append(f"{name}={value!r}")
    if example.task_type in _IMAGE_TASKS:
        args.append("image=image")
    return args


def env_entry(plan: IntegrationPlan) -> str:
    assert plan.example is not None
    return f"{quote(plan.example.env_var)}: {quote(example_default(plan))}"
