"""Module paths of block lists held in containers: an `nn.ModuleDict` by key (`mode_blocks.image`,
forward's `self.mode_blocks["image"]`) and an `nn.ModuleList` by index (`stages.0`, the lists a
loop nested in `for stage in self.stages:` runs)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypeVar

from .astutil import self_attr

# a `block_loops.LoopBinding` (a list a loop binds: `attr`, `block_var`)
Binding = TypeVar("Binding", bound=Any)


def keyed_list(node: ast.expr) -> str | None:
    """`self.<dict>["<key>"]` (a string that is an identifier) -> "<dict>.<key>", the module
    path of an nn.ModuleList held in an nn.ModuleDict."""
    if not isinstance(node, ast.Subscript):
        return None
    owner, key = self_attr(node.value), node.slice
    if owner and isinstance(key, ast.Constant) and isinstance(key.value, str):
        return f"{owner}.{key.value}" if key.value.isidentifier() else None
    return None


def list_source(attr: str) -> str:
    """How forward names a block list: `self.blocks`, or `self.mode_blocks["image"]` for the
    list at module path "mode_blocks.image" (held in an nn.ModuleDict)."""
    owner, _, key = attr.partition(".")
    if key.isdigit():  # a list of a nested ModuleList
        return f"self.{owner}[{key}]"
    return f'self.{owner}["{key}"]' if key else f"self.{attr}"


def same_stage(a: str, b: str, staged: set[str]) -> bool:
    """Two lists of one nested list (`stages.0`, `stages.1`) bound by the same inner loop
    (`staged`: the patterns that loop binds, `stages.*`)."""
    head = a.rpartition(".")[0]
    return bool(head) and head == b.rpartition(".")[0] and f"{head}.*" in staged


def stage_lists(pattern: str, attrs: set[str]) -> list[str]:
    """The lists a loop over an element of a nested list runs (`stages.*`): `stages.0`, ..."""
    head = pattern[:-1]
    found = [a for a in attrs if a.startswith(head) and a[len(head) :].isdigit()]
    return sorted(found, key=lambda a: int(a[len(head) :]))


def expand_stages(
    bindings: list[Binding], aliases: Mapping[str, str], attrs: set[str]
) -> tuple[Mapping[str, str], list[Binding], set[str]]:
    """Nested lists: a loop over `self.stages` (a nested template expanded to `stages.0`, ...)
    makes its variable an alias of `stages.*` for the loops inside it; a binding of `stages.*`
    becomes one per stage. (aliases, bindings, the `.*` patterns expanded)."""
    for b in bindings:
        if b.block_var and any(a.startswith(f"{b.attr}.") for a in attrs):
            aliases = {**aliases, b.block_var: f"{b.attr}.*"}
    staged = {b.attr for b in bindings if b.attr.endswith(".*")}
    expanded = [
        replace(b, attr=a)
        for b in bindings
        for a in (stage_lists(b.attr, attrs) if b.attr in staged else [b.attr])
    ]
    return aliases, expanded, staged
