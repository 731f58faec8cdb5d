"""The BlockAdapter register-name rule: one implementation for the suggestion and the check.

cache-dit finds an adapter by class-name prefix, first registration first (facts §1.5, §2.2): a
register name must prefix the transformer class (and, where ``cache_dit.enable_cache(pipe)`` looks
the pipeline up, the pipeline class), and in a registry it must neither start with a registered
name (that one is matched first: the new adapter is shadowed) nor be a prefix of one (it would
capture that model's classes), nor equal one. `suggest_register_name` only returns a name that
`register_name_problems` accepts, or says why none exists.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["NameSuggestion", "conflict", "register_name_problems", "suggest_register_name"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|_+")


def conflict(name: str, other: str) -> str | None:
    """Why ``name`` clashes with the registered ``other`` (None: it does not)."""
    if name == other:
        return f"{name!r} is already registered"
    if name.startswith(other):
        return (
            f"{name!r} is shadowed by the registered {other!r} (first registered prefix wins): "
            "pick a name that does not start with it, or extend that registration"
        )
    if other.startswith(name):
        return (
            f"{name!r} is a prefix of the registered {other!r}: classes of that model would match "
            "the new name too"
        )
    return None


def register_name_problems(
    name: str,
    transformer_class: str,
    pipeline_class: str | None = None,
    registered: Iterable[str] = (),
) -> list[str]:
    """Why ``name`` cannot be the register name (empty: it can).

    ``pipeline_class``: given where the pipeline is looked up by name (the cache-dit checkout
    target); ``registered``: the adapter names already in that registry (not our own).
    """
    if not _IDENTIFIER.match(name) or keyword.iskeyword(name):
        return [f"{name!r} is not a Python identifier"]
    problems = []
    for cls, what, why in (
        (transformer_class, "transformer", "cache-dit finds adapters by class-name prefix"),
        (pipeline_class, "pipeline", "`cache_dit.enable_cache(pipe)` would not find it"),
    ):
        if cls and not cls.startswith(name):
            problems.append(f"{name!r} is not a prefix of the {what} class {cls!r}: {why}")
    problems += [c for other in registered if (c := conflict(name, other)) is not None]
    return problems


@dataclass(frozen=True)
class NameSuggestion:
    """A register name the check accepts, or None and why no name can pass."""

    name: str | None
    reason: str = ""


def _candidates(transformer_class: str, pipeline_class: str | None) -> list[str]:
    """Names that prefix both classes at CamelCase word boundaries, longest first."""
    words = _WORD.findall(transformer_class)
    out = []
    text = ""
    for word in words:
        text += word
        if not pipeline_class or pipeline_class.startswith(text):
            out.append(text)
        else:
            break
    if pipeline_class and not out:
        # no shared leading word: the longest shared leading characters
        shared = ""
        for a, b in zip(transformer_class, pipeline_class, strict=False):
            if a != b:
                break
            shared += a
        if shared:
            out.append(shared)
    return [n.rstrip("_") for n in reversed(out) if n.rstrip("_")]


def suggest_register_name(
    transformer_class: str,
    pipeline_class: str | None = None,
    registered: Iterable[str] = (),
    preferred: str | None = None,
) -> NameSuggestion:
    """The first of ``preferred`` and the word-boundary prefixes of both classes (longest
    first) that passes `register_name_problems`; else None with the reason."""
    taken = list(registered)
    candidates = [preferred] if preferred else []
    candidates += _candidates(transformer_class, pipeline_class)
    for name in dict.fromkeys(candidates):
        if not register_name_problems(name, transformer_class, pipeline_class, taken):
            return NameSuggestion(name)
    blockers = [
        other
        for other in taken
        if transformer_class.startswith(other)
        and (not pipeline_class or pipeline_class.startswith(other))
    ]
    classes = " and ".join(c for c in (pipeline_class, transformer_class) if c)
    if blockers:
        return NameSuggestion(
            None,
            f"cache-dit already registers {blockers[0]!r}, a prefix of {classes}: every name "
            f"that prefixes {'both' if pipeline_class else 'it'} is shadowed by it or captures "
            "its classes. Use the standalone target (the generated module passes its own "
            f"BlockAdapter, no registry lookup), or extend the {blockers[0]!r} factory with a "
            "branch on the transformer class.",
        )
    return NameSuggestion(
        None,
        f"no name prefixes {classes} without clashing with a registered adapter; use the "
        "standalone target",
    )
