"""The loops in `forward` (and the model's own methods it calls) that run block lists.

A loop may iterate a list directly, a slice of it, `enumerate`/`reversed`/`list`/`iter` of it,
`range(len(self.<list>))`, or several lists at once (`zip(self.l1, self.l2)`): each list it runs
gets a `LoopSite` with the calls of its blocks (`BlockCall`, gradient-checkpointing calls too).
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
    target_names,
    walk,
    walk_local,
)
from .list_aliases import local_aliases
from .list_paths import expand_stages, keyed_list, same_stage
from .sources import ClassRef, Resolver

_CHECKPOINT_FUNCS = ("_gradient_checkpointing_func", "checkpoint", "create_custom_forward")


@dataclass
class BlockCall:
    """A call of a block inside a loop (or a gradient-checkpointing call, `checkpoint=True`)."""

    call: ast.Call
    args: list[ast.expr]
    keywords: dict[str, ast.expr]
    has_star: bool
    targets: list[str | None]
    stmt: ast.stmt
    checkpoint: bool

    def output_access(self) -> str | None:
        """`x = block(x, c)["x"]` / `x = block(x, c).sample`: the part of the block's output
        the loop keeps, when it is not the output itself or an element of a returned tuple
        (`[0]`); None otherwise."""
        value = self.stmt.value if isinstance(self.stmt, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.Attribute) and value.value is self.call:
            return f".{value.attr}"
        if (
            isinstance(value, ast.Subscript)
            and value.value is self.call
            and not (isinstance(value.slice, ast.Constant) and isinstance(value.slice.value, int))
        ):
            return f"[{ast.unparse(value.slice)}]"
        return None

    def direct(self) -> ast.Call:
        """The call as the block sees it: `runner(block, x, c)` read as `block(x, c)`."""
        first = self.call.args[0] if self.call.args else None
        if self.checkpoint or first is None or self.args != self.call.args[1:]:
            return self.call
        node = ast.Call(func=first, args=list(self.args), keywords=list(self.call.keywords))
        return ast.copy_location(node, self.call)


@dataclass
class LoopSite:
    attr: str
    loop: ast.For
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

    @property
    def plain_calls(self) -> list[BlockCall]:
        return [c for c in self.calls if not c.checkpoint]


# The loop shapes recognised, for messages that say what was tried.
LOOP_SHAPES = (
    "`for b in self.<list>`, `self.<list>[a:b]`, `enumerate(...)`, `reversed(...)`, "
    "`list(...)`, `iter(...)`, `zip(self.<list>, ...)` (also several lists zipped: "
    "`for i, (a, b) in enumerate(zip(self.l1, self.l2))`), `range(len(self.<list>))` and "
    "`range(<count>)` indexing `self.<list>[i]`, "
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
    found = {
        attr: None
        for node in walk_local(loop)
        if isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Name)
        and node.slice.id == index
        and (attr := self_attr(node.value))
    }
    return [LoopBinding(attr, None, "range_bound", it.args[0]) for attr in found][:1]


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


def _is_block_callee(
    func: ast.expr, block_var: str | None, aliases: set[str], attr: str, index_vars: set[str]
) -> bool:
    if isinstance(func, ast.Name):
        return func.id == block_var or func.id in aliases
    # self.blocks[i](...)
    return isinstance(func, ast.Subscript) and self_attr(func.value) == attr


def runs_its_argument(func: ast.FunctionDef, position: int) -> bool:
    """`func` calls its parameter at `position` (`def auto_grad_checkpoint(module, *args):
    ... return module(*args, **kwargs)`): a runner the loop hands its block to."""
    params = [a.arg for a in func.args.posonlyargs + func.args.args]
    if params and params[0] == "self":
        params = params[1:]
    if position >= len(params):
        return False
    name = params[position]
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
        for n in walk_local(func)
    )


def _runner_call(
    node: ast.Call,
    block_var: str | None,
    aliases: set[str],
    attr: str,
    index_vars: set[str],
    runners: Mapping[str, ast.FunctionDef],
) -> bool:
    """`auto_grad_checkpoint(block, x, c)` / `self._run(block, x, c)`: the block handed first
    to a function of the model's file or a method of the model that calls it (or, imported from
    elsewhere, a function named for checkpointing: its inference path calls the block)."""
    if not node.args or not _is_block_callee(node.args[0], block_var, aliases, attr, index_vars):
        return False
    name = callee_name(node)
    method = self_attr(node.func)
    func = runners.get(f"self.{method}" if method else name or "")
    if func is not None:
        return runs_its_argument(func, 0)
    return name is not None and "checkpoint" in name.lower() and method is None


def collect_block_calls(
    loop: ast.For,
    attr: str,
    block_var: str | None,
    index_vars: set[str],
    runners: Mapping[str, ast.FunctionDef] | None = None,
) -> list[BlockCall]:
    """The calls of the list's blocks in `loop`; `runners`: the functions of the model's file
    (by name) and methods of the model (`self.<name>`) a block may be handed to."""
    aliases: set[str] = set()
    for node in walk_local(loop):
        # `layer_ = layer` or `block = self.blocks[i]`
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            value = node.value
            if isinstance(target, ast.Name) and (
                (isinstance(value, ast.Name) and value.id == block_var)
                or (isinstance(value, ast.Subscript) and self_attr(value.value) == attr)
            ):
                aliases.add(target.id)
    if block_var is None and aliases:
        block_var = next(iter(aliases))
    calls: list[BlockCall] = []
    stmts = _innermost_stmts(loop)
    for node in walk_local(loop):
        if not isinstance(node, ast.Call):
            continue
        stmt = stmts.get(id(node), loop)
        targets = _targets_of(stmt, node)
        if _is_block_callee(node.func, block_var, aliases, attr, index_vars):
            calls.append(_make_call(node, list(node.args), stmt, targets, checkpoint=False))
        elif callee_name(node) in _CHECKPOINT_FUNCS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Call) and first.args:
                first = first.args[0]  # create_custom_forward(block)
            if _is_block_callee(first, block_var, aliases, attr, index_vars):
                calls.append(_make_call(node, list(node.args[1:]), stmt, targets, checkpoint=True))
        elif _runner_call(node, block_var, aliases, attr, index_vars, runners or {}):
            calls.append(_make_call(node, list(node.args[1:]), stmt, targets, checkpoint=False))
    return calls


def _make_call(
    node: ast.Call,
    args: list[ast.expr],
    stmt: ast.stmt,
    targets: list[str | None],
    checkpoint: bool,
) -> BlockCall:
    keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
    has_star = any(k.arg is None for k in node.keywords) or any(
        isinstance(a, ast.Starred) for a in args
    )
    return BlockCall(node, args, keywords, has_star, targets, stmt, checkpoint)


def _innermost_stmts(root: ast.stmt) -> dict[int, ast.stmt]:
    """id(node) -> the innermost simple statement (not a compound one) under `root` holding it,
    for every node `walk_local(root)` reaches, in one pass."""
    out: dict[int, ast.stmt] = {}
    compound = ast.If | ast.For | ast.While | ast.With | ast.Try
    skipped = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef
    stack: list[tuple[ast.AST, ast.stmt]] = [(root, root)]
    while stack:
        node, current = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, skipped):
                continue
            inner = (
                child
                if isinstance(child, ast.stmt) and not isinstance(child, compound)
                else current
            )
            out[id(child)] = inner
            stack.append((child, inner))
    return out


def _targets_of(stmt: ast.stmt, call: ast.Call) -> list[str | None]:
    if isinstance(stmt, ast.Assign) and stmt.targets:
        return target_names(stmt.targets[0])
    if isinstance(stmt, ast.AnnAssign):
        return target_names(stmt.target)
    if isinstance(stmt, ast.AugAssign):
        return target_names(stmt.target)
    return []


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
            (n for n in walk_local(func) if isinstance(n, ast.For | ast.Call)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        aliases = local_aliases(func)
        for node in nodes:
            if isinstance(node, ast.For):
                bindings, others = loop_bindings(node, aliases)
                aliases, bindings, staged = expand_stages(bindings, aliases, attrs)
                listed = [b for b in bindings if b.attr in attrs]
                for b in listed:
                    # the other lists the loop runs: zipped ones, not the other stages of a
                    # nested list (each outer iteration runs one stage's whole loop)
                    others_run = [
                        o for o in bindings if o is not b and not same_stage(o.attr, b.attr, staged)
                    ]
                    mates = [o for o in others_run if o in listed]
                    # Values zipped with this list vary per block, like an index.
                    index_vars = set(others) | {o.block_var for o in others_run if o.block_var}
                    counter[0] += 1
                    sites.append(
                        LoopSite(
                            b.attr,
                            node,
                            func,
                            func_owner,
                            counter[0],
                            b.block_var,
                            index_vars,
                            collect_block_calls(
                                node, b.attr, b.block_var, index_vars, _runners(func_owner)
                            ),
                            tuple(o.attr for o in mates),
                            b.bound,
                            b.part,
                        )
                    )
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
            out |= {id(n) for b in node.body for n in walk(b) if isinstance(n, ast.For)}
    return frozenset(out)
