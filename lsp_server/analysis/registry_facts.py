"""Registry facts: what the installed cache-dit already registers, read statically from its source.

cache-dit keeps class-level registries filled by decorators when its modules are imported:

* ``@BlockAdapterRegister.register("Name", supported=True)`` on the adapter factories
  (``cache_dit/caching/block_adapters/adapters.py``, activated by ``block_adapters/__init__.py``);
* ``@ContextParallelismPlannerRegister.register("Prefix")`` and
  ``@TensorParallelismPlannerRegister.register("Prefix")`` on the transformer planners
  (``cache_dit/distributed/transformers/*.py``, activated lazily by ``_activate_cp_planners`` /
  ``_activate_tp_planners`` in ``distributed/transformers/planners.py``);
* ``TextEncoderTensorParallelismPlannerRegister``, ``AutoEncoderDataParallelismPlannerRegister``
  and ``ControlNetContextParallelismPlannerRegister`` (``distributed/text_encoders``,
  ``distributed/autoencoders``, ``distributed/controlnets``).

Lookups walk a registry in insertion order and return the FIRST name that is a prefix of the class
name (``cls_name.startswith(name)``); the auto-encoder registry matches the exact class name. This
module reproduces that order without importing anything: it locates the package directory with
``importlib.util.find_spec("cache_dit")`` (top-level name only, which does not execute the
package), parses the relevant ``.py`` files with ``ast``, and replays the activation order (the
``_safe_import(".module", "Target")`` calls of each activation function, the top-level relative
imports of each loaded module, source order inside a module, and bottom-up order for stacked
decorators). ``supported=False`` registrations are skipped, activations nested under an ``if``
(e.g. the Nunchaku planners, only when ``nunchaku`` is installed) are marked ``conditional``, and
decorated definitions that no activation reaches are marked ``inactive``. Which registry a
decorator belongs to, and whether its lookup is by prefix or exact name, is read from the register
class names and their ``get_*`` methods, never from a hard-coded list of model names. The version
comes from the ``cache_dit-*.dist-info/METADATA`` next to the package (or ``_version.py``).

Two more facts come from the adapter registry's code, for ``shadowing_warnings``: the names each
adapter factory uses (the transformer classes it imports and asserts on: a factory registered
under a prefix of a class that it does not name belongs to another model), whether it sets
``has_separate_cfg=True``, and the register's own list of pipeline-name prefixes for which it
answers "separate CFG" (a class-level list of strings that a register method matches with
``startswith`` and answers ``True`` for). With ``cache_config.enable_separate_cfg=None`` cache-dit
consults both by pipeline class name whenever a BlockAdapter says ``has_separate_cfg=False``
(``CachedAdapter.check_context_kwargs``), which is why shadowing matters beyond the lookup.

SEPARATION OF CONCERNS: these facts are REPORTED ONLY (``RegistryFacts`` in the analyze output:
"is there already an adapter/planner for this class, would the proposed register name be shadowed
or shadow others"). The rest of the analyzer must never use them to infer block lists, forward
patterns, CFG handling or parallelism plans -- those are derived from the model source alone, so a
model that cache-dit already supports is analyzed exactly like a novel one.

Public API: ``read_registries`` (cached per package root and file mtimes) and ``registry_facts``.
Standard library only; no work happens at import time.

Layout: ``registry_types`` (``Registration``, ``Registries``), ``registry_package`` (locating the
package and its version), ``registry_parse`` (decorators, activations, register classes),
``registry_build`` (activation order, cache, ``read_registries``), ``register_name_proposal``
(``propose_register_name``) and ``registry_shadowing`` (``shadowing_warnings``); this module
assembles the ``RegistryFacts`` of a transformer and re-exports the public names.
"""

from __future__ import annotations

from .model import RegistryFacts
from .register_name_proposal import propose_register_name
from .registry_build import clear_cache, read_registries
from .registry_shadowing import conflict_notes, shadowing_messages, shadowing_warnings
from .registry_types import NOT_INSTALLED, Registration, Registries

__all__ = [
    "Registration",
    "Registries",
    "clear_cache",
    "propose_register_name",
    "read_registries",
    "registry_facts",
    "shadowing_warnings",
]


def registry_facts(
    transformer_class: str,
    pipeline_class: str | None = None,
    proposed_name: str | None = None,
    registries: Registries | None = None,
    separate_cfg: bool | None = None,
) -> RegistryFacts:
    """Registry facts for a transformer (and optional pipeline) class. Never raises.

    REPORTED ONLY: the analyzer must not use these facts to infer any pattern (module docstring).
    """
    try:
        regs = registries if registries is not None else read_registries()
    except Exception as exc:  # reporting must never break an analysis
        return RegistryFacts(
            cache_dit_version=None,
            notes=(f"cache-dit registries could not be read ({exc.__class__.__name__}: {exc}).",),
        )
    if not regs.installed:
        return RegistryFacts(cache_dit_version=None, notes=(NOT_INSTALLED,))

    try:
        return _facts(regs, transformer_class, pipeline_class, proposed_name, separate_cfg)
    except Exception as exc:  # defensive: malformed input must not break an analysis
        return RegistryFacts(
            cache_dit_version=regs.cache_dit_version,
            notes=(f"registry facts failed ({exc.__class__.__name__}: {exc}).",),
        )


def _facts(
    regs: Registries,
    transformer_class: str,
    pipeline_class: str | None,
    proposed: str | None,
    separate_cfg: bool | None = None,
) -> RegistryFacts:
    notes: list[str] = []
    classes = [c for c in (transformer_class, pipeline_class) if c]
    existing, matched_on = _existing_adapter(regs, classes, notes)
    name = proposed or (
        propose_register_name(transformer_class, pipeline_class) if transformer_class else None
    )
    shadowing = _proposed_name_conflicts(regs, name, classes, notes)
    # The name a cache-dit checkout of this version accepts (the same rule as the check).
    from .register_names import suggest_register_name

    checkout = suggest_register_name(
        transformer_class,
        pipeline_class,
        [r.name for r in regs.entries("adapter", include_inactive=True)],
        name,
    )
    if checkout.name is None:
        notes.append(f"No register name works for the cache-dit checkout target: {checkout.reason}")
    planners = _planners(regs, transformer_class, notes)
    return RegistryFacts(
        cache_dit_version=regs.cache_dit_version,
        warnings=shadowing_messages(regs, transformer_class, pipeline_class, None, separate_cfg)
        if transformer_class
        else (),
        existing_adapter=existing.name if existing else None,
        shadowing_names=tuple(shadowing),
        proposed_name=name,
        notes=tuple(notes),
        adapter_matched_on=matched_on,
        cp_planner=planners["cp"],
        tp_planner=planners["tp"],
        checkout_name=checkout.name,
        checkout_name_reason=checkout.reason,
    )


def _existing_adapter(
    regs: Registries, classes: list[str], notes: list[str]
) -> tuple[Registration | None, tuple[str, ...]]:
    """The first registered adapter name prefixing either class, and the classes it prefixes;
    notes on it are appended to `notes`."""
    version = regs.cache_dit_version
    existing: Registration | None = None
    for reg in regs.entries("adapter"):
        if any(c.startswith(reg.name) for c in classes):
            existing = reg
            break
    matched_on: tuple[str, ...] = ()
    if existing is not None:
        matched_on = tuple(c for c in classes if c.startswith(existing.name))
        notes.append(
            f"cache-dit {version} already registers BlockAdapter '{existing.name}' "
            f"({existing.location}), the first registered prefix of {' and '.join(matched_on)}."
        )
        per_class = {c: regs.first_match("adapter", c) for c in classes}
        resolved = {c: (r.name if r else None) for c, r in per_class.items()}
        if len(set(resolved.values())) > 1:
            detail = ", ".join(f"{c} -> {n or 'no adapter'}" for c, n in resolved.items())
            notes.append(f"The transformer and pipeline classes resolve differently ({detail}).")
        if existing.status == "conditional":
            notes.append(f"'{existing.name}' is only registered when its optional import succeeds.")
    return existing, matched_on


def _proposed_name_conflicts(
    regs: Registries, name: str | None, classes: list[str], notes: list[str]
) -> list[str]:
    """Registered adapter names the proposed register name conflicts with; notes on them (and on
    a class the name does not prefix) are appended to `notes`."""
    shadowing: list[str] = []
    if name:
        shadowing, found = conflict_notes(name, regs.entries("adapter"))
        notes.extend(found)
        not_prefixed = [c for c in classes if not c.startswith(name)]
        if not_prefixed:
            notes.append(
                f"The name '{name}' is not a prefix of {' or '.join(not_prefixed)}, so lookups by "
                "that class will not find the adapter; a register name must prefix both the "
                "pipeline and the transformer class."
            )
    return shadowing


def _planners(regs: Registries, transformer_class: str, notes: list[str]) -> dict[str, str | None]:
    """The context- and tensor-parallel planner names matching the transformer class (by kind);
    notes on missing or conditional ones are appended to `notes`."""
    version = regs.cache_dit_version
    planners: dict[str, str | None] = {}
    for kind, label in (("cp", "context-parallel"), ("tp", "tensor-parallel")):
        reg = regs.first_match(kind, transformer_class) if transformer_class else None
        planners[kind] = reg.name if reg else None
        if reg is None:
            notes.append(
                f"No {label} planner of cache-dit {version} matches {transformer_class or '?'}."
            )
        elif reg.status == "conditional":
            notes.append(
                f"The {label} planner '{reg.name}' ({reg.location}) is only registered when its "
                "optional import succeeds."
            )
    return planners
