"""Two cached block lists whose loops run one right after the other with the same block call:
they can be cached as one list (`continues`), as cache-dit's own Flux adapter does."""

from __future__ import annotations

import ast

from .analysis_result import BlockListResult
from .astutil import body_holding, walk
from .block_loops import LoopSite, main_call


def continues(
    before: BlockListResult, after: BlockListResult, first: LoopSite, second: LoopSite
) -> str | None:
    """`before.attr` when the loop over `after` comes right after the loop over `before` in the
    same body (nothing runs between them), both are plain loops over their whole list, and their
    block calls pass the same arguments to blocks of the same ForwardPattern and assign the same
    names: then running the two lists as one list (`before + after`) is the same computation,
    and cache-dit can cache them as one list with one residual check per step (its own Flux
    adapter does, with `dummy_blocks_names`)."""
    if before.forward_pattern is None or before.forward_pattern != after.forward_pattern:
        return None
    if first.method is not second.method or first.zipped or second.zipped:
        return None
    if not (_whole_list_loop(first) and _whole_list_loop(second)):
        return None
    body = body_holding(walk(first.method), first.loop)
    if body is None:
        return None
    index = next(i for i, stmt in enumerate(body) if stmt is first.loop)
    if index + 1 >= len(body) or body[index + 1] is not second.loop:
        return None
    calls = [main_call(first), main_call(second)]
    if any(c is None or c.has_star for c in calls):
        return None
    a, b = calls
    assert a is not None and b is not None
    same = (
        [ast.dump(x) for x in a.args] == [ast.dump(x) for x in b.args]
        and {k: ast.dump(v) for k, v in a.keywords.items()}
        == {k: ast.dump(v) for k, v in b.keywords.items()}
        and a.targets == b.targets
    )
    return before.attr if same else None


def _whole_list_loop(site: LoopSite) -> bool:
    """`for b in self.<list>:` or `for i, b in enumerate(self.<list>):` (no slice, no zip)."""
    it = site.iterable
    if it is None:  # a counter loop
        return False
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate":
        it = it.args[0] if it.args else it
    return (
        isinstance(it, ast.Attribute)
        and it.attr == site.attr
        and isinstance(it.value, ast.Name)
        and it.value.id == "self"
    )
