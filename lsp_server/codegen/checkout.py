"""The cache-dit checkout target: every file a new-model integration touches (facts §7).

1. `caching/block_adapters/adapters.py`: the registered adapter factory, after the last one;
2. `caching/block_adapters/__init__.py`: its `_safe_import` export;
3. PatchFunctor (when needed): `caching/patch_functors/functor_<slug>.py` + export;
4. `distributed/transformers/<slug>.py`: CP planner (hook plan) and TP planner, activated in
   `_activate_cp_planners` / `_activate_tp_planners` of `distributed/transformers/planners.py`;
5. text-encoder / VAE planners for components the analysis reports unsupported, activated in
   their `planners.py`;
6. `_utils/examples.py`: env-var mapping entry, `__all__` entry, registered example factory;
   `_utils/__init__.py`: its export.

Before anything is generated, the register name is checked against every registered adapter
name in both prefix directions, and the CP/TP planner names (the transformer class name) and the
example name against theirs (`checkout_checks`). The whole modules are rendered by
`render_checkout_modules`; `checkout_specs` formats each file's code in that file's style.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .block_steps import stepped_cp_plan
from .checkout_checks import checkout_problems
from .checkout_layout import (
    ADAPTERS,
    ADAPTERS_INIT,
    FUNCTORS,
    TRANSFORMERS,
    locate_package,
)
from .checkout_specs import CheckoutSpecs
from .edits import FileSpec
from .forward_copy import exchanging_lists
from .layout import quote
from .naming import GeneratedNames
from .plan import CACHE_PART, CP_PART, FieldError, IntegrationPlan
from .regions import Anchor, ImportNeed, Region
from .render_adapter import checkout_adapter_factory, safe_import_line
from .render_checkout_modules import functor_module, planner_module
from .render_components import component_module, planner_class, text_encoder_module, vae_module
from .render_example import env_entry, example_function
from .render_functor import FunctorCode, functor_code
from .style import CodeStyle, detect_style

TEXT_ENCODERS = "distributed/text_encoders"
AUTOENCODERS = "distributed/autoencoders"
EXAMPLES = "_utils/examples.py"
UTILS_INIT = "_utils/__init__.py"


@dataclass
class CheckoutFiles:
    specs: list[FileSpec] = field(default_factory=list)
    errors: list[FieldError] = field(default_factory=list)
    review: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    package: Path | None = None
    style: CodeStyle | None = None
    # parts that cannot be generated into this checkout (name conflicts, a forward that cannot
    # be copied): render again with them refused
    refused: dict[str, tuple[str, ...]] = field(default_factory=dict)


def checkout_files(
    plan: IntegrationPlan, names: GeneratedNames, style: CodeStyle | None = None
) -> CheckoutFiles:
    out = CheckoutFiles()
    assert plan.target.root is not None
    package = locate_package(plan.target.root)
    if package is None:
        out.errors.append(
            FieldError(
                "target.root",
                f"{plan.target.root} is not a cache-dit checkout (no src/cache_dit/{ADAPTERS})",
            )
        )
        return out
    out.package = package
    style = style or detect_style(package)
    out.style = style
    errors, refused = checkout_problems(plan, names, package, package / EXAMPLES)
    out.errors += errors
    if out.errors or refused:
        out.refused = refused
        return out

    width = style.line_length
    files = CheckoutSpecs(package, style)
    functor = None
    if plan.generates_cache and plan.cache.patch_functor:
        functor = functor_code(plan, names.functor_class, width)
        if functor.refusal is not None:
            out.refused = {CACHE_PART: (functor.refusal,)}
            return out
        _functor_files(plan, names, functor, files, out, width)
    if plan.generates_cache:
        _adapter_regions(plan, names, functor, files, width)
    if not _planner_files(plan, names, functor, files, out, width):
        return out
    _component_files(plan, files, out, width)
    if plan.generates_cache:
        _example_regions(plan, names, files, width)
    out.specs = files.done()
    return out


def _functor_files(
    plan: IntegrationPlan,
    names: GeneratedNames,
    functor: FunctorCode,
    files: CheckoutSpecs,
    out: CheckoutFiles,
    width: int,
) -> None:
    """The PatchFunctor module and its `_safe_import` export."""
    out.review += functor.review
    out.applied += functor.applied
    exchanging = exchanging_lists(plan.cache.functor_reasons)
    if exchanging:
        out.warnings.append(
            f"blocks of {', '.join(f'`{a}`' for a in exchanging)} pass values to later blocks: "
            "keep `Bn_compute_blocks=0` in the cache config (a block computed after blocks that "
            "caching skipped would read values they never made); the standalone target's "
            "`enable()` checks it, a cache-dit checkout cannot"
        )
    files.whole(f"{FUNCTORS}/{names.functor_module}.py", functor_module(plan, functor, width))
    files.regions(
        f"{FUNCTORS}/__init__.py",
        Region(
            id=f"assign:{names.functor_class}",
            kind="assign",
            name=names.functor_class,
            code=safe_import_line(
                names.functor_class, f".{names.functor_module}", names.functor_class
            ),
            anchor=Anchor(call="_safe_import", first_arg=".functor_"),
        ),
    )


def _planner_files(
    plan: IntegrationPlan,
    names: GeneratedNames,
    functor: FunctorCode | None,
    files: CheckoutSpecs,
    out: CheckoutFiles,
    width: int,
) -> bool:
    """The CP / TP planner module and its activations; False when the CP part is refused (a
    hook plan input that per-block steps compute inside the step)."""
    cp, cp_missing = _cp_planner_kind(plan, out)
    tp = plan.generates_tp
    hooks = plan.context_parallel.plan
    if cp and plan.context_parallel.axis_split is not None:
        out.refused = {
            CP_PART: (
                "context parallelism over an input axis that is not the token sequence needs "
                "hooks on the transformer (size checks, tables sliced per rank, the output "
                "gathered) that a checkout's planner cannot install; generate the standalone "
                "module for it",
            )
        }
        return False
    if cp and functor is not None and functor.steps:
        hooks, why = stepped_cp_plan(hooks, functor.steps)
        if why is not None:
            out.refused = {CP_PART: (why,)}
            return False
    if not (cp or tp or cp_missing):
        return True
    module_code, tp_applied = planner_module(plan, names, cp, tp, width, cp_missing, hooks=hooks)
    out.applied += tp_applied
    files.whole(f"{TRANSFORMERS}/{names.planner_module}.py", module_code)
    for function, cls, kind in _activations(names, cp or bool(cp_missing), tp):
        files.regions(
            f"{TRANSFORMERS}/planners.py",
            _activation(function, cls, f".{names.planner_module}", f"ImportError{kind}"),
        )
    return True


def _cp_planner_kind(plan: IntegrationPlan, out: CheckoutFiles) -> tuple[bool, str | None]:
    """(the CP hook planner is generated, else why a registered CP planner raises or None).

    A model the analysis gave no CP plan (or whose CP part is disabled) gets a registered
    planner that raises with the reason, so a CP run stops with it instead of cache-dit's
    "No planner registered" (a refused part keeps no planner: its name may be the problem)."""
    cp = plan.generates_cp
    no_plan = not (plan.context_parallel.enabled and plan.context_parallel.plan)
    cp_missing = (
        plan.not_generated().get(CP_PART) if no_plan and CP_PART not in plan.refused else None
    )
    beyond = _beyond_hooks(plan) if cp else None
    if beyond is not None:
        # the registered planner raises with the reason (the standalone module carries it)
        cp, cp_missing = False, f"not generated for a cache-dit checkout: {beyond}"
        out.warnings.append(f"context parallelism {cp_missing}")
    return cp, cp_missing


def _activations(names: GeneratedNames, cp: bool, tp: bool) -> list[tuple[str, str, str]]:
    """(activation function, planner class, planner kind) for `planners.py`; `cp`: a CP planner
    is registered (the hook plan, or one that raises)."""
    activations = []
    if cp:
        activations.append(
            ("_activate_cp_planners", names.cp_planner_class, "ContextParallelismPlanner")
        )
    if tp:
        activations.append(
            ("_activate_tp_planners", names.tp_planner_class, "TensorParallelismPlanner")
        )
    if tp and not cp:
        # cache-dit activates TP planners only while its TP registry is empty, and the CP
        # activation fills it (its modules register TP planners too): a TP-only module is
        # imported with the CP planners as well, so its planner is registered either way
        activations.append(
            ("_activate_cp_planners", names.tp_planner_class, "TensorParallelismPlanner")
        )
    return activations


def _component_files(
    plan: IntegrationPlan, files: CheckoutSpecs, out: CheckoutFiles, width: int
) -> None:
    """A text-encoder TP or VAE-P planner module per generated component, and its activation."""
    for component in plan.generated_components():
        module = component_module(component)
        cls = planner_class(component)
        if component.kind == "text_encoder":
            files.whole(f"{TEXT_ENCODERS}/{module}.py", text_encoder_module(component, width))
            function = "_activate_text_encoder_tp_planners"
            folder = TEXT_ENCODERS
        else:
            files.whole(f"{AUTOENCODERS}/{module}.py", vae_module(component, width))
            function = "_activate_auto_encoder_dp_planners"
            folder = AUTOENCODERS
        files.regions(f"{folder}/planners.py", _activation(function, cls, f".{module}", None))
        out.review.append(f"{component.kind} planner for {component.class_name}: review and run")


def _adapter_regions(
    plan: IntegrationPlan,
    names: GeneratedNames,
    functor: FunctorCode | None,
    files: CheckoutSpecs,
    width: int,
) -> None:
    """The registered adapter factory and its export."""
    files.regions(
        ADAPTERS,
        Region(
            id=f"def:{names.adapter_func}",
            kind="def",
            name=names.adapter_func,
            code=checkout_adapter_factory(
                plan, names.adapter_func, functor and names.functor_class, width
            ),
            anchor=Anchor(decorator="BlockAdapterRegister.register"),
            imports=(
                ImportNeed("forward_pattern", "ForwardPattern", 2),
                ImportNeed("block_adapters", "BlockAdapter", 1),
                ImportNeed("block_registers", "BlockAdapterRegister", 1),
                *(
                    (ImportNeed("torch"),)
                    if any(b.container != "ModuleList" for b in plan.cache.block_lists)
                    else ()
                ),
            ),
        ),
    )
    files.regions(
        ADAPTERS_INIT,
        Region(
            id=f"assign:{names.adapter_func}",
            kind="assign",
            name=names.adapter_func,
            code=safe_import_line(names.adapter_func, ".adapters", names.adapter_func),
            anchor=Anchor(call="_safe_import", first_arg=".adapters"),
        ),
    )


def _example_regions(
    plan: IntegrationPlan, names: GeneratedNames, files: CheckoutSpecs, width: int
) -> None:
    """The CLI example: env mapping, `__all__` entry, registered factory, export (it runs
    `cache_dit.enable_cache(pipe)` through the registered adapter, so it goes with the cache)."""
    assert plan.example is not None
    needs = [
        ImportNeed("argparse"),
        *(
            ImportNeed("registers", obj, 1)
            for obj in (
                "Example",
                "ExampleInitConfig",
                "ExampleInputData",
                "ExampleRegister",
                "ExampleType",
            )
        ),
    ]
    if plan.example.task_type in ("I2V", "IE2I", "FLF2V"):
        needs.append(ImportNeed("diffusers.utils", "load_image"))
    files.regions(
        EXAMPLES,
        Region(
            id=f"env:{plan.example.env_var}",
            kind="dict_entry",
            name=plan.example.env_var,
            container="_env_path_mapping",
            code=env_entry(plan),
        ),
        Region(
            id=f"all:{names.example_func}",
            kind="list_entry",
            name=names.example_func,
            container="__all__",
            code=quote(names.example_func),
        ),
        Region(
            id=f"def:{names.example_func}",
            kind="def",
            name=names.example_func,
            code=example_function(plan, names.example_func, width),
            anchor=Anchor(decorator="ExampleRegister.register"),
            imports=tuple(needs),
        ),
    )
    files.regions(
        UTILS_INIT,
        Region(
            id=f"assign:{names.example_func}",
            kind="assign",
            name=names.example_func,
            code=safe_import_line(names.example_func, ".examples", names.example_func),
            anchor=Anchor(call="_safe_import", first_arg=".examples"),
        ),
    )


def _activation(function: str, cls: str, module: str, fallback: str | None) -> Region:
    args = [quote(module), quote(cls)] + ([fallback] if fallback else [])
    body = "".join(f"    {a},\n" for a in args)
    return Region(
        id=f"activate:{function}.{cls}",
        kind="function_assign",
        name=cls,
        container=function,
        code=f"{cls} = _safe_import(  # noqa: F841\n{body})\n",
        anchor=Anchor(call="_safe_import"),
    )


def _beyond_hooks(plan: IntegrationPlan) -> str | None:
    """Why a registered cache-dit planner (a hook plan alone) cannot carry this CP part: the
    standalone module also permutes a mask into all-to-all order at every block. (Keeping the
    attention outside the split lists local is done by the standalone module only; a checkout
    planner leaves cache-dit's config on every processor, as before.)"""
    cp = plan.context_parallel
    if cp.stream_masks:
        return (
            f"the `{cp.stream_masks[0].mask}` mask of `{cp.stream_masks[0].list_attr}` must be "
            f"split with `{cp.stream_masks[0].stream}` at every block, which a registered hook "
            "plan cannot do: generate the standalone target for context parallelism"
        )
    if cp.mask_reorder is not None:
        return (
            f"the `{cp.mask_reorder.mask}` mask of `{cp.mask_reorder.list_attr}` must be "
            "permuted into all-to-all order at every block, which a registered hook plan "
            "cannot do: generate the standalone target for context parallelism"
        )
    return None
