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
example name against theirs (`naming.prefix_conflicts`).
"""

from __future__ import annotations

import ast
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst

from .block_steps import stepped_cp_plan
from .checkout_layout import (
    ADAPTERS,
    ADAPTERS_INIT,
    FUNCTORS,
    PACKAGE,
    TRANSFORMERS,
    locate_package,
)
from .edits import FileSpec
from .imports import import_block
from .layout import INDENT, docstring, quote, raise_lines
from .naming import GeneratedNames, describe_conflict, prefix_conflicts
from .plan import CACHE_PART, CP_PART, TP_PART, FieldError, IntegrationPlan, component_part
from .regions import Anchor, ImportNeed, Region
from .render_adapter import checkout_adapter_factory, safe_import_line
from .render_components import component_module, planner_class, text_encoder_module, vae_module
from .render_cp import MERGE_HELPER, cp_plan_body
from .render_example import env_entry, example_function
from .render_functor import FunctorCode, functor_code
from .render_ring_masks import ring_masks_code, ring_masks_enable_lines
from .render_tp import tp_planner_code
from .source_files import SourceNotFound, source_path
from .style import CodeStyle, detect_style, format_snippet

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
    if not (plan.model.default_model_id or plan.model.local_path):
        out.errors.append(
            FieldError("model.defaultModelId", "the CLI example needs a model id or local path")
        )
    if plan.generates_cache and plan.model.pipeline_class and plan.model.sources.pipeline:
        try:
            source_path(plan.model.sources.pipeline)
        except SourceNotFound as exc:
            out.errors.append(
                FieldError("model.sources.pipeline", f"the CLI example imports from it: {exc}")
            )
    errors, refused = _name_problems(plan, names, package)
    out.errors += errors
    if out.errors or refused:
        out.refused = refused
        return out

    width = style.line_length
    files = _Files(package, style, out)
    cp = plan.generates_cp
    tp = plan.generates_tp

    functor = None
    if plan.generates_cache and plan.cache.patch_functor:
        functor = functor_code(plan, names.functor_class, width)
        if functor.refusal is not None:
            out.refused = {CACHE_PART: (functor.refusal,)}
            return out
        out.review += functor.review
        out.applied += functor.applied
        files.whole(f"{FUNCTORS}/{names.functor_module}.py", _functor_module(plan, functor, width))
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

    if plan.generates_cache:
        _adapter_regions(plan, names, functor, files, width)

    # a model the analysis gave no CP plan (or whose CP part is disabled) gets a registered
    # planner that raises with the reason, so a CP run stops with it instead of cache-dit's
    # "No planner registered" (a refused part keeps no planner: its name may be the problem)
    no_plan = not (plan.context_parallel.enabled and plan.context_parallel.plan)
    cp_missing = (
        plan.not_generated().get(CP_PART) if no_plan and CP_PART not in plan.refused else None
    )
    hooks = plan.context_parallel.plan
    beyond = _beyond_hooks(plan) if cp else None
    if beyond is not None:
        # the registered planner raises with the reason (the standalone module carries it)
        cp, cp_missing = False, f"not generated for a cache-dit checkout: {beyond}"
        out.warnings.append(f"context parallelism {cp_missing}")
    if cp and functor is not None and functor.steps:
        hooks, why = stepped_cp_plan(hooks, functor.steps)
        if why is not None:
            out.refused = {CP_PART: (why,)}
            return out
    if cp or tp or cp_missing:
        module_code, tp_applied = _planner_module(
            plan, names, cp, tp, width, cp_missing, hooks=hooks
        )
        out.applied += tp_applied
        files.whole(f"{TRANSFORMERS}/{names.planner_module}.py", module_code)
        activations = []
        if cp or cp_missing:
            activations.append(
                ("_activate_cp_planners", names.cp_planner_class, "ContextParallelismPlanner")
            )
        if tp:
            activations.append(
                ("_activate_tp_planners", names.tp_planner_class, "TensorParallelismPlanner")
            )
        if tp and not (cp or cp_missing):
            # cache-dit activates TP planners only while its TP registry is empty, and the CP
            # activation fills it (its modules register TP planners too): a TP-only module is
            # imported with the CP planners as well, so its planner is registered either way
            activations.append(
                ("_activate_cp_planners", names.tp_planner_class, "TensorParallelismPlanner")
            )
        for function, cls, kind in activations:
            files.regions(
                f"{TRANSFORMERS}/planners.py",
                _activation(function, cls, f".{names.planner_module}", f"ImportError{kind}"),
            )

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

    if plan.generates_cache:
        _example_regions(plan, names, files, width)
    out.specs = files.done()
    return out


def _adapter_regions(
    plan: IntegrationPlan,
    names: GeneratedNames,
    functor: FunctorCode | None,
    files: _Files,
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
    plan: IntegrationPlan, names: GeneratedNames, files: _Files, width: int
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


class _Files:
    """Collects file specs, formatting generated code in each file's own style."""

    def __init__(self, package: Path, style: CodeStyle, out: CheckoutFiles) -> None:
        self.package = package
        self.style = style
        self.out = out
        self.whole_files: dict[str, str] = {}
        self.region_files: dict[str, list[Region]] = {}

    def module_name(self, relative: str) -> str:
        parts = relative[:-3].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        return ".".join([PACKAGE, *parts])

    def whole(self, relative: str, code: str) -> None:
        path = self.package / relative
        formatted = format_snippet(code, self.style, filename=str(path))
        self.whole_files[relative] = formatted

    def regions(self, relative: str, *regions: Region) -> None:
        path = self.package / relative
        indent = self.style.indent
        # a missing or broken file is reported by the edit planner
        with contextlib.suppress(OSError, UnicodeDecodeError, cst.ParserSyntaxError):
            indent = cst.parse_module(path.read_text(encoding="utf-8")).default_indent
        style = self.style.with_indent(indent)
        for region in regions:
            code = region.code
            if region.kind in ("def", "assign", "function_assign"):
                code = format_snippet(code, style, filename=str(path)).strip("\n") + "\n"
            self.region_files.setdefault(relative, []).append(
                Region(
                    id=region.id,
                    kind=region.kind,
                    name=region.name,
                    code=code,
                    container=region.container,
                    anchor=region.anchor,
                    imports=region.imports,
                )
            )

    def done(self) -> list[FileSpec]:
        specs = [
            FileSpec(
                path=self.package / rel,
                content=code,
                module_name=self.module_name(rel),
                must_exist=False,
            )
            for rel, code in self.whole_files.items()
        ]
        specs += [
            FileSpec(
                path=self.package / rel,
                regions=tuple(regions),
                module_name=self.module_name(rel),
            )
            for rel, regions in self.region_files.items()
        ]
        return specs


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


def _functor_module(plan: IntegrationPlan, functor, width: int) -> str:  # type: ignore[no-untyped-def]
    head = docstring(
        f"PatchFunctor for `{plan.model.transformer_class}` (generated; review `CDIT` marks).",
        indent="",
        width=width,
    )
    imports = import_block(
        [
            "from typing import Any",
            "import torch",
            "from .functor_base import PatchFunctor",
            *functor.imports,
        ],
        width=width,
    )
    parts = [functor.class_code]
    if functor.forward_code:
        parts.append(functor.forward_code)
    return (
        "\n".join(head)
        + "\n\n"
        + imports
        + "\n\n"
        + "\n\n".join(p.rstrip("\n") + "\n" for p in parts)
    )


def _cp_planner_head(cls: str, planner: str, summary: str, width: int) -> list[str]:
    """A registered CP planner class down to the signature of its `_apply`."""
    b = INDENT
    return [
        f"@ContextParallelismPlannerRegister.register({quote(cls)})",
        f"class {planner}(ContextParallelismPlanner):",
        *docstring(summary, indent=b, width=width),
        "",
        f"{b}def _apply(",
        f"{2 * b}self,",
        f"{2 * b}transformer: torch.nn.Module | None = None,",
        f"{2 * b}parallelism_config: ParallelismConfig | None = None,",
        f"{2 * b}**kwargs: Any,",
        f"{b}) -> _ContextParallelModelPlan:",
    ]


def _planner_module(
    plan: IntegrationPlan,
    names: GeneratedNames,
    cp: bool,
    tp: bool,
    width: int,
    cp_missing: str | None = None,
    hooks: dict[str, Any] | None = None,
) -> tuple[str, list[str]]:
    """`hooks`: the CP hook plan as the blocks are called (renamed for per-block steps)."""
    b = INDENT
    cls = plan.model.transformer_class
    imports = ["from typing import Any", "import torch", "from ..config import ParallelismConfig"]
    register = []
    parts: list[str] = []
    applied: list[str] = []
    if cp:
        imports += [
            "from ...distributed.core import _ContextParallelInput, _ContextParallelModelPlan, "
            "_ContextParallelOutput",
        ]
        register += ["ContextParallelismPlanner", "ContextParallelismPlannerRegister"]
        body, needs_merge = cp_plan_body(hooks or {}, width=width, indent=2 * b)
        summary = (
            f"Context-parallel hook plan for `{cls}` "
            f"({plan.context_parallel.approach or 'hook plan'})."
        )
        lines = [
            *_cp_planner_head(cls, names.cp_planner_class, summary, width),
            f'{2 * b}assert transformer is not None, "Transformer must be provided."',
        ]
        if plan.context_parallel.ring_masks:
            lines += [
                f"{2 * b}if parallelism_config is not None:",
                *ring_masks_enable_lines("parallelism_config", 3 * b, width),
            ]
        parts.append("\n".join(lines + body) + "\n")
        if needs_merge:
            parts.append(MERGE_HELPER)
        if plan.context_parallel.ring_masks:
            parts.append(ring_masks_code(width))
    elif cp_missing:
        imports.append("from ...distributed.core import _ContextParallelModelPlan")
        register += ["ContextParallelismPlanner", "ContextParallelismPlannerRegister"]
        summary = f"Context parallelism for `{cls}` is not part of this integration."
        lines = [
            *_cp_planner_head(cls, names.cp_planner_class, summary, width),
            *raise_lines(
                "NotImplementedError",
                f"context parallelism is not part of this integration: {cp_missing}",
                indent=2 * b,
                width=width,
            ),
        ]
        parts.append("\n".join(lines) + "\n")
    if tp:
        register += ["TensorParallelismPlanner", "TensorParallelismPlannerRegister"]
        imports += [
            "from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, "
            "parallelize_module",
            "from ..utils import shard_div_attr",
        ]
        code = tp_planner_code(
            plan,
            names.tp_planner_class,
            width=width,
            register=cls,
            # not wan's DistributedRMSNorm.from_rmsnorm: it takes torch.nn.RMSNorm only (reads
            # `normalized_shape`), while diffusers' RMSNorm has none
            norm_class="_DistributedRMSNorm",
        )
        if code.uses_replicate:
            imports.append("from torch.distributed.tensor import Replicate")
        parts.append(code.code)
        parts.extend(code.helpers)
        applied += [f"tensor parallelism: {a}" for a in code.applied]
    imports.append(f"from .register import {', '.join(register)}")
    head = docstring(
        f"CP and TP planners for `{cls}` (generated by cdit-integrate).",
        indent="",
        width=width,
    )
    text = (
        "\n".join(head)
        + "\n\n"
        + import_block(imports, width=width)
        + "\n\n"
        + "\n\n".join(p.rstrip("\n") + "\n" for p in parts)
    )
    return text, applied


def _name_problems(
    plan: IntegrationPlan, names: GeneratedNames, package: Path
) -> tuple[list[FieldError], dict[str, tuple[str, ...]]]:
    """Checks against the checkout's registries: (plan errors, refused parts -> why).

    A register name that a registered adapter shadows (or that shadows one) refuses the cache
    part (adapter, PatchFunctor, CLI example); a shadowed CP/TP planner name refuses that part;
    a VAE whose source cannot be read refuses its VAE-P part. A taken example name is an error.
    """
    from ..analysis.registry_facts import read_registries

    registries = read_registries(package)
    own = {names.adapter_func, names.cp_planner_class, names.tp_planner_class}
    errors: list[FieldError] = []
    refused: dict[str, list[str]] = {}

    def existing(kind: str) -> list[str]:
        return [
            r.name
            for r in registries.entries(kind, include_inactive=True)  # type: ignore[arg-type]
            if r.target not in own
        ]

    if plan.generates_cache:
        from ..analysis.register_names import register_name_problems

        problems = register_name_problems(
            plan.register_name, plan.model.transformer_class, None, existing("adapter")
        )
        for message in problems:
            refused.setdefault(CACHE_PART, []).append(f"registerName: BlockAdapter {message}")
    cls = plan.model.transformer_class
    checks = []
    if plan.generates_cp:
        checks.append(("cp", CP_PART, "context-parallel planner"))
    if plan.generates_tp:
        checks.append(("tp", TP_PART, "tensor-parallel planner"))
    for kind, part, label in checks:
        for other in prefix_conflicts(cls, existing(kind)):
            refused.setdefault(part, []).append(describe_conflict(label, cls, other))
    for index, component in enumerate(plan.components):
        part = component_part(index)
        if component.kind != "vae" or part in plan.refused or not component.generate:
            continue
        try:
            source_path(component.source or "")
        except SourceNotFound as exc:
            refused.setdefault(part, []).append(
                f"{part}.source: the VAE's source decides which tiling planner to reuse: {exc}"
            )
    if plan.generates_cache and plan.example is not None:
        taken = _example_names(package / EXAMPLES, names.example_func)
        if plan.example.name in taken:
            errors.append(
                FieldError(
                    "example.name", f"CLI example {plan.example.name!r} is already registered"
                )
            )
    return errors, {part: tuple(reasons) for part, reasons in refused.items()}


def _example_names(path: Path, own_function: str) -> set[str]:
    """Names registered with `@ExampleRegister.register("name", ...)`, except on `own_function`."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    names = set()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name == own_function:
            continue
        for deco in node.decorator_list:
            if (
                isinstance(deco, ast.Call)
                and isinstance(deco.func, ast.Attribute)
                and deco.func.attr == "register"
                and deco.args
                and isinstance(deco.args[0], ast.Constant)
                and isinstance(deco.args[0].value, str)
            ):
                names.add(deco.args[0].value)
    return names


def _beyond_hooks(plan: IntegrationPlan) -> str | None:
    """Why a registered cache-dit planner (a hook plan alone) cannot carry this CP part: the
    standalone module also permutes a mask into all-to-all order at every block. (Keeping the
    attention outside the split lists local is done by the standalone module only; a checkout
    planner leaves cache-dit's config on every processor, as before.)"""
    cp = plan.context_parallel
    if cp.mask_reorder is not None:
        return (
            f"the `{cp.mask_reorder.mask}` mask of `{cp.mask_reorder.list_attr}` must be "
            "permuted into all-to-all order at every block, which a registered hook plan "
            "cannot do: generate the standalone target for context parallelism"
        )
    return None
