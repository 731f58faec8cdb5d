"""Does the transformer need a cache-dit PatchFunctor? Reasons with the offending lines.

Under caching, cache-dit swaps each cached block list for a one-element list whose single module
runs every block itself, calling them positionally (facts §1.4). So the transformer's loop body runs
once, keyword calls are re-bound, and reads of `self.<blocks>[i]` see one element. This module finds
the code that breaks under those mechanics:

- `keyword_binding`: the call's arguments land on other parameters after the positional re-call;
- `keyword_only_streams`: the block takes its streams only by keyword (`def forward(self, *, x,
  c)`), which no positional re-call can pass: each block runs through a step;
- `block_output_access`: the loop keeps a part of the block's output (`block(x)["x"]`,
  `block(x).sample`), which cache-dit's wrapper would treat as the streams: each block runs
  through a step that returns them;
- `loop_index_dependent`: loop-body work or call arguments that depend on the block index;
- `per_block_work`: loop-body work that changes the carried stream (`x = x.clamp(...)` after the
  call): it must run once per block;
- `per_block_exchange`: values passed between the blocks of one list through a collection
  (`skips.append(x)` ... `blk(x, skips.pop())`): moved into each block's call, right while no
  block runs after a skipped one (`Bn_compute_blocks=0`);
- `per_block_state`: one value per block added to a collection read after the loop
  (`feats.append(x)`; U-ViT's input blocks feeding the output blocks): skipped blocks would add
  none, so caching is refused;
- `loop_invariant`: other loop-body work (runs once, but the guide requires hoisting it);
- `block_list_access`: `self.<blocks>[k]` / `len(self.<blocks>)` / iterating `self.<blocks>`
  outside the loop that runs the blocks;
- `stream_order`: the denoised stream is not the block's first positional input;
- `loop_bound` / `loop_bound_unproven`: `for i in range(<count>)` indexing the list, with a count
  that is (or is not shown to be) the list's length;
- `partial_loop`: a loop over part of the list (`self.blocks[1:]`, `range(1, len(...))`), the
  rest called apart: cache-dit's wrapper runs every block or none, so caching is refused.
- `token_count_change`: blocks that return another token count than they take (a token merge,
  a pooling: hourglass stages): DBCache's residual needs one shape, so caching is refused.

Work guarded by an optional input (`if controlnet_block_samples is not None:`) or a config flag that
is off by default is reported with `activeWhen`; it only counts when that input is passed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .astutil import (
    is_none,
    names_assigned,
    not_none_guards,
    self_attr,
    walk,
    walk_local,
)
from .block_loops import BlockCall, LoopSite
from .forward_pattern import UNIFIED_PARAMS, BlockSignature

HIGH = "high"
MEDIUM = "medium"


@dataclass(frozen=True)
class Reason:
    kind: str
    message: str
    line: int
    severity: str = HIGH
    active_when: str | None = None  # e.g. "controlnet_block_samples is passed"
    active: bool = True
    block_list: str | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "kind": self.kind,
            "message": self.message,
            "line": self.line,
            "severity": self.severity,
            "active": self.active,
        }
        if self.active_when:
            out["activeWhen"] = self.active_when
        if self.block_list:
            out["blockList"] = self.block_list
        return out


# --- binding simulation -----------------------------------------------------------------------


def _bind(sig: BlockSignature, args: list[str], keywords: dict[str, str]) -> dict[str, str] | str:
    bound: dict[str, str] = {}
    for i, arg in enumerate(args):
        if i < len(sig.params):
            bound[sig.params[i]] = arg
        elif sig.has_var_positional:
            bound[f"*args[{i - len(sig.params)}]"] = arg
        else:
            return f"too many positional arguments ({len(args)} for {len(sig.params)})"
    for name, value in keywords.items():
        if name in sig.params or name in sig.kwonly:
            if name in bound:
                return f"got multiple values for `{name}`"
            bound[name] = value
        elif sig.has_var_keyword:
            bound[f"**{name}"] = value
        else:
            return f"unexpected keyword `{name}`"
    return bound


def keyword_only_streams(sig: BlockSignature, pattern: str) -> list[str]:
    """The pattern's streams that the block takes only by keyword (`def forward(self, *, x,
    c)`): cache-dit's wrapper calls every block with its streams positionally, which Python
    refuses for these whatever the transformer's call looks like."""
    streams = sig.named[: len(UNIFIED_PARAMS[pattern])]
    return [s for s in streams if s in sig.kwonly]


def binding_problem(sig: BlockSignature, call: BlockCall, pattern: str) -> str | None:
    """Why cache-dit's positional re-call of the block binds arguments differently, or None."""
    if call.has_star:
        return None
    args = [ast.unparse(a) for a in call.args]
    keywords = {k: ast.unparse(v) for k, v in call.keywords.items()}
    original = _bind(sig, args, keywords)
    if isinstance(original, str):
        return None  # the original call does not bind statically; nothing to compare
    unified = UNIFIED_PARAMS[pattern]
    ub: dict[str, str] = {}
    rest_args: list[str] = []
    for i, arg in enumerate(args):
        if i < len(unified):
            ub[unified[i]] = arg
        else:
            rest_args.append(arg)
    rest_kw: dict[str, str] = {}
    for name, value in keywords.items():
        if name in unified:
            if name in ub:
                return f"cache-dit's wrapper would get `{name}` twice"
            ub[name] = value
        else:
            rest_kw[name] = value
    missing = [p for p in unified if p not in ub]
    if missing:
        return (
            f"the call does not pass `{missing[0]}`, which cache-dit's {pattern} wrapper requires"
        )
    recalled = _bind(sig, [ub[p] for p in unified] + rest_args, rest_kw)
    if isinstance(recalled, str):
        return f"cache-dit re-calls the block positionally and Python would fail: {recalled}"
    for param, value in original.items():
        if recalled.get(param) != value:
            landed = next((p for p, v in recalled.items() if v == value), None)
            where = f"`{landed}`" if landed else "nowhere"
            return (
                f"`{value}` is passed to `{param}` but cache-dit's positional re-call puts it "
                f"in {where}"
            )
    return None


# --- loop-body work ---------------------------------------------------------------------------


@dataclass
class Context:
    """What the loop-body classification needs to know about the transformer."""

    optional_inputs: set[str]  # forward parameters defaulting to None
    flags: dict[str, object]  # self.<flag> / self.config.<flag> -> default value
    pre_loop_taint: dict[str, set[str]]  # variable -> {"opt:x"} built only when x is passed
    passed_inputs: set[str] | None  # keywords the pipeline passes (None: no pipeline)


def pre_loop_taint(
    forward: ast.FunctionDef, optional_inputs: set[str], before_line: int
) -> dict[str, set[str]]:
    """Variables that stay empty unless an optional input is passed.

    `m = {}` then `if x is not None: m = {...}` before the loop makes `m` depend on `x`.
    """
    taint: dict[str, set[str]] = {}
    for node in walk_local(forward):
        if getattr(node, "lineno", before_line) >= before_line:
            continue
        if isinstance(node, ast.If):
            guards = not_none_guards(node.test) & optional_inputs
            if guards:
                for stmt in node.body:
                    for name in names_assigned(stmt):
                        taint.setdefault(name, set()).update(f"opt:{g}" for g in guards)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.IfExp):
            guards = not_none_guards(node.value.test) & optional_inputs
            if guards and is_none(node.value.orelse):
                for target in node.targets:
                    for name in names_assigned(target):
                        taint.setdefault(name, set()).update(f"opt:{g}" for g in guards)
    return taint


def _flag_tags(test: ast.expr, flags: dict[str, object]) -> set[str]:
    """`if self.flag:` / `if self.config.flag:` with a known default."""
    tags = set()
    terms = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    for term in terms:
        attr = self_attr(term)
        if attr is None and isinstance(term, ast.Attribute) and self_attr(term.value) == "config":
            attr = term.attr
        if attr is not None and attr in flags:
            tags.add(f"flag:{attr}")
    return tags


def _describe(tags: set[str], flags: dict[str, object]) -> str | None:
    conditions = sorted(t.split(":", 1)[1] for t in tags if t.startswith("opt:"))
    flag_names = sorted(t.split(":", 1)[1] for t in tags if t.startswith("flag:"))
    parts = [f"`{c}` is passed" for c in conditions]
    parts += [f"`{f}` is enabled (default {flags.get(f)!r})" for f in flag_names]
    return " and ".join(parts) if parts else None


def _is_active(tags: set[str], ctx: Context) -> bool:
    for tag in tags:
        kind, _, name = tag.partition(":")
        if kind == "opt" and ctx.passed_inputs is not None and name not in ctx.passed_inputs:
            return False
        if kind == "flag" and not ctx.flags.get(name):
            return False
    return True


def loop_bound_reason(site: LoopSite, count_expr: str | None) -> Reason:
    """`for i in range(self.depth): self.blocks[i](...)`: under caching the list holds one
    wrapper, so the loop must run `len(self.<list>)` times. Rewritten (`loop_bound`) when the
    count is the list's own length: the same expression the list is built with, directly or
    through an attribute `__init__` sets to it (`self.depth = depth`, `self.config.depth`);
    otherwise `loop_bound_unproven` (the copy cannot be made without changing what runs)."""
    assert site.bound is not None
    bound = ast.unparse(site.bound)
    same = count_expr is not None and count_expr in _names_for(site, site.bound)
    loop = f"`for ... in range({bound})` over `self.{site.attr}[...]`"
    copy = f"`range(len(self.{site.attr}))`"
    if site.counter is not None:  # `while i < self.depth: ...; i += 1`
        loop = f"`while {site.counter.index} < {bound}` over `self.{site.attr}[...]`"
        copy = f"while `{site.counter.index} < len(self.{site.attr})`"
    if same:
        return Reason(
            "loop_bound",
            f"{loop}: under caching the list holds one wrapper, so the copy loops "
            f"{copy} (`{bound}` is the list's length, `{count_expr}`)",
            site.loop.lineno,
            HIGH,
            None,
            True,
            site.attr,
        )
    return Reason(
        "loop_bound_unproven",
        f"{loop}: `{bound}` is not shown to be the list's length "
        f"(`{count_expr or '?'}`); under caching the list holds one wrapper",
        site.loop.lineno,
        HIGH,
        None,
        True,
        site.attr,
    )


def partial_loop_reason(site: LoopSite) -> Reason:
    """A loop over part of the list (`for b in self.blocks[1:]`, `range(1, len(self.blocks))`,
    the other blocks called apart): under caching the list holds one wrapper module that runs
    every block, so the part would run none of them (or all, twice). Nothing in a copy of
    forward turns that into one loop over the whole list: caching this list is refused."""
    assert site.part is not None
    return Reason(
        "partial_loop",
        f"the loop over `{site.part}` runs part of `self.{site.attr}`; under caching the list "
        "holds one wrapper module that runs every block, so that part would run none of them",
        site.loop.lineno,
        HIGH,
        None,
        True,
        site.attr,
    )


def token_count_reason(site: LoopSite, block: str, line: int, call: str) -> Reason:
    """Blocks whose output has another token count than their input (a token merge, a pooling):
    DBCache's residual (output minus input of the blocks it skips) needs one shape, so caching
    this list is refused (cache-dit stopped on the shape at the first cached step)."""
    return Reason(
        "token_count_change",
        f"{block} returns another token count than it takes (`{call}`, line {line} of its "
        "file): DBCache caches the residual of the blocks it skips (output minus input), which "
        "needs one shape",
        site.loop.lineno,
        HIGH,
        None,
        True,
        site.attr,
    )


def _names_for(site: LoopSite, bound: ast.expr) -> set[str]:
    """The expressions `bound` stands for: itself; for `self.<a>`, what `__init__` assigns to
    it; for `self.config.<a>`, `<a>` (a registered config argument)."""
    out = {ast.unparse(bound)}
    if (
        isinstance(bound, ast.Attribute)
        and isinstance(bound.value, ast.Attribute)
        and bound.value.attr == "config"
        and self_attr(bound.value) == "config"
    ):
        out.add(bound.attr)
    attr = self_attr(bound)
    init = next(
        (
            s
            for s in (site.owner.node.body if site.owner.node is not None else [])
            if isinstance(s, ast.FunctionDef) and s.name == "__init__"
        ),
        None,
    )
    if attr and init is not None:
        for node in walk_local(init):
            if isinstance(node, ast.Assign) and any(self_attr(t) == attr for t in node.targets):
                out.add(ast.unparse(node.value))
    return out


def _short(stmt: ast.AST, limit: int = 90) -> str:
    text = ast.unparse(stmt).split("\n")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def block_list_access_reasons(
    funcs: list[ast.FunctionDef], sites: list[LoopSite], attrs: set[str], ctx: Context
) -> list[Reason]:
    """`self.<blocks>[k]`, `len(self.<blocks>)` and iterations of `self.<blocks>` (comprehensions,
    loops that do not run the blocks) outside the loops that run that list."""
    inside: set[int] = set()
    for site in sites:
        for node in walk(site.loop):
            inside.add(id(node))
    guards: dict[int, set[str]] = {}
    for func in funcs:
        for node in walk_local(func):
            if isinstance(node, ast.If):
                tags = {f"opt:{g}" for g in not_none_guards(node.test) & ctx.optional_inputs}
                tags |= _flag_tags(node.test, ctx.flags)
                if tags:
                    for stmt in node.body:
                        for sub in walk(stmt):
                            guards.setdefault(id(sub), set()).update(tags)
    reasons: list[Reason] = []
    seen_lines: set[tuple[str, int]] = set()
    for func in funcs:
        for node in walk_local(func):
            # `len(self.blocks) > 0` / `if len(self.blocks):` only test emptiness, which the
            # one-element wrapper list preserves.
            if isinstance(node, ast.Compare) and _is_emptiness_test(node):
                inside.add(id(node.left))
            elif isinstance(node, ast.If | ast.IfExp | ast.While) and isinstance(
                node.test, ast.Call
            ):
                inside.add(id(node.test))
        for node in walk_local(func):
            if id(node) in inside:
                continue
            attr = None
            where: ast.AST = node
            if isinstance(node, ast.Subscript) and self_attr(node.value) in attrs:
                attr = self_attr(node.value)
            elif isinstance(node, ast.comprehension | ast.For) and self_attr(node.iter) in attrs:
                # `[b.attn.processor for b in self.blocks]`: iterates the one-element wrapper
                attr, where = self_attr(node.iter), node.iter
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "len"
                and node.args
                and self_attr(node.args[0]) in attrs
            ):
                attr = self_attr(node.args[0])
            line = getattr(where, "lineno", 0)
            if attr and (attr, line) not in seen_lines:
                seen_lines.add((attr, line))
                tags = guards.get(id(node), set())
                text = ast.unparse(where if isinstance(node, ast.For) else node)
                if isinstance(node, ast.comprehension):
                    text = f"for ... in {ast.unparse(node.iter)}"
                reasons.append(
                    Reason(
                        "block_list_access",
                        f"`{text}` reads the block list outside its loop; under "
                        f"caching `self.{attr}` holds a single wrapper module",
                        line,
                        HIGH,
                        _describe(tags, ctx.flags),
                        _is_active(tags, ctx),
                        attr,
                    )
                )
    return reasons


def _is_emptiness_test(node: ast.Compare) -> bool:
    if len(node.ops) != 1 or not isinstance(node.comparators[0], ast.Constant):
        return False
    bound = node.comparators[0].value
    op = node.ops[0]
    return (bound == 0 and isinstance(op, ast.Gt | ast.NotEq | ast.Eq)) or (
        bound == 1 and isinstance(op, ast.GtE | ast.Lt)
    )


def stream_order_reason(
    site: LoopSite,
    call: BlockCall,
    second_param: str | None,
    sig: BlockSignature,
    forward: ast.FunctionDef,
) -> Reason | None:
    """The stream read after the last loop (the denoised one) must be the first positional input."""
    if second_param is None or not call.args:
        return None
    first_var = call.args[0].id if isinstance(call.args[0], ast.Name) else None
    second_expr = None
    if second_param in call.keywords:
        second_expr = call.keywords[second_param]
    elif second_param in sig.params and sig.params.index(second_param) < len(call.args):
        second_expr = call.args[sig.params.index(second_param)]
    if first_var is None and sig.named and sig.named[0] in call.keywords:
        value = call.keywords[sig.named[0]]
        first_var = value.id if isinstance(value, ast.Name) else None
    second_var = second_expr.id if isinstance(second_expr, ast.Name) else None
    if not first_var or not second_var or site.method is not forward:
        return None
    end = getattr(site.loop, "end_lineno", site.loop.lineno)
    after: set[str] = set()
    for node in walk_local(forward):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.lineno > end:
            after.add(node.id)
    if second_var in after and first_var not in after:
        return Reason(
            "stream_order",
            f"the stream used after the loop is `{second_var}`, but the block's first positional "
            f"input is `{first_var}`; cache-dit decides caching on the first stream, so reorder "
            "them (the denoised stream must come first)",
            call.call.lineno,
            HIGH,
            None,
            True,
            site.attr,
        )
    return None
