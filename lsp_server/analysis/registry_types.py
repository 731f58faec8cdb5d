"""The registries of an installed cache-dit as data: `Registration` (one decorator) and
`Registries` (all of them, in lookup order), with the kinds of registry and their lookup modes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

RegistryKind = Literal["adapter", "cp", "tp", "text_encoder_tp", "vae_dp", "controlnet_cp"]
Status = Literal["active", "conditional", "inactive"]
MatchMode = Literal["prefix", "exact"]

KINDS: tuple[RegistryKind, ...] = (
    "adapter",
    "cp",
    "tp",
    "text_encoder_tp",
    "vae_dp",
    "controlnet_cp",
)

NOT_INSTALLED = (
    "cache-dit is not installed (no importable 'cache_dit' package), so its adapter and planner "
    "registries could not be read; install cache-dit to get registry facts."
)


@dataclass(frozen=True)
class Registration:
    """One ``@<Register>.register("name")`` decorator, in its registry's runtime order."""

    kind: RegistryKind
    name: str
    register_class: str
    path: str  # posix path starting at the package directory, e.g. "cache_dit/caching/.../x.py"
    line: int  # line of the decorator
    target: str  # the decorated factory function or planner class
    status: Status = "active"
    # Adapter factories: the names the factory's body uses (the classes it imports and checks
    # for), and whether it builds a BlockAdapter with `has_separate_cfg=True`.
    handled_names: frozenset[str] = frozenset()
    sets_separate_cfg: bool = False

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Registries:
    """The registries of one installed cache-dit, in registration (= lookup) order.

    The ``*_planners``/``adapters`` name tuples exclude ``inactive`` registrations; all
    registrations (with file, line and status) are in ``registrations``.
    """

    root: str | None
    cache_dit_version: str | None
    adapters: tuple[str, ...] = ()
    cp_planners: tuple[str, ...] = ()
    tp_planners: tuple[str, ...] = ()
    text_encoder_planners: tuple[str, ...] = ()
    vae_planners: tuple[str, ...] = ()
    controlnet_planners: tuple[str, ...] = ()
    registrations: tuple[Registration, ...] = ()
    exact_match_kinds: tuple[RegistryKind, ...] = ("vae_dp",)
    problems: tuple[str, ...] = ()
    # Pipeline-name prefixes for which the adapter register answers "separate CFG" on its own
    # (a class-level list of names that a register method matches with `startswith` and
    # answers `True` for), and where that list is defined.
    separate_cfg_prefixes: tuple[str, ...] = ()
    separate_cfg_location: str | None = None

    @property
    def installed(self) -> bool:
        return self.root is not None

    def entries(
        self, kind: RegistryKind, include_inactive: bool = False
    ) -> tuple[Registration, ...]:
        return tuple(
            r
            for r in self.registrations
            if r.kind == kind and (include_inactive or r.status != "inactive")
        )

    def match_mode(self, kind: RegistryKind) -> MatchMode:
        return "exact" if kind in self.exact_match_kinds else "prefix"

    def first_match(self, kind: RegistryKind, class_name: str) -> Registration | None:
        """The registration cache-dit's lookup would return for ``class_name`` (first match)."""
        exact = self.match_mode(kind) == "exact"
        for reg in self.entries(kind):
            matches = class_name == reg.name if exact else class_name.startswith(reg.name)
            if matches:
                return reg
        return None
