"""The generated module's `enable()`: the one call that applies the adapter, the CP plan and
its helpers (masked ring steps, mask permutation and guards, local attention outside the split
lists, routed SDPA) and the TP planner, then runs `cache_dit.enable_cache`."""

from __future__ import annotations

from .layout import INDENT, call, comment, docstring, quote, raise_lines
from .plan import CACHE_PART, TP_PART, IntegrationPlan
from .render_axis_split import AXIS_SPLIT_FUNCTION
from .render_cp_region import LOCAL_FUNCTION, attention_region
from .render_mask_reorder import REORDER_FUNCTION
from .render_ring_masks import ring_masks_enable_lines
from .render_sdpa_routes import ROUTE_FUNCTION
from .render_stream_masks import STREAM_MASKS_FUNCTION


def part_message(plan: IntegrationPlan, part: str, missing: dict[str, str]) -> str:
    return f"{plan.part_label(part)} is not part of this integration: {missing.get(part, '')}"


def enable_code(
    plan: IntegrationPlan, tp_class: str | None, missing: dict[str, str], width: int
) -> str:
    b = INDENT
    lines = [
        "def enable(",
        f"{b}pipe: Any,",
        f"{b}*,",
        f"{b}cache_config: Any = None,",
        f"{b}parallelism_config: Any = None,",
        f"{b}transformer: Any = None,",
        ") -> Any:",
        *_enable_doc(plan, missing, width),
        f"{b}model = transformer if transformer is not None else _transformer_of(pipe)",
        f"{b}config = parallelism_config",
        f"{b}if config is not None:",
        *_parallel_lines(plan, tp_class, missing, width),
        *_enable_tail(plan),
    ]
    return "\n".join(lines) + "\n"


def transformer_of_code(plan: IntegrationPlan, width: int) -> str:
    """`_transformer_of(pipe)`: the pipeline's transformer, or the module of the generated-for
    class inside it (a wrapper whose forward runs it: its blocks are one module down)."""
    b = INDENT
    lines = [
        "def _transformer_of(pipe: Any) -> Any:",
        *docstring(
            f"The `{plan.model.transformer_class}` of `pipe`: its transformer, or the module of "
            "that class inside it (a wrapper whose forward runs the blocks one module down).",
            indent=b,
            width=width,
        ),
        f"{b}model = pipe.transformer",
        f"{b}for _, module in model.named_modules():",
        f"{b}{b}if any(c.__name__ == TRANSFORMER_CLASS for c in type(module).__mro__):",
        f"{b}{b}{b}return module",
        f"{b}return model",
    ]
    return "\n".join(lines) + "\n"


def _enable_doc(plan: IntegrationPlan, missing: dict[str, str], width: int) -> list[str]:
    """`enable()`'s docstring, and without caching the refusal of a cache config."""
    b = INDENT
    if plan.generates_cache:
        return docstring(
            "Enable cache-dit on `pipe` (or on `transformer` alone with `pipe=None`).\n\n"
            "Returns what `cache_dit.enable_cache` returns. The cache config is copied "
            "with `enable_separate_cfg` from the adapter (see `_cache_config`); without "
            "any config, cache-dit's default `DBCacheConfig()` is used. With CP requested "
            "and no `parallelism_config.cp_plan`, the plan comes from `cp_plan`; with TP "
            "requested, this module's TP planner is registered first.",
            indent=b,
            width=width,
        )
    return [
        *docstring(
            "Enable parallelism on `pipe` (or `transformer` with `pipe=None`).\n\n"
            "Caching is not part of this integration: a `cache_config` raises "
            "`NotImplementedError` with the reason. Returns `pipe` (or `transformer`), "
            "changed in place.",
            indent=b,
            width=width,
        ),
        f"{b}if cache_config is not None or parallelism_config is None:",
        *raise_lines(
            "NotImplementedError",
            part_message(plan, CACHE_PART, missing),
            indent=2 * b,
            width=width,
        ),
    ]


def _parallel_lines(
    plan: IntegrationPlan, tp_class: str | None, missing: dict[str, str], width: int
) -> list[str]:
    """The body of `if config is not None:` before cache-dit runs: ring refusal, the CP plan,
    masked ring steps, mask permutation and guards, the TP planner."""
    b = INDENT
    cp = plan.context_parallel
    lines: list[str] = []
    ring = cp.ring_unsupported if plan.generates_cp else None
    if ring:
        lines.append(f"{2 * b}if (config.ring_size or 1) > 1:")
        lines += raise_lines(
            "NotImplementedError",
            f"ring attention is not part of this integration: {ring}",
            indent=3 * b,
            width=width,
        )
    lines += [
        f"{2 * b}if config.cp_enabled() and config.cp_plan is None:",
        f"{3 * b}config.cp_plan = cp_plan(model)",
    ]
    if plan.generates_cp and cp.ring_masks:
        lines += ring_masks_enable_lines("config", 2 * b, width)
    if plan.generates_cp and cp.stream_masks:
        lines += [
            f"{2 * b}if config.cp_enabled():",
            f"{3 * b}{STREAM_MASKS_FUNCTION}(model)",
        ]
    if plan.generates_cp and cp.mask_reorder is not None:
        lines += [
            f"{2 * b}if config.cp_enabled():",
            f"{3 * b}world = max(config.ulysses_size or 1, config.ring_size or 1)",
            f"{3 * b}{REORDER_FUNCTION}(model, world)",
        ]
    if plan.generates_cp and cp.mask_guard_params:
        args = ["model", "_CP_MASK_PARAMS", quote("context parallelism"), "_CP_MASK_REASON"]
        lines += [
            f"{2 * b}if config.cp_enabled():",
            *call("_stop_masks", args, indent=3 * b, width=width),
        ]
    lines.append(f"{2 * b}if config.tp_enabled():")
    if tp_class and not plan.model.is_diffusers_model:
        lines += comment(
            f"`{plan.model.transformer_class}` is not a diffusers ModelMixin, which cache-dit's "
            "tensor parallelism asserts: this module's planner shards it here, and cache-dit "
            "gets the rest of the config",
            indent=3 * b,
            width=width,
        )
        lines += call(
            f"{tp_class}().apply",
            ["transformer=model", "parallelism_config=config"],
            indent=3 * b,
            width=width,
        )
        lines.append(f"{3 * b}config = _without_tp(config)")
    elif tp_class:
        lines.append(f"{3 * b}_register_tp_planner()")
    else:
        lines += raise_lines(
            "NotImplementedError", part_message(plan, TP_PART, missing), indent=3 * b, width=width
        )
    return lines


def _enable_tail(plan: IntegrationPlan) -> list[str]:
    """cache-dit's `enable_cache`, then what needs the transformer's CP config (local attention
    outside the split lists, routed SDPA), and the return."""
    b = INDENT
    cp = plan.context_parallel
    region = attention_region(cp) if plan.generates_cp else ()
    after = ([f"{2 * b}{LOCAL_FUNCTION}(model)"] if region else []) + (
        [f"{2 * b}{ROUTE_FUNCTION}(model)"] if plan.generates_cp and cp.sdpa_routes else []
    )
    if plan.generates_cp and cp.axis_split is not None:
        after.append(f"{2 * b}{AXIS_SPLIT_FUNCTION}(model)")
    local = [f"{b}if config is not None and config.cp_enabled():", *after] if after else []
    # a transformer outside ModelMixin: its TP was applied above and may leave nothing
    own_tp = plan.generates_tp and not plan.model.is_diffusers_model
    if not plan.generates_cache:
        run = "cache_dit.enable_cache(model, parallelism_config=config)"
        return [
            *([f"{b}if config is not None:", f"{2 * b}{run}"] if own_tp else [f"{b}{run}"]),
            *local,
            f"{b}return pipe if pipe is not None else model",
        ]
    lines = [
        f"{b}adapter = block_adapter(pipe, transformer=model)",
        f"{b}if cache_config is None and {'parallelism_config' if own_tp else 'config'} is None:",
        f"{2 * b}cache_config = cache_dit.DBCacheConfig()",
        *(
            [
                f"{b}if cache_config is None and config is None:  # TP alone, applied above",
                f"{2 * b}return pipe if pipe is not None else model",
            ]
            if own_tp
            else []
        ),
        f"{b}if cache_config is not None:",
        f"{2 * b}cache_config = _cache_config(cache_config, adapter)",
        f"{b}{'enabled = ' if local else 'return '}cache_dit.enable_cache(",
        f"{2 * b}adapter,",
        f"{2 * b}cache_config=cache_config,",
        f"{2 * b}parallelism_config=config,",
        f"{b})",
    ]
    return lines + ([*local, f"{b}return enabled"] if local else [])
