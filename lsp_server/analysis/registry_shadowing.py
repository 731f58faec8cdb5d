"""What cache-dit's name-based lookups would do to a new integration: registered adapter names
that prefix (shadow) a class or a proposed register name, and the register's list of pipeline
prefixes that force separate CFG. Reported only; never used to infer anything."""

from __future__ import annotations

from typing import Literal

from .registry_build import read_registries
from .registry_types import Registration, Registries


def conflict_notes(
    proposed: str, adapters: tuple[Registration, ...]
) -> tuple[list[str], list[str]]:
    """(registered names the proposed register name conflicts with, a note on each): the same
    name, a registered prefix of it, or a registered name it prefixes."""
    names: list[str] = []
    notes: list[str] = []
    for reg in adapters:
        if reg.name == proposed:
            names.append(reg.name)
            notes.append(
                f"'{proposed}' is already registered as a BlockAdapter ({reg.location}); "
                "registering it again would replace that factory, so extend the existing factory "
                "(branch on the transformer class inside it) or pick another name."
            )
        elif proposed.startswith(reg.name):
            names.append(reg.name)
            notes.append(
                f"Registered BlockAdapter '{reg.name}' ({reg.location}) is a prefix of the "
                f"proposed '{proposed}' and is matched first, so it would shadow the new adapter; "
                f"pick a name that no registered name prefixes, or branch on the transformer class "
                f"inside the existing '{reg.name}' factory."
            )
        elif reg.name.startswith(proposed):
            names.append(reg.name)
            notes.append(
                f"The proposed '{proposed}' is a prefix of registered BlockAdapter '{reg.name}' "
                f"({reg.location}), so it would capture every {reg.name}* class if it were "
                f"registered before it; pick a name that is not a prefix of any registered name."
            )
    return names, notes


Target = Literal["standalone", "cache-dit-checkout"]


def shadowing_warnings(
    transformer_class: str,
    pipeline_class: str | None = None,
    target: Target | None = None,
    registries: Registries | None = None,
    separate_cfg: bool | None = None,
) -> tuple[str, ...]:
    """What cache-dit's name-based lookups would do to a new integration of these classes.

    cache-dit finds adapters by class-name prefix, and with `cache_config.enable_separate_cfg`
    unset it decides separate CFG from the *pipeline* class name (the registered adapter's
    value, then a list of forcing prefixes) whenever the BlockAdapter says False. Two cases are
    reported, each with advice for `target` (both targets when None):

    * a registered adapter name prefixes the pipeline or transformer class and that adapter's
      factory does not use the transformer class (it is another model's adapter);
    * the pipeline class starts with a name of the forcing list (unless `separate_cfg` is True:
      the pipeline is known to make two transformer calls per step, so forcing is harmless).

    Reported only; never used to infer anything. Never raises (returns () on any problem).
    """
    try:
        regs = registries if registries is not None else read_registries()
        if not regs.installed or not transformer_class:
            return ()
        return shadowing_messages(regs, transformer_class, pipeline_class, target, separate_cfg)
    except Exception:  # reporting must never break an analysis or a generation
        return ()


def shadowing_messages(
    regs: Registries,
    transformer_class: str,
    pipeline_class: str | None,
    target: Target | None,
    separate_cfg: bool | None = None,
) -> tuple[str, ...]:
    """`shadowing_warnings` for read registries (may raise on malformed input)."""
    version = regs.cache_dit_version or "?"
    out: list[str] = []
    classes = [c for c in (pipeline_class, transformer_class) if c]
    by_reg: dict[str, tuple[Registration, list[str]]] = {}
    for cls in classes:
        reg = regs.first_match("adapter", cls)
        if reg is None or transformer_class in reg.handled_names:
            continue
        by_reg.setdefault(reg.name, (reg, []))[1].append(cls)
    for reg, matched in by_reg.values():
        out.append(
            _adapter_warning(version, reg, matched, transformer_class, pipeline_class, target)
        )
    forcing = next(
        (p for p in regs.separate_cfg_prefixes if pipeline_class and pipeline_class.startswith(p)),
        None,
    )
    if forcing is not None and separate_cfg is not True:
        out.append(_forcing_warning(version, regs, forcing, pipeline_class, target))
    return tuple(out)


def _adapter_warning(
    version: str,
    reg: Registration,
    matched: list[str],
    transformer_class: str,
    pipeline_class: str | None,
    target: Target | None,
) -> str:
    """A registered adapter `reg` prefixes the `matched` classes but does not handle the
    transformer class: what `enable_cache` would do, and the advice for `target`."""
    effects = []
    if pipeline_class in matched:
        effects.append(
            "`cache_dit.enable_cache(pipe)` would apply that adapter; and a BlockAdapter "
            "passed with has_separate_cfg=False and `cache_config.enable_separate_cfg=None` "
            f"makes cache-dit run the '{reg.name}' factory for its CFG setting"
            + (" (True there)" if reg.sets_separate_cfg else "")
            + ", which may assert on the transformer class"
        )
    if transformer_class in matched:
        effects.append(
            "`cache_dit.enable_cache(transformer)` would apply that adapter to the "
            "transformer alone"
        )
    advice = {
        "standalone": (
            "standalone target: call the generated `enable()`, which passes its own "
            "BlockAdapter and sets `enable_separate_cfg` from the plan, not "
            "`cache_dit.enable_cache(pipe)`"
        ),
        "cache-dit-checkout": (
            f"cache-dit checkout target: any new name starting with '{reg.name}' is "
            f"shadowed, so add a branch on the transformer class to the '{reg.name}' "
            f"factory ({reg.target}), or register a name that no registered name prefixes "
            "and that prefixes both classes"
        ),
    }
    return (
        f"cache-dit {version} registers BlockAdapter '{reg.name}' ({reg.location}), a "
        f"prefix of {' and '.join(matched)}, whose factory does not handle "
        f"{transformer_class}: " + "; ".join(effects) + ". " + _advice(advice, target) + "."
    )


def _forcing_warning(
    version: str,
    regs: Registries,
    forcing: str,
    pipeline_class: str | None,
    target: Target | None,
) -> str:
    """The pipeline class starts with `forcing`, a name of the register's list of pipelines that
    get separate CFG whatever the adapter says."""
    advice = {
        "standalone": (
            "standalone target: the generated `enable()` sets `enable_separate_cfg` from the "
            "plan's has_separate_cfg"
        ),
        "cache-dit-checkout": (
            "cache-dit checkout target: set `enable_separate_cfg` in the CLI example "
            "(`example.enableSeparateCfg`) when the pipeline calls the transformer once per "
            "step"
        ),
    }
    return (
        f"cache-dit {version} turns separate CFG on for every pipeline whose class starts "
        f"with '{forcing}' ({regs.separate_cfg_location}) when the adapter says "
        "has_separate_cfg=False and `cache_config.enable_separate_cfg` is None: a pipeline "
        f"like {pipeline_class} that calls the transformer once per step would have its "
        f"cached steps miscounted. {_advice(advice, target)}."
    )


def _advice(advice: dict[str, str], target: Target | None) -> str:
    if target is not None:
        return advice[target][:1].upper() + advice[target][1:]
    text = "; ".join(advice.values())
    return text[:1].upper() + text[1:]
