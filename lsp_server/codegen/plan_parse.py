"""`parse_plan`: check a plan document field by field and build the `IntegrationPlan`.

It never raises on bad input: every problem is a `FieldError`. The plan-wide fields (model,
names, target, example) are read here, and an error in them makes the whole plan invalid; each
part (`plan_parse_parts`) is read with its own reader, so that its errors refuse only that part
(`IntegrationPlan.refused`), and a disabled part's errors are ignored.
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .plan_model import (
    CACHE_PART,
    CP_PART,
    SCHEMA_VERSION,
    TARGET_KINDS,
    TASK_TYPES,
    TP_PART,
    CachePlan,
    ComponentPlan,
    ContextParallelPlan,
    ExamplePlan,
    FieldError,
    IntegrationPlan,
    ModelInfo,
    Sources,
    Target,
    TensorParallelPlan,
    component_part,
)
from .plan_parse_parts import (
    parse_cache,
    parse_components,
    parse_context_parallel,
    parse_tensor_parallel,
)
from .plan_reader import DOTTED, ENV_VAR, EXAMPLE_NAME, IDENTIFIER, SLUG, Reader


def parse_plan(data: Any) -> tuple[IntegrationPlan | None, list[FieldError]]:
    """Check a plan document; return the plan, or None and every field-level error."""
    r = Reader()
    root = r.obj(data, "")
    if root is None:
        return None, r.errors
    _check_version(r, root)
    model = _parse_model(r, root.get("model"))
    register_name, slug = _parse_names(r, root)
    target = _parse_target(r, root.get("target"))
    example = _parse_example(r, root.get("example"))
    provenance = r.obj(root.get("provenance"), "provenance", required=False) or {}
    parts = _parse_parts(r, root, model)
    _check_register_name(r, register_name, model, target)
    if target is not None and target.kind == "cache-dit-checkout" and example is None:
        r.error("example", "is required for the cache-dit checkout target (the CLI example)")

    if r.errors or model is None or target is None or parts.cache is None:
        return None, r.errors + parts.errors()
    assert isinstance(register_name, str) and isinstance(slug, str)
    return (
        IntegrationPlan(
            model=model,
            register_name=register_name,
            model_slug=slug,
            target=target,
            cache=parts.cache,
            context_parallel=parts.cp,
            tensor_parallel=parts.tp,
            components=parts.components,
            example=example,
            provenance=dict(provenance),
            refused=parts.refused(),
        ),
        [],
    )


@dataclass
class _Parts:
    """The parts as read, and each part's (enabled?, its errors) (`status`)."""

    cache: CachePlan | None
    cp: ContextParallelPlan
    tp: TensorParallelPlan
    components: tuple[ComponentPlan, ...]
    status: dict[str, tuple[bool, list[FieldError]]]

    def errors(self) -> list[FieldError]:
        """The errors of the enabled parts."""
        return [e for on, errors in self.status.values() if on for e in errors]

    def refused(self) -> dict[str, tuple[str, ...]]:
        """Enabled parts with errors -> the errors."""
        return {
            part: tuple(str(e) for e in errors)
            for part, (on, errors) in self.status.items()
            if on and errors
        }


def _parse_parts(r: Reader, root: Mapping[str, Any], model: ModelInfo | None) -> _Parts:
    """The parts: each is read with its own reader, so that its errors refuse only that part."""
    status: dict[str, tuple[bool, list[FieldError]]] = {}
    cache_data = r.obj(root.get("cache"), "cache")
    rc = Reader()
    cache = parse_cache(rc, cache_data) if cache_data is not None else None
    if cache is not None and cache.patch_functor and model and not model.sources.transformer:
        rc.error("model.sources.transformer", "is required to generate a PatchFunctor")
    if cache is not None:
        status[CACHE_PART] = (cache.enabled, rc.errors)
    rcp = Reader()
    cp = parse_context_parallel(rcp, root.get("contextParallel"))
    status[CP_PART] = (cp.enabled, rcp.errors)
    rtp = Reader()
    tp = parse_tensor_parallel(rtp, root.get("tensorParallel"))
    status[TP_PART] = (tp.enabled, rtp.errors)
    components, component_errors = parse_components(r, root.get("components"))
    for i, (on, errors) in component_errors.items():
        status[component_part(i)] = (on, errors)
    return _Parts(cache, cp, tp, components, status)


def _check_version(r: Reader, root: Mapping[str, Any]) -> None:
    version = r.get(root, "schemaVersion", "", int, required=True)
    if version is not None and version != SCHEMA_VERSION:
        r.error(
            "schemaVersion", f"unsupported version {version} (this tool reads {SCHEMA_VERSION})"
        )


def _parse_names(r: Reader, root: Mapping[str, Any]) -> tuple[Any, Any]:
    """`registerName` and `modelSlug` (as given: check them with `isinstance`)."""
    register_name = r.get(
        root,
        "registerName",
        "",
        str,
        required=True,
        pattern=IDENTIFIER,
        pattern_message="is not a Python identifier",
    )
    slug = r.get(
        root,
        "modelSlug",
        "",
        str,
        required=True,
        pattern=SLUG,
        pattern_message="must be snake_case (a-z, 0-9, _), starting with a letter",
    )
    if isinstance(slug, str) and keyword.iskeyword(slug):
        r.error("modelSlug", f"{slug!r} is a Python keyword")
    return register_name, slug


def _check_register_name(
    r: Reader, register_name: Any, model: ModelInfo | None, target: Target | None
) -> None:
    """The register name against the transformer (and, for a checkout, the pipeline) class."""
    if model is None or not isinstance(register_name, str) or not IDENTIFIER.match(register_name):
        return
    from ..analysis.register_names import register_name_problems

    # the pipeline is looked up by name only through the checkout's registry; the registry
    # itself is checked where it is read (`registry_name_errors`, `checkout_checks.name_problems`)
    checkout = target is not None and target.kind == "cache-dit-checkout"
    pipeline = model.pipeline_class if checkout else None
    for problem in register_name_problems(register_name, model.transformer_class, pipeline):
        r.error("registerName", problem)


def _parse_model(r: Reader, data: Any) -> ModelInfo | None:
    m = r.obj(data, "model")
    if m is None:
        return None
    p = "model"
    cls = r.get(
        m,
        "transformerClass",
        p,
        str,
        required=True,
        pattern=IDENTIFIER,
        pattern_message="is not a class name",
    )
    module = r.get(
        m,
        "transformerModule",
        p,
        str,
        required=True,
        pattern=DOTTED,
        pattern_message="is not a dotted module name",
    )
    pipeline = r.get(
        m, "pipelineClass", p, str, pattern=IDENTIFIER, pattern_message="is not a class name"
    )
    local_path = r.get(m, "localPath", p, str)
    default_id = r.get(m, "defaultModelId", p, str)
    is_diffusers = r.get(m, "isDiffusersModel", p, bool, default=True)
    s = r.obj(m.get("sources"), f"{p}.sources")
    sources = None
    if s is not None:
        sp = f"{p}.sources"
        transformer = r.get(s, "transformer", sp, str, required=True)
        sources = Sources(
            transformer=transformer or "",
            pipeline=r.get(s, "pipeline", sp, str),
            config=r.get(s, "config", sp, str),
            model_index=r.get(s, "modelIndex", sp, str),
        )
    if not (isinstance(cls, str) and isinstance(module, str) and sources is not None):
        return None
    return ModelInfo(
        transformer_class=cls,
        transformer_module=module,
        sources=sources,
        pipeline_class=pipeline,
        local_path=local_path,
        default_model_id=default_id,
        is_diffusers_model=bool(is_diffusers),
    )


def _parse_target(r: Reader, data: Any) -> Target | None:
    t = r.obj(data, "target")
    if t is None:
        return None
    kind = r.get(t, "kind", "target", str, required=True, choices=TARGET_KINDS)
    if kind == "standalone":
        path = r.get(t, "path", "target", str, required=True)
        if isinstance(path, str):
            stem = path.replace("\\", "/").rsplit("/", 1)[-1]
            if "\x00" in path:
                r.error("target.path", "contains a NUL byte")
            elif not stem.endswith(".py") or not IDENTIFIER.match(stem[:-3]):
                r.error("target.path", f"{path!r} must name an importable module file (`name.py`)")
            return Target(kind="standalone", path=path)
    elif kind == "cache-dit-checkout":
        root = r.get(t, "root", "target", str, required=True)
        if isinstance(root, str) and "\x00" in root:
            r.error("target.root", "contains a NUL byte")
        elif isinstance(root, str) and not root.strip():
            r.error("target.root", "must name the checkout's folder (it is empty)")
        elif isinstance(root, str):
            return Target(kind="cache-dit-checkout", root=root)
    return None


def _parse_example(r: Reader, data: Any) -> ExamplePlan | None:
    e = r.obj(data, "example", required=False)
    if e is None:
        return None
    p = "example"
    name = r.get(
        e,
        "name",
        p,
        str,
        required=True,
        pattern=EXAMPLE_NAME,
        pattern_message="must be lower case (a-z, 0-9, `_`, `-`, `.`)",
    )
    env = r.get(
        e,
        "envVar",
        p,
        str,
        required=True,
        pattern=ENV_VAR,
        pattern_message="must be an upper-case environment variable name",
    )
    ints = {}
    for key in ("height", "width", "numFrames", "numInferenceSteps"):
        value = r.get(e, key, p, int)
        if isinstance(value, int) and value <= 0:
            r.error(f"{p}.{key}", "must be positive")
        ints[key] = value
    if not (isinstance(name, str) and isinstance(env, str)):
        return None
    return ExamplePlan(
        name=name,
        env_var=env,
        task_type=r.get(e, "taskType", p, str, default="T2I", choices=TASK_TYPES),
        prompt=r.get(e, "prompt", p, str, default=ExamplePlan.prompt),
        height=ints["height"],
        width=ints["width"],
        num_frames=ints["numFrames"],
        num_inference_steps=ints["numInferenceSteps"],
        guidance_scale=r.get(e, "guidanceScale", p, float),
        enable_separate_cfg=r.get(e, "enableSeparateCfg", p, bool),
    )
