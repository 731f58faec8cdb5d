"""Checks of a plan against the cache-dit checkout it targets, before any file is generated.

The register name is checked against every registered adapter name in both prefix directions,
the CP / TP planner names (the transformer class name) against the registered planners, the
example name against the registered examples (`naming.prefix_conflicts`); the CLI example needs
a model id and a readable pipeline source, a VAE-P planner its VAE's source.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

from .naming import GeneratedNames, describe_conflict, prefix_conflicts
from .plan import CACHE_PART, CP_PART, TP_PART, FieldError, IntegrationPlan, component_part
from .source_files import SourceNotFound, source_path


def checkout_problems(
    plan: IntegrationPlan, names: GeneratedNames, package: Path, examples: Path
) -> tuple[list[FieldError], dict[str, tuple[str, ...]]]:
    """(plan errors, refused parts -> why) for generating `plan` into the checkout `package`
    (`examples`: its examples module)."""
    errors = _example_errors(plan)
    more, refused = name_problems(plan, names, package, examples)
    return errors + more, refused


def _example_errors(plan: IntegrationPlan) -> list[FieldError]:
    """The CLI example needs a model to load and imports the pipeline from its source."""
    errors: list[FieldError] = []
    if not (plan.model.default_model_id or plan.model.local_path):
        errors.append(
            FieldError("model.defaultModelId", "the CLI example needs a model id or local path")
        )
    if plan.generates_cache and plan.model.pipeline_class and plan.model.sources.pipeline:
        try:
            source_path(plan.model.sources.pipeline)
        except SourceNotFound as exc:
            errors.append(
                FieldError("model.sources.pipeline", f"the CLI example imports from it: {exc}")
            )
    return errors


def name_problems(
    plan: IntegrationPlan, names: GeneratedNames, package: Path, examples: Path
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
        _check_adapter_name(plan, existing("adapter"), refused)
    _check_planner_names(plan, existing, refused)
    _check_vae_sources(plan, refused)
    if plan.generates_cache and plan.example is not None:
        taken = _example_names(examples, names.example_func)
        if plan.example.name in taken:
            errors.append(
                FieldError(
                    "example.name", f"CLI example {plan.example.name!r} is already registered"
                )
            )
    return errors, {part: tuple(reasons) for part, reasons in refused.items()}


def _check_adapter_name(
    plan: IntegrationPlan, adapters: list[str], refused: dict[str, list[str]]
) -> None:
    """The register name against the registered BlockAdapters (refuses the cache part)."""
    from ..analysis.register_names import register_name_problems

    problems = register_name_problems(
        plan.register_name, plan.model.transformer_class, None, adapters
    )
    for message in problems:
        refused.setdefault(CACHE_PART, []).append(f"registerName: BlockAdapter {message}")


def _check_planner_names(
    plan: IntegrationPlan,
    existing: Callable[[str], list[str]],
    refused: dict[str, list[str]],
) -> None:
    """The CP / TP planner name (the transformer class) against the registered planners."""
    cls = plan.model.transformer_class
    checks = []
    if plan.generates_cp:
        checks.append(("cp", CP_PART, "context-parallel planner"))
    if plan.generates_tp:
        checks.append(("tp", TP_PART, "tensor-parallel planner"))
    for kind, part, label in checks:
        for other in prefix_conflicts(cls, existing(kind)):
            refused.setdefault(part, []).append(describe_conflict(label, cls, other))


def _check_vae_sources(plan: IntegrationPlan, refused: dict[str, list[str]]) -> None:
    """A generated VAE-P planner reads its VAE's source (which tiling planner to reuse)."""
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
