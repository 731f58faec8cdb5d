"""Loops that do not run a list's blocks once each, first to last, per forward call: cache-dit's
wrapper (one module in place of the list) runs every block once, in list order, each time it is
called, and keeps one residual per list and step. So caching such a list is refused:

- `reversed_loop`: `for blk in reversed(self.blocks)` (the wrapper runs them first to last: the
  no-cache control was off by the whole output);
- `repeated_block_call`: a block called twice in one iteration (`x = blk(x); x = blk(x)`: the
  wrapper runs the whole list twice instead);
- `repeated_loops`: the list run by two loops in one call (each run would compare its residual
  with, and reuse, the other's);
- `early_exit`: a `break` or `return` in the loop (`if i == self.exit_layer: break`): the
  wrapper runs every block;
- `loop_value_after`: forward reads a name the loop header binds after the loop (`for i, blk in
  enumerate(self.blocks): ...` then `self.heads[i](x)` or `blk.norm(x)`): the loop runs once
  over the wrapper, so `i` is 0 and `blk` is the wrapper, not the last block;
- `stored_block_output`: the loop stores a block's output elsewhere than in a name
  (`kw["ctx"], x = layer(x, **kw)`, `self.state = blk(x)`): the wrapper calls every block with
  the arguments of its one call and hands back only the streams, so the next block never reads
  what the previous one stored there (the no-cache control of such a loop was 11 off).

Calls or loops in the two branches of one `if` run one at a time and do not count; nor do loops
in two helper methods (forward's alternatives: AnyFlow-FAR's inference and cache-prefill paths).
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass

from .astutil import callee_name, first_use_after, walk, walk_local
from .block_loops import LoopSite, in_checkpoint_branch
from .list_paths import list_source
from .patch_functor import HIGH, Reason

# the kinds after which the first and last block of the list are not the first and last to run
# (a hook plan that splits at the first block and gathers at the last runs wrong: CP refused)
ORDER_KINDS = frozenset({"reversed_loop", "repeated_block_call", "early_exit"})


# why each kind refuses caching (after what the loop does)
_CACHE_WHY = {
    "reversed_loop": "cache-dit's wrapper runs a list first to last",
    "repeated_block_call": "cache-dit's wrapper would run the whole list at each call",
    "repeated_loops": "cache-dit keeps one residual per list and step, so the second run would "
    "be compared with, and reuse, the first's",
    "early_exit": "cache-dit's wrapper runs every block",
    "loop_value_after": "under caching the loop runs once over cache-dit's wrapper (the index "
    "stays 0, the block variable holds the wrapper)",
    "stored_block_output": "cache-dit's wrapper calls every block with the arguments of its one "
    "call, so the next block would not read what this one stored there",
}


@dataclass(frozen=True)
class RunProblem:
    """What a loop of the list does other than running each block once, first to last."""

    kind: str
    what: str
    line: int


def repeated_run_reasons(sites: list[LoopSite]) -> list[Reason]:
    """The caching reasons of the loops `sites` of one list (see the module's docstring)."""
    return [
        Reason(p.kind, f"{p.what}; {_CACHE_WHY[p.kind]}", p.line, HIGH, None, True, sites[0].attr)
        for p in run_problems(sites)
    ]


def run_problems(sites: list[LoopSite]) -> list[RunProblem]:
    """How the loops `sites` of one list run its blocks other than once each, first to last."""
    sites = [s for s in sites if s.calls and not in_checkpoint_branch(s)]
    if not sites:
        return []
    where = list_source(sites[0].attr)
    out: list[RunProblem] = []
    for site in sites:
        line = site.loop.lineno
        order = _reversed(site.iterable) if site.iterable is not None else None
        if order is not None:
            what = f"the loop over `{where}` runs its blocks last to first (`{order}`)"
            out.append(RunProblem("reversed_loop", what, line))
        stop = _early_exit(site.loop)
        if stop is not None:
            what = (
                f"the loop over `{where}` can stop before its last block (`{stop[1]}`, "
                f"line {stop[0]})"
            )
            out.append(RunProblem("early_exit", what, line))
        calls = sorted((c.call for c in site.plain_calls), key=lambda c: c.lineno)
        repeated = [
            (a, b) for a, b in itertools.combinations(calls, 2) if not _exclusive(site.loop, a, b)
        ]
        if repeated:
            a, b = repeated[0]
            what = (
                f"each block of `{where}` runs twice per iteration (lines {a.lineno} and "
                f"{b.lineno})"
            )
            out.append(RunProblem("repeated_block_call", what, line))
        after = _header_value_after(site)
        if after is not None:
            name, read = after
            what = (
                f"forward reads `{name}`, which the loop over `{where}` binds, after the loop "
                f"(line {read})"
            )
            out.append(RunProblem("loop_value_after", what, line))
        stored = _stored_output(site)
        if stored is not None:
            target, at = stored
            what = f"the loop over `{where}` stores a block output in `{target}` (line {at})"
            out.append(RunProblem("stored_block_output", what, line))
    together = [
        (a, b)
        for a, b in itertools.combinations(sites, 2)
        if a.method is b.method and not _exclusive(a.method, a.loop, b.loop)
    ]
    if together:
        a, b = together[0]
        what = (
            f"`{where}` runs in two loops of one call (lines {a.loop.lineno} and {b.loop.lineno})"
        )
        out.append(RunProblem("repeated_loops", what, b.loop.lineno))
    return out


def _stored_output(site: LoopSite) -> tuple[str, int] | None:
    """A target of a block call's assignment in the loop that is not a plain name (a subscript
    or an attribute: `kw["ctx"]` of `kw["ctx"], x = layer(x, **kw)`): its text and line."""
    calls = {id(c.call) for c in site.plain_calls}
    for node in walk_local(site.loop):
        if not (isinstance(node, ast.Assign | ast.AnnAssign) and id(node.value) in calls):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            parts = target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
            for part in parts:
                inner = part.value if isinstance(part, ast.Starred) else part
                if isinstance(inner, ast.Subscript | ast.Attribute):
                    return ast.unparse(inner), node.lineno
    return None


def _header_value_after(site: LoopSite) -> tuple[str, int] | None:
    """A name a `for` header binds (the block, the index, a zipped partner) that the method reads
    after the loop before anything binds it again (on one line the reads come first: `i = i + 1`
    reads `i`). Counter `while` loops are checked where they are read (`counter_loops`)."""
    if not isinstance(site.loop, ast.For):
        return None
    bound = {n.id for n in walk(site.loop.target) if isinstance(n, ast.Name)}
    end = site.loop.end_lineno or site.loop.lineno
    for name in sorted(bound):
        use = first_use_after(site.method, name, end)
        if use is not None and isinstance(use.ctx, ast.Load):
            return name, use.lineno
    return None


def _early_exit(loop: ast.For | ast.While) -> tuple[int, str] | None:
    """A `break` or `return` of the loop's own body (not of a loop or function inside it)."""
    todo: list[ast.AST] = list(loop.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.Break | ast.Return):
            return node.lineno, ast.unparse(node)
        if isinstance(node, ast.For | ast.While | ast.FunctionDef | ast.Lambda | ast.ClassDef):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return None


def _reversed(iterable: ast.expr) -> str | None:
    """`reversed(...)` or a `[::-1]` slice in the loop's iterable: its text."""
    for node in walk(iterable):
        if isinstance(node, ast.Call) and callee_name(node) == "reversed":
            return ast.unparse(node)
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Slice)
            and isinstance(node.slice.step, ast.UnaryOp)
            and isinstance(node.slice.step.op, ast.USub)
        ):
            return ast.unparse(node)
    return None


def _exclusive(root: ast.AST, a: ast.AST, b: ast.AST) -> bool:
    """`a` and `b` sit in different branches of one `if` under `root` (one runs, not both)."""
    first, second = _branches(root, a), _branches(root, b)
    return any(branch != second[node] for node, branch in first.items() if node in second)


def _branches(root: ast.AST, target: ast.AST) -> dict[int, str]:
    """For each `if` under `root` that holds `target`: which branch (by the `if`'s id)."""
    out: dict[int, str] = {}

    def holds(stmts: list[ast.stmt]) -> bool:
        return any(target is n for s in stmts for n in walk(s))

    node: ast.AST = root
    while True:
        found = False
        for child in ast.iter_child_nodes(node):
            if child is target or not any(target is n for n in walk(child)):
                continue
            if isinstance(child, ast.If):
                if holds(child.body):
                    out[id(child)] = "body"
                elif holds(child.orelse):
                    out[id(child)] = "orelse"
            node, found = child, True
            break
        if not found:
            return out
