"""The BlockAdapter construction (generated code), for both targets.

`BlockAdapter` takes one `check_forward_pattern` / `check_num_outputs` flag for all block lists,
so several lists are checked only if every list can be (facts §1.2, §1.3). Lists run back to
back with the same block call are cached as one list (`merged_lists`).
"""

from __future__ import annotations

from collections.abc import Mapping

from .layout import INDENT, docstring, module_expr, quote
from .plan import BlockListPlan, IntegrationPlan


def merged_lists(plan: IntegrationPlan, functor: str | None) -> list[list[BlockListPlan]]:
    """The cached lists grouped into the lists cache-dit will see: a list whose loop directly
    continues the previous list's loop with the same block call (`continues`) joins it, so both
    run as one list with one residual check per step, as cache-dit's own Flux adapter does
    (`blocks=a + b`, `dummy_blocks_names=["b"]`: during forward `b` is an empty list and `a`
    runs every block). Not with a PatchFunctor (its forward copy reads the lists itself)."""
    groups: list[list[BlockListPlan]] = []
    for b in plan.cache.block_lists:
        if (
            functor is None
            and "." not in b.attr
            and groups
            and "." not in groups[-1][-1].attr
            and b.continues == groups[-1][-1].attr
            and b.forward_pattern == groups[-1][0].forward_pattern
        ):
            groups[-1].append(b)
        else:
            groups.append([b])
    return groups


def adapter_arguments(plan: IntegrationPlan, transformer: str, functor: str | None) -> list[str]:
    """The `BlockAdapter(...)` keyword arguments (without `pipe=` and `**kwargs`)."""
    lists = plan.cache.block_lists
    groups = merged_lists(plan, functor)
    sums = [" + ".join(module_expr(transformer, b.attr) for b in g) for g in groups]
    if len(groups) == 1:
        blocks = sums[0]
        patterns = f"ForwardPattern.{groups[0][0].forward_pattern}"
    else:
        blocks = "[" + ", ".join(sums) + "]"
        patterns = "[" + ", ".join(f"ForwardPattern.{g[0].forward_pattern}" for g in groups) + "]"
    args = [
        f"transformer={transformer}",
        f"blocks={blocks}",
        f"forward_pattern={patterns}",
        f"check_forward_pattern={all(b.check_forward_pattern for b in lists)}",
    ]
    if any(len(g) > 1 or "." in g[0].attr for g in groups):
        names = [quote(_alias(g[0].attr)) for g in groups]
        dummies = [quote(b.attr) for g in groups for b in g[1:]]
        args.append(
            f"blocks_name={names[0]}" if len(names) == 1 else f"blocks_name=[{', '.join(names)}]"
        )
        if dummies:
            args.append(f"dummy_blocks_names=[{', '.join(dummies)}]")
    if all(b.check_num_outputs for b in lists):
        args.append("check_num_outputs=True")
    args.append(f"has_separate_cfg={plan.cache.has_separate_cfg}")
    if functor:
        args.append(f"patch_functor={functor}()")
    return args


def _alias(attr: str) -> str:
    """The attribute cache-dit is told a list is at: the list's own, or for a list held in an
    nn.ModuleDict ("mode_blocks.image") one of the integration's (`keyed_list_routing`)."""
    return f"_cdit_{attr.replace('.', '_')}" if "." in attr else attr


def keyed_aliases(plan: IntegrationPlan) -> dict[str, str]:
    """Module path -> the attribute cache-dit is given, for the lists held in an nn.ModuleDict or
    an nn.ModuleList (`towers.coarse`, `stages.0`)."""
    return {b.attr: _alias(b.attr) for b in plan.cache.block_lists if "." in b.attr}


def aliased_key(key: str, aliases: Mapping[str, str]) -> str:
    """A module key of a hook plan (`towers.image.*`) through the alias of the keyed list it is
    under (`_cdit_towers_image.*`): cache-dit's plan resolver does not enter a ModuleDict."""
    for path, alias in aliases.items():
        if key == path or key.startswith(f"{path}."):
            return alias + key[len(path) :]
    return key


KEYED_LISTS = "_keyed_lists"


def keyed_list_function(plan: IntegrationPlan, indent: str = "") -> list[str]:
    """`def _keyed_lists(transformer)`, for lists held in an nn.ModuleDict
    (`self.mode_blocks["image"]`) or in an nn.ModuleList (`self.stages[0]`): cache-dit puts its
    cached list in place of `transformer.<blocks_name>` while forward runs, and resolves
    hook-plan keys by attribute; such a list is neither. Each is also registered under an
    attribute of its own (the same modules, kept out of the state dict and out of the keys a
    load expects), and forward is wrapped to put whatever is at that attribute (cache-dit's
    cached list while it runs) in the container for the call, and the list back after it.
    Idempotent. Empty without such lists. Nested (`indent`, inside the checkout's adapter
    factory) it takes no annotation: adapters.py does not import `Any`."""
    aliases = keyed_aliases(plan)
    if not aliases:
        return []
    b = INDENT
    i = indent + b
    table = ", ".join(
        f"{quote(alias)}: ({quote(owner)}, {key if key.isdigit() else quote(key)})"
        for path, alias in aliases.items()
        for owner, _, key in [path.partition(".")]
    )
    return [
        f"{indent}def {KEYED_LISTS}(transformer{': Any' if not indent else ''}) -> None:",
        f'{i}"""Lists held in an nn.ModuleDict, registered under names of their own."""',
        f"{i}keyed = {{{table}}}",
        f'{i}if getattr(transformer, "_cdit_keyed_lists", False):',
        f"{i}{b}return",
        f"{i}for alias, (owner, key) in keyed.items():",
        f"{i}{b}setattr(transformer, alias, getattr(transformer, owner)[key])",
        f'{i}prefixes = tuple(f"{{alias}}." for alias in keyed)',
        "",
        f"{i}def _hidden(module, state_dict, prefix, local_metadata):",
        f"{i}{b}for name in list(state_dict):",
        f"{i}{2 * b}if name[len(prefix) :].startswith(prefixes):",
        f"{i}{3 * b}del state_dict[name]",
        "",
        f"{i}def _loaded(module, incompatible):",
        f"{i}{b}missing = incompatible.missing_keys",
        f"{i}{b}missing[:] = [k for k in missing if not k.startswith(prefixes)]",
        "",
        f"{i}transformer._register_state_dict_hook(_hidden)",
        f"{i}transformer.register_load_state_dict_post_hook(_loaded)",
        f"{i}unrouted = transformer.forward",
        "",
        f"{i}def _routed(*args, _model=transformer, **kwargs):",
        f"{i}{b}swapped = []",
        f"{i}{b}for alias, (owner, key) in keyed.items():",
        f"{i}{2 * b}container = getattr(_model, owner)",
        f"{i}{2 * b}current = getattr(_model, alias)",
        f"{i}{2 * b}if container[key] is not current:",
        f"{i}{3 * b}swapped.append((container, key, container[key]))",
        f"{i}{3 * b}container[key] = current",
        f"{i}{b}try:",
        f"{i}{2 * b}return unrouted(*args, **kwargs)",
        f"{i}{b}finally:",
        f"{i}{2 * b}for container, key, original in reversed(swapped):",
        f"{i}{3 * b}container[key] = original",
        "",
        f"{i}transformer.forward = _routed",
        f"{i}transformer._cdit_keyed_lists = True",
    ]


def keyed_list_call(plan: IntegrationPlan, transformer: str, indent: str) -> list[str]:
    """`_keyed_lists(<transformer>)` where the plan has lists held in an nn.ModuleDict."""
    return [f"{indent}{KEYED_LISTS}({transformer})"] if keyed_aliases(plan) else []


def as_module_lists(plan: IntegrationPlan, transformer: str, indent: str) -> list[str]:
    """Block lists declared as an `nn.Sequential` that forward iterates become an nn.ModuleList
    of the same modules (cache-dit asserts ModuleLists; the state-dict keys stay the same)."""
    lines: list[str] = []
    for b in plan.cache.block_lists:
        if b.container == "ModuleList":
            continue
        target = f"{transformer}.{b.attr}"
        lines += [
            f"{indent}# `{b.attr}` is an nn.{b.container} that forward iterates: cache-dit caches",
            f"{indent}# ModuleLists (the same modules, so the same state-dict keys)",
            f"{indent}if not isinstance({target}, torch.nn.ModuleList):",
            f"{indent}{INDENT}{target} = torch.nn.ModuleList({target})",
        ]
    return lines


def _call_lines(args: list[str], indent: str, width: int) -> list[str]:
    """`return BlockAdapter(...)`; list-valued arguments broken one element per line if long."""
    lines = [f"{indent}return BlockAdapter(", f"{indent}{INDENT}pipe=pipe,"]
    for arg in args:
        line = f"{indent}{INDENT}{arg},"
        if len(line) > width and "=[" in arg and arg.endswith("]"):
            name, _, items = arg.partition("=[")
            lines.append(f"{indent}{INDENT}{name}=[")
            for item in items[:-1].split(", "):
                lines.append(f"{indent}{2 * INDENT}{item},")
            lines.append(f"{indent}{INDENT}],")
        else:
            lines.append(line)
    lines += [f"{indent}{INDENT}**kwargs,", f"{indent})"]
    return lines


def standalone_block_adapter(plan: IntegrationPlan, functor: str | None, width: int) -> str:
    """`def block_adapter(pipe=None, **kwargs) -> BlockAdapter` for the standalone module."""
    b = INDENT
    lists = ", ".join(f"`{x.attr}` ({x.forward_pattern})" for x in plan.cache.block_lists)
    lines = [
        "def block_adapter(pipe: Any = None, **kwargs: Any) -> BlockAdapter:",
        *docstring(
            f"The cache-dit BlockAdapter for `{plan.model.transformer_class}`.\n\n"
            f"Cached block lists: {lists}. "
            "`pipe` may be None when `transformer=` is given (transformer-only use, which needs "
            "`DBCacheConfig(num_inference_steps=...)`). Other keyword arguments go to "
            "`BlockAdapter`.",
            indent=b,
            width=width,
        ),
        f'{b}transformer = kwargs.pop("transformer", None)',
        f"{b}if transformer is None:",
        f"{b}{b}transformer = _transformer_of(pipe)",
        *as_module_lists(plan, "transformer", b),
        *keyed_list_call(plan, "transformer", b),
        *_call_lines(adapter_arguments(plan, "transformer", functor), b, width),
    ]
    return "\n".join(lines) + "\n"


def checkout_adapter_factory(
    plan: IntegrationPlan, func_name: str, functor: str | None, width: int
) -> str:
    """`@BlockAdapterRegister.register(name) def <slug>_adapter(pipe, **kwargs)` for adapters.py."""
    b = INDENT
    cls = plan.model.transformer_class
    lines = [
        f"@BlockAdapterRegister.register({quote(plan.register_name)})",
        f"def {func_name}(pipe, **kwargs) -> BlockAdapter:",
    ]
    if plan.model.is_diffusers_model:
        lines += [
            f"{b}try:",
            f"{b}{b}from {plan.model.transformer_module} import {cls}",
            f"{b}except ImportError:",
            f"{b}{b}{cls} = None  # needs a diffusers version that has it",
            "",
            f"{b}if {cls} is not None:",
            f"{b}{b}_relaxed_assert(pipe.transformer, {cls})",
            "",
        ]
    if functor:
        lines.append(f"{b}from cache_dit.caching.patch_functors import {functor}")
        lines.append("")
    lines += as_module_lists(plan, "pipe.transformer", b)
    if keyed_aliases(plan):  # its own copy of the helper: adapters.py has no module part for it
        lines += [*keyed_list_function(plan, b), ""]
    lines += keyed_list_call(plan, "pipe.transformer", b)
    lines += _call_lines(adapter_arguments(plan, "pipe.transformer", functor), b, width)
    return "\n".join(lines) + "\n"


def safe_import_line(target: str, module: str, name: str) -> str:
    return f"{target} = _safe_import({quote(module)}, {quote(name)})\n"
