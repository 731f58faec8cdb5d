"""Counting denoiser calls: what a call is, how often one is made, and which helpers are followed.

A call is a denoiser call when it calls a denoiser attribute (`self.transformer(...)`,
`self.transformer.forward(...)`) or an alias of one (`current_model = self.transformer if ... else
self.transformer_2`; `current_model(...)`). Helper methods, module functions of the same file and
closures defined in `__call__` are followed with their arguments bound. Counts are sets of possible
numbers of calls, saturating at `CAP`; a call inside a comprehension over guidance batches counts
as several calls.
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..astutil import names_in, self_attr, short_text, walk
from ..model import Evidence
from .denoisers import FORWARD
from .guards import Guard, GuardEvaluator
from .pipeline_class import ClassCtx, Member, Module
from .values import UNKNOWN, Def, Env, const_default, truth

CAP = 3  # call counts saturate here: "two or more" is all the decision needs
_MAX_DEPTH = 6  # nested helper calls followed
# regex source: compiled (and cached by `re`) on first use, not at import
GUIDANCE_LOOP = r"guid|cfg|cond|negative|_neg|neg_"


def add_counts(a: set[int], b: set[int]) -> set[int]:
    """Possible totals of two things done one after the other."""
    return {min(x + y, CAP) for x in a for y in b}


_LEAVES = (
    ast.Name,
    ast.Constant,
    ast.expr_context,
    ast.operator,
    ast.cmpop,
    ast.boolop,
    ast.unaryop,
)


@functools.lru_cache(maxsize=1)
def _builtin_names() -> frozenset[str]:
    return frozenset(dir(builtins))


def _may_reach_denoiser(call: ast.Call) -> bool:
    """Calls worth following: `self.x(...)`, `x.forward(...)`, `name(...)` (not a builtin)."""
    f = call.func
    if isinstance(f, ast.Name):
        return f.id not in _builtin_names()
    if isinstance(f, ast.Attribute):
        return self_attr(f) is not None or f.attr in FORWARD
    return True


def mark_hot(ctx: ClassCtx, root: ast.AST) -> None:
    """Adds to `ctx.hot` the ancestors (under `root`) of calls that may reach a denoiser."""
    if id(root) in ctx.indexed:
        return
    ctx.indexed.add(id(root))
    parents: dict[int, ast.AST] = {}
    calls: list[ast.Call] = []
    stack: list[ast.AST] = [root]
    while stack:
        node = stack.pop()
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST) and not isinstance(item, _LEAVES):
                        parents[id(item)] = node
                        stack.append(item)
            elif isinstance(value, ast.AST) and not isinstance(value, _LEAVES):
                parents[id(value)] = node
                stack.append(value)
        if isinstance(node, ast.Call) and _may_reach_denoiser(node):
            calls.append(node)
    for call in calls:
        cur: ast.AST | None = call
        while cur is not None and id(cur) not in ctx.hot:
            ctx.hot.add(id(cur))
            cur = parents.get(id(cur))


@dataclass
class Site:
    """One denoiser call reached (or skipped) inside a denoising loop."""

    call: ast.Call
    stmt: ast.stmt | None
    scope: ast.AST
    path: str
    guards: tuple[Guard, ...]
    context: str | None
    arg_defs: tuple[tuple[str, tuple[Def, ...]], ...] = ()
    skipped_by: Guard | None = None


@dataclass
class Loop:
    """A denoising loop: possible (calls per iteration, finished) outcomes and their evidence."""

    node: ast.For | ast.AsyncFor | ast.While
    path: str
    where: str
    counts: set[tuple[int, bool]] = field(default_factory=set)
    sites: list[Site] = field(default_factory=list)
    skipped: list[Site] = field(default_factory=list)
    inner: list[Evidence] = field(default_factory=list)
    guard_notes: list[Evidence] = field(default_factory=list)

    @property
    def max_calls(self) -> int:
        return max((n for n, _ in self.counts), default=0)


class CallCounter(GuardEvaluator):
    """Walker state and expression-level call counting (statements: `denoise_loop.LoopWalker`)."""

    def __init__(self, ctx: ClassCtx, denoisers: set[str]) -> None:
        super().__init__(ctx)
        self.denoisers = denoisers
        self.current: Loop | None = None  # the denoising loop being walked
        self.guards: list[Guard] = []
        self.contexts: list[str] = []
        self.stack: list[int] = []
        self.mods: list[Module] = [ctx.mod]
        self.scopes: list[ast.AST] = []
        self.stmt: ast.stmt | None = None
        self.local_funcs: dict[str, Member] = {}

    def _block(self, stmts: Sequence[ast.stmt], env: Env) -> set[tuple[int, bool]]:
        """Walks statements (`denoise_loop.LoopWalker`): possible (calls, finished) outcomes."""
        raise NotImplementedError

    def _enter(self, member: Member, env: Env) -> set[int]:
        key = id(member.fn)
        if key in self.stack or len(self.stack) >= _MAX_DEPTH:
            return {0}
        self.stack.append(key)
        mark_hot(self.ctx, member.fn)
        self.mods.append(member.mod)
        self.scopes.append(member.fn)
        saved_stmt = self.stmt
        try:
            res = self._block(member.fn.body, env)
        finally:
            self.stack.pop()
            self.mods.pop()
            self.scopes.pop()
            self.stmt = saved_stmt
        return {n for n, _ in res}

    @property
    def path(self) -> str:
        return str(self.mods[-1].path)

    def _bind_defaults(self, member: Member, env: Env, unset_none: bool) -> list[str]:
        a = member.fn.args
        params = [p.arg for p in [*a.posonlyargs, *a.args]]
        if params and params[0] in ("self", "cls") and member.owner:
            params = params[1:]
        defaults = list(a.defaults)
        line = member.fn.lineno
        for p in params:
            env.vars[p] = UNKNOWN
        for p, d in zip(params[len(params) - len(defaults) :], defaults, strict=True):
            env.vars[p] = const_default(d, unset_none)
            env.origin[p] = (str(member.mod.path), getattr(d, "lineno", line))
        for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
            env.vars[p.arg] = const_default(d, unset_none)
            env.origin[p.arg] = (str(member.mod.path), getattr(d, "lineno", line))
        return params + [p.arg for p in a.kwonlyargs]

    def _follow(self, member: Member, call: ast.Call, env: Env) -> set[int]:
        if id(member.fn) in self.stack or len(self.stack) >= _MAX_DEPTH:
            return {0}
        callee = env.copy() if member.closure else Env(selfv=dict(env.selfv))
        names = self._bind_defaults(member, callee, unset_none=False)
        a = member.fn.args
        positional = [p.arg for p in [*a.posonlyargs, *a.args]]
        if positional and positional[0] in ("self", "cls") and member.owner:
            positional = positional[1:]
        bound: list[tuple[str, ast.expr]] = []
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break
            if i < len(positional):
                bound.append((positional[i], arg))
        has_kwargs = False
        for kw in call.keywords:
            if kw.arg is None:
                has_kwargs = True
            elif kw.arg in names:
                bound.append((kw.arg, kw.value))
        if has_kwargs:
            done = {p for p, _ in bound}
            for p in names:
                if p not in done:
                    callee.vars[p] = UNKNOWN
        for p, expr in bound:
            callee.vars[p] = self._eval(expr, env)
            refs = self._refs(expr, env)
            if refs:
                callee.aliases[p] = refs
            callee.defs[p] = (self._def(expr, env),)
            callee.origin[p] = (self.path, expr.lineno)
        res = self._enter(member, callee)
        env.selfv.update(callee.selfv)
        return res

    def _def(self, value: ast.AST, env: Env) -> Def:
        # data flow is only needed for the denoiser's inputs, i.e. inside the denoising loop
        deps: tuple[tuple[str, tuple[Def, ...]], ...] = ()
        if self.current is not None:
            deps = tuple((n, env.defs.get(n, ())) for n in sorted(names_in(value)))
        return Def(value, getattr(value, "lineno", 0), self.path, deps)

    def _is_denoiser_call(self, call: ast.Call, env: Env) -> bool:
        f = call.func
        attr = self_attr(f)
        if attr is not None:
            return attr in self.denoisers
        if isinstance(f, ast.Name):
            return bool(env.aliases.get(f.id, frozenset()) & self.denoisers)
        if isinstance(f, ast.Attribute) and f.attr in FORWARD:
            return bool(self._refs(f.value, env) & self.denoisers)
        return False

    def _cexpr(self, node: ast.AST | None, env: Env) -> set[int]:
        """Possible numbers of denoiser calls made while evaluating an expression."""
        if node is None or id(node) not in self.ctx.hot:
            return {0}
        if isinstance(node, ast.IfExp):
            test = self._cexpr(node.test, env)
            t = truth(self._eval(node.test, env))
            if t is True:
                return add_counts(test, self._cexpr(node.body, env))
            if t is False:
                return add_counts(test, self._cexpr(node.orelse, env))
            return add_counts(test, self._cexpr(node.body, env) | self._cexpr(node.orelse, env))
        if isinstance(node, ast.Lambda):
            return {0}
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner: set[int] = {0}
            for child in ast.iter_child_nodes(node):
                inner = add_counts(inner, self._cexpr(child, env))
            heads = " ".join(short_text(g.iter) for g in node.generators)
            if max(inner) > 0 and self.current is not None and re.search(GUIDANCE_LOOP, heads):
                self.current.inner.append(
                    Evidence(
                        f"denoiser called in a comprehension over guidance batches `{heads}`: "
                        "several calls per step",
                        self.path,
                        node.lineno,
                    )
                )
                return {CAP}
            return inner
        total: set[int] = {0}
        if isinstance(node, ast.Call):
            total = self._ccall(node, env)
            children: list[ast.AST] = [*node.args, *(k.value for k in node.keywords)]
            f = node.func
            if isinstance(f, ast.Attribute) and self_attr(f) is None:
                children.append(f.value)
            elif not isinstance(f, (ast.Attribute, ast.Name)):
                children.append(f)
        else:
            children = list(ast.iter_child_nodes(node))
        for child in children:
            total = add_counts(total, self._cexpr(child, env))
        return total

    def _ccall(self, call: ast.Call, env: Env) -> set[int]:
        if self._is_denoiser_call(call, env):
            self._record_site(call, env)
            return {1}
        f = call.func
        attr = self_attr(f)
        if attr is not None and attr in self.ctx.methods:
            return self._follow(self.ctx.methods[attr], call, env)
        if isinstance(f, ast.Name):
            local = self.local_funcs.get(f.id)
            if local is not None:
                return self._follow(local, call, env)
            if f.id not in env.vars and f.id in self.mods[-1].functions:
                fn = self.mods[-1].functions[f.id]
                return self._follow(Member(self.mods[-1], fn, ""), call, env)
        return {0}

    def _record_site(self, call: ast.Call, env: Env) -> None:
        if self.current is None:
            return
        arg_names: dict[str, None] = {}  # in argument order: the latent input usually comes first
        for a in [*call.args, *(k.value for k in call.keywords)]:
            for n in walk(a):
                if isinstance(n, ast.Name):
                    arg_names.setdefault(n.id)
        arg_defs = tuple((n, env.defs.get(n, ())) for n in arg_names)
        self.current.sites.append(
            Site(
                call,
                self.stmt,
                self.scopes[-1] if self.scopes else call,
                self.path,
                tuple(self.guards),
                self.contexts[-1] if self.contexts else None,
                arg_defs,
            )
        )

    def _note_skipped(self, stmts: Iterable[ast.AST], guard: Guard, env: Env) -> None:
        if self.current is None:
            return
        for stmt in stmts:
            if id(stmt) not in self.ctx.hot:
                continue
            for node in walk(stmt):
                if isinstance(node, ast.Call) and self._is_denoiser_call(node, env):
                    self.current.skipped.append(
                        Site(node, None, node, self.path, tuple(self.guards), None, (), guard)
                    )
