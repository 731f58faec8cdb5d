"""Names of generated things, and the register-name checks against a cache-dit's registries.

cache-dit looks adapters and transformer planners up by class-name PREFIX in registration order
(facts §1.5, §2.2, §3.1): a new name that starts with an existing one is shadowed by it, and a new
name that is a prefix of an existing one would catch that model's classes too. Both directions
are refused before anything is written; the registrations this generator made itself (its own
factory and planner classes) do not count.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(name: str) -> str:
    """`NucleusMoEImage` -> `nucleus_moe_image`, `HunyuanDiT` -> `hunyuan_dit`, `Krea2` -> `krea2`.

    A lone capital letter (`MoE`, `DiT`, `2D`) stays with the word before it.
    """
    words: list[str] = []
    for word in _BOUNDARY.sub("_", name).replace("-", "_").split("_"):
        if not word:
            continue
        if len(word) == 1 and word.isalpha() and words:
            words[-1] += word
        else:
            words.append(word)
    return "_".join(words).lower()


@dataclass(frozen=True)
class GeneratedNames:
    """Every identifier and file name one plan produces."""

    register_name: str
    slug: str
    class_prefix: str

    @property
    def adapter_func(self) -> str:
        return f"{self.slug}_adapter"

    @property
    def functor_class(self) -> str:
        return f"{self.class_prefix}PatchFunctor"

    @property
    def functor_module(self) -> str:
        return f"functor_{self.slug}"

    @property
    def cp_planner_class(self) -> str:
        return f"{self.class_prefix}ContextParallelismPlanner"

    @property
    def tp_planner_class(self) -> str:
        return f"{self.class_prefix}TensorParallelismPlanner"

    @property
    def planner_module(self) -> str:
        return self.slug

    @property
    def example_func(self) -> str:
        return f"{self.slug}_example"


def names_for(register_name: str, slug: str) -> GeneratedNames:
    prefix = register_name[:1].upper() + register_name[1:]
    return GeneratedNames(register_name=register_name, slug=slug, class_prefix=prefix)


def prefix_conflicts(name: str, existing: Iterable[str]) -> list[str]:
    """Existing registered names that shadow `name` or that `name` would shadow (or equal it)."""
    from ..analysis.register_names import conflict

    return [other for other in existing if conflict(name, other) is not None]


def describe_conflict(kind: str, name: str, other: str) -> str:
    """The register-name rule's message (`analysis.register_names.conflict`), for a `kind`."""
    from ..analysis.register_names import conflict

    return f"{kind} {conflict(name, other) or f'{name!r} does not clash with {other!r}'}"
