"""The loops in `forward` (and the model's own methods it calls) that run block lists.

A loop may iterate a list directly, a slice of it, `enumerate`/`reversed`/`list`/`iter` of it,
`range(len(self.<list>))`, or several lists at once (`zip(self.l1, self.l2)`): each list it runs
gets a `LoopSite` with the calls of its blocks (`BlockCall`, gradient-checkpointing calls too).
A `while` counter loop provably equal to `for i in range(<bound>)` (`counter_loops`) is read as
that loop; the site keeps the `while` itself.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from dataclasses import dataclass

from .astutil import (
    callee_name,
    int_literal,
    mentions_gradient_checkpointing,
    self_attr,
    walk,
    walk_local,
)
from .block_calls import BlockCall as BlockCall
from .block_calls import collect_block_calls as collect_block_calls
from .counter_loops import CounterLoop, counter_loop
from .list_aliases import local_aliases
from .list_paths import expand_stages, keyed_list, same_stage
from .resolver import Resolver
from .sources import ClassRef


@dataclass
class LoopSite:
    attr: str
    loop: ast.For | ast.While  # a `while` only as a provable counter loop (`counter`)
    method: ast.FunctionDef
    owner: ClassRef
    order: int  # position in forward's flattened execution order
    block_var: str | None
    index_vars: set[str]
    calls: list[BlockCall]
    # Other block lists iterated by the same loop (`zip(self.a, self.b)`), in zip order: their
    # blocks run interleaved with this list's (block k of each before block k+1 of any).
    zipped: tuple[str, ...] = ()
    # `for i in range(<bound>)` indexing the list: the count the loop runs, when not `len(...)`
    bound: ast.expr | None = None
    # the loop runs part of the list (`LoopBinding.part`)
    part: str | None = None
    counter: CounterLoop | None = None  # the `while` loop's counter, read as `range(<bound>)`

    @property
    def body(self) -> list[ast.stmt]:
        """The statements of one iteration: a counter loop's without the counter's step."""
        step = self.counter.step if self.counter is not None else None
        return [s for s in self.loop.body if s is not step]

    @property
    def iterable(self) -> ast.expr | None:
        """What a `for` iterates; None for a counter loop."""
        return self.loop.iter if isinstance(self.loop, ast.For) else None

    @property
    def plain_calls(self) -> list[BlockCall]:
        return [c for c in self.calls if not c.checkpoint]


# The loop shapes recognised, for messages that say what was tried.
LOOP_SHAPES = (
    "`for b in self.<list>`, `self.<list>[a:b]`, `enumerate(...)`, `reversed(...)`, "
    "`list(...)`, `iter(...)`, `zip(self.<list>, ...)` (also several lists zipped: "
    "`for i, (a, b) in enumerate(zip(self.l1, self.l2))`), `range(len(self.<list>))` and "
    "`range(<count>)` indexing `self.<list>[i]`, a `while` counter loop (`i = 0` then "
    "`while i < len(self.<list>)` or `i < <count>`, `i += 1` ending the body), "
    "in `forward` and in the model's own methods it calls (2 levels)"
)


@dataclass(frozen=True)
class LoopBinding:
    """A block list a loop iterates, and the loop variable bound to its blocks (if any)."""

    attr: str
    block_var: str | None
    how: str  # direct | slice | key | range | range_bound
    bound: ast.expr | None = None  # range_bound: the count the loop runs (`self.depth`)
    # the loop runs part of the list (`self.blocks[1:]`, `range(1, len(self.blocks))`): its
    # text; under caching the list is one wrapper module, and a part of it runs no block
    part: str | None = None


def loop_bindings(
    loop: ast.For, aliases: Mapping[str, str] | None = None
) -> tuple[list[LoopBinding], list[str]]:
    """The `self.<attr>` lists `loop` iterates (several for `zip(self.a, self.b)`), each with the
    target name bound to its blocks, and the other target names (indices, zipped values).
    `aliases`: local names bound once to a list (`blocks = self.blocks`, `local_aliases`)."""
    bindings: list[LoopBinding] = []
    others: list[str] = []
    _bind(loop.target, loop.iter, bindings, others, 0, aliases or {})
    if not bindings:
        bindings += _indexed_by_range(loop)
    seen: set[str] = set()
    unique = []
    for b in bindings:
        if b.attr not in seen:
            seen.add(b.attr)
            unique.append(b)
    return unique, others


def _indexed_by_range(loop: ast.For) -> list[LoopBinding]:
    """`for i in range(self.depth): x = self.blocks[i](x)`: a count that is not `len(...)` of
    the list, and the list indexed by the loop variable in the body."""
    it = loop.iter
    if not (
        isinstance(it, ast.Call)
        and callee_name(it) == "range"
        and len(it.args) == 1
        and isinstance(loop.target, ast.Name)
    ):
        return []
    index = loop.target.id
    called = {id(n.func) for n in walk_local(loop) if isinstance(n, ast.Call)}
    # a list whose element is called (`self.blocks[i](x)`) before one only read
    # (`self.gains[i]`), each in source order
    found = sorted(
        (
            (id(node) not in called, node.lineno, node.col_offset, attr)
            for node in walk_local(loop)
            if isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Name)
            and node.slice.id == index
            and (attr := self_attr(node.value))
        ),
    )
    return [LoopBinding(found[0][3], None, "range_bound", it.args[0])] if found else []


def _names(target: ast.expr | None) -> list[str]:
    if target is None:
        return []
    return [n.id for n in walk(target) if isinstance(n, ast.Name)]


def _list_of(node: ast.expr, aliases: Mapping[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    return self_attr(node)


def _bind(
    target: ast.expr | None,
    it: ast.expr,
    out: list[LoopBinding],
    others: list[str],
    depth: int,
    aliases: Mapping[str, str],
) -> None:
    attr = _list_of(it, aliases)
    how = "direct"
    part = None
    if attr is None and (keyed := keyed_list(it)) is not None:
        attr, how = keyed, "key"  # `self.mode_blocks["image"]`: a list held in an nn.ModuleDict
    elif attr is None and isinstance(it, ast.Subscript):
        attr, how = self_attr(it.value), "slice"
        if not _whole_slice(it.slice):
            part = ast.unparse(it)
    if attr:
        var = target.id if isinstance(target, ast.Name) else None
        if var is None:
            others += _names(target)
        out.append(LoopBinding(attr, var, how, part=part))
        return
    if isinstance(it, ast.Call) and it.args and depth < 4:
        fname = callee_name(it)
        if fname in ("reversed", "list", "iter"):
            _bind(target, it.args[0], out, others, depth + 1, aliases)
            return
        if fname == "enumerate":
            if isinstance(target, ast.Tuple) and len(target.elts) == 2:
                others += _names(target.elts[0])
                _bind(target.elts[1], it.args[0], out, others, depth + 1, aliases)
            else:
                others += _names(target)
                _bind(None, it.args[0], out, others, depth + 1, aliases)
            return
        if fname == "zip":
            elts = (
                target.elts
                if isinstance(target, ast.Tuple) and len(target.elts) == len(it.args)
                else None
            )
            if elts is None:
                others += _names(target)
            for k, arg in enumerate(it.args):
                _bind(elts[k] if elts else None, arg, out, others, depth + 1, aliases)
            return
        if fname == "range":
            last = it.args[-1] if len(it.args) == 1 else it.args[1]
            if isinstance(last, ast.Call) and callee_name(last) == "len" and last.args:
                inner = _list_of(last.args[0], aliases)
                if inner:
                    start = it.args[0] if len(it.args) > 1 else None
                    whole = (start is None or int_literal(start) == 0) and len(it.args) < 3
                    part = None if whole else ast.unparse(it)
                    out.append(LoopBinding(inner, None, "range", part=part))
    others += _names(target)


def _whole_slice(index: ast.expr) -> bool:
    """`[:]`, `[0:]`, `[::1]`: a slice that keeps every block (and is kept by the one-element
    wrapper list cache-dit puts in place of the list)."""
    if not isinstance(index, ast.Slice):
        return False
    lower_ok = index.lower is None or int_literal(index.lower) == 0
    step_ok = index.step is None or int_literal(index.step) == 1
    return lower_ok and index.upper is None and step_ok


def find_loop_sites(
    cls: ClassRef, resolver: Resolver, attrs: set[str]
) -> tuple[ast.FunctionDef | None, list[LoopSite], list[ast.FunctionDef]]:
    """Loops over `attrs` in `forward` and in helper methods it calls (2 levels), in run order."""
    found = resolver.find_method(cls, "forward")
    if found is None:
        return None, [], []
    forward, owner = found
    sites: list[LoopSite] = []
    visited: list[ast.FunctionDef] = []
    counter = [0]

    def visit(func: ast.FunctionDef, func_owner: ClassRef, depth: int) -> None:
        if func in visited or depth > 2:
            return
        visited.append(func)
        nodes = sorted(
            (n for n in walk_local(func) if isinstance(n, ast.For | ast.While | ast.Call)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        aliases = local_aliases(func)
        for node in nodes:
            if isinstance(node, ast.For | ast.While):
                bindings, others, count = header_bindings(node, func, aliases)
                aliases, bindings, staged = expand_stages(bindings, aliases, attrs)
                for site in _sites(node, bindings, others, staged, attrs, func, func_owner):
                    counter[0] += 1
                    site.order, site.counter = counter[0], count
                    sites.append(site)
            elif isinstance(node, ast.Call):
                name = self_attr(node.func)
                if name and name not in attrs and func_owner.node is not None:
                    # Helper methods of the model itself (`self._run_blocks(...)`); calls of
                    # sub-modules (`self.proj_out(...)`) have no method of that name here.
                    helper = next(
                        (
                            s
                            for s in func_owner.node.body
                            if isinstance(s, ast.FunctionDef) and s.name == name
                        ),
                        None,
                    )
                    if helper is not None:
                        visit(helper, func_owner, depth + 1)

    visit(forward, owner, 0)
    return forward, sites, visited


def header_bindings(
    node: ast.For | ast.While, func: ast.FunctionDef, aliases: Mapping[str, str]
) -> tuple[list[LoopBinding], list[str], CounterLoop | None]:
    """The lists a loop of `func` runs and its other target names (`loop_bindings`); a `while`
    only when it is a provable counter loop (`counter_loops`), read as its `for`."""
    if isinstance(node, ast.For):
        return (*loop_bindings(node, aliases), None)
    found = counter_loop(node, func)
    if isinstance(found, str):
        return [], [], None
    return (*loop_bindings(found.as_for(), aliases), found)


def _sites(
    node: ast.For | ast.While,
    bindings: list[LoopBinding],
    others: list[str],
    staged: set[str],
    attrs: set[str],
    func: ast.FunctionDef,
    owner: ClassRef,
) -> list[LoopSite]:
    """A site for each list of `attrs` the loop `node` runs (order 0: the caller numbers them)."""
    listed = [b for b in bindings if b.attr in attrs]
    out = []
    for b in listed:
        # the other lists the loop runs: zipped ones, not the other stages of a nested list
        # (each outer iteration runs one stage's whole loop)
        others_run = [o for o in bindings if o is not b and not same_stage(o.attr, b.attr, staged)]
        mates = [o for o in others_run if o in listed]
        # Values zipped with this list vary per block, like an index.
        index_vars = set(others) | {o.block_var for o in others_run if o.block_var}
        calls = collect_block_calls(node, b.attr, b.block_var, index_vars, _runners(owner))
        out.append(
            LoopSite(
                b.attr,
                node,
                func,
                owner,
                0,
                b.block_var,
                index_vars,
                calls,
                tuple(o.attr for o in mates),
                b.bound,
                b.part,
            )
        )
    return out


def _runners(owner: ClassRef) -> dict[str, ast.FunctionDef]:
    """Functions of the model's file and methods of the model, by the name a loop calls."""
    out: dict[str, ast.FunctionDef] = {}
    if owner.source is not None:
        for name, stmt in owner.source.top_level.items():
            if isinstance(stmt, ast.FunctionDef):
                out[name] = stmt
    if owner.node is not None:
        for stmt in owner.node.body:
            if isinstance(stmt, ast.FunctionDef):
                out[f"self.{stmt.name}"] = stmt
    return out


# --- the loop and call that represent a list ---------------------------------------------------


def main_site(sites: list[LoopSite]) -> LoopSite:
    """The loop that represents a list: the first outside a gradient-checkpointing branch that
    calls the blocks plainly, else the first."""
    for site in sites:
        if not in_checkpoint_branch(site) and site.plain_calls:
            return site
    return sites[0]


def main_call(site: LoopSite) -> BlockCall | None:
    """The block call that represents a loop: its first plain call, else its first call."""
    if site.plain_calls:
        return site.plain_calls[0]
    return site.calls[0] if site.calls else None


def in_checkpoint_branch(site: LoopSite) -> bool:
    """Whether the loop sits in the `if ... gradient_checkpointing:` branch of its method."""
    return id(site.loop) in _checkpoint_loops(site.method)


@functools.lru_cache(maxsize=256)
def _checkpoint_loops(method: ast.FunctionDef) -> frozenset[int]:
    out: set[int] = set()
    for node in walk_local(method):
        if isinstance(node, ast.If) and mentions_gradient_checkpointing(node.test):
            out |= {id(n) for b in node.body for n in walk(b) if isinstance(n, ast.For | ast.While)}
    return frozenset(out)
