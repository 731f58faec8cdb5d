"""Block lists run interleaved by one loop (`for i, (a, b) in enumerate(zip(self.l1, self.l2))`):
block k of each runs before block k+1 of the other. cache-dit re-runs a cached list as one unit,
so such lists are cached as per-block steps of their first list (`Interleaving.lead`), or not at
all when that list cannot be cached itself."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .list_discovery import ListFacts
from .patch_functor import Reason


@dataclass
class Interleaving:
    """Lists one loop runs interleaved (`zip(self.l1, self.l2)`): the first is cached, its
    blocks' steps run the other lists' block of the same index (`block_steps`)."""

    lead: str
    group: list[str]
    header: str
    line: int

    @property
    def names(self) -> str:
        return " and ".join(f"`{a}`" for a in self.group)

    def reason(self) -> Reason:
        partners = ", ".join(f"`{a}`" for a in self.group[1:])
        return Reason(
            "interleaved_lists",
            f"{self.names} run interleaved in one loop (`for {self.header}`): cache-dit re-runs "
            "a cached list as one unit, so the loop becomes per-block steps of "
            f"`{self.lead}`, each running block k of {partners} and the work between them",
            self.line,
            block_list=self.lead,
        )

    def partner_reason(self) -> str:
        return (
            f"runs interleaved with `{self.lead}` in one loop (`for {self.header}`, line "
            f"{self.line}): block k runs inside step k of `{self.lead}` (the PatchFunctor's "
            "per-block steps), so it is cached with that list, not on its own"
        )

    def refusal(self) -> str:
        return (
            f"{self.names} run interleaved in one loop (`for {self.header}`, line "
            f"{self.line}): block k of each runs before block k+1 of the other. "
            "cache-dit re-runs each cached list as one unit (it swaps the list for a "
            "one-element list during forward), so that loop would run once: a cached list "
            "would run all its blocks before the other's first, and `zip` would cut the "
            f"other to one block. They can be cached only as per-block steps of `{self.lead}` "
            "(each running a pair and the work between them), and that list is not cacheable "
            "itself, so neither list is proposed for caching"
        )


def interleaved_lists(lists: list[ListFacts]) -> dict[str, Interleaving]:
    """Block lists run interleaved by one loop (`for i, (a, b) in enumerate(zip(self.l1,
    self.l2))`), by attribute (each list of a group maps to the same `Interleaving`).

    cache-dit re-runs each cached list as one unit: during forward it swaps the list for a
    one-element list whose module runs every block (facts §1.4). Under `zip` that loop body would
    then run once, so the lists cannot be cached as they are. The first list of the `zip` is
    cached instead, with a PatchFunctor that turns the loop into per-block steps: block k of that
    list runs the loop body for index k, calling block k of the other lists itself.
    """
    attrs = {f.decl.attr for f in lists}
    out: dict[str, Interleaving] = {}
    for facts in lists:
        for site in facts.sites:
            partners = [a for a in site.zipped if a in attrs]
            if not partners or facts.decl.attr in out or not isinstance(site.loop, ast.For):
                continue
            order = _zip_order(site.loop.iter)
            group = sorted([facts.decl.attr, *partners], key=lambda a: order.get(a, len(order)))
            target = site.loop.target
            names_ = (
                ", ".join(ast.unparse(e) for e in target.elts)
                if isinstance(target, ast.Tuple)
                else ast.unparse(target)
            )
            header = f"{names_} in {ast.unparse(site.loop.iter)}"
            found = Interleaving(group[0], group, header, site.loop.lineno)
            for attr in group:
                out.setdefault(attr, found)
    return out


def _zip_order(node: ast.expr) -> dict[str, int]:
    """Positions of the `self.<list>` arguments of the loop's `zip(...)` (through `enumerate`)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "enumerate" and node.args:
            return _zip_order(node.args[0])
        if node.func.id == "zip":
            return {
                a.attr: i
                for i, a in enumerate(node.args)
                if isinstance(a, ast.Attribute)
                and isinstance(a.value, ast.Name)
                and a.value.id == "self"
            }
    return {}
