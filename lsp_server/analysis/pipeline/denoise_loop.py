"""The denoising loop of a pipeline's `__call__`, and the denoiser calls made per iteration.

`__call__` is interpreted abstractly, statement by statement, over three-valued values (see
`guards`). The denoising loop is the outermost loop over timesteps / sigmas / a progress bar (or,
relaxed, any loop calling `*.step(...)`) with no such loop inside it. In it denoiser calls are
counted per iteration: a branch whose guard is False on the default path is skipped, a branch whose
guard is unknown may run, if/else alternatives are alternatives, and a call inside an inner loop
over guidance batches counts as several calls (inside other inner loops, over tiles or frames, the
calls of one iteration are what alternate per step).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from ..astutil import self_attr, short_text, walk
from ..model import Evidence
from .calls import CAP, GUIDANCE_LOOP, CallCounter, Loop, add_counts
from .guards import Guard
from .pipeline_class import ClassCtx, Member
from .values import UNKNOWN, Def, Env, Value, join, truth

# regex source: compiled (and cached by `re`) on first use, not at import
STEP_LOOP = r"timestep|sigma|progress_bar|tqdm|inference_steps|num_steps"


def seq_counts(a: set[tuple[int, bool]], b: set[tuple[int, bool]]) -> set[tuple[int, bool]]:
    """(calls, finished) outcomes of `a` then `b`: a finished path (return/break) stops there."""
    out: set[tuple[int, bool]] = set()
    for n, d1 in a:
        if d1:
            out.add((n, True))
            continue
        for m, d2 in b:
            out.add((min(n + m, CAP), d2))
    return out


class LoopWalker(CallCounter):
    """Walks `__call__` and records each denoising loop with its per-iteration call counts."""

    def __init__(self, ctx: ClassCtx, denoisers: set[str], relaxed: bool) -> None:
        super().__init__(ctx, denoisers)
        self.relaxed = relaxed  # also take any loop calling `*.step(...)` as a denoising loop
        self.loops: list[Loop] = []

    def run_call(self) -> None:
        member = self.ctx.methods["__call__"]
        env = Env()
        told = self.ctx.call_args
        # told how it is called: an input not passed is its default, None included
        self._bind_defaults(member, env, unset_none=told is None)
        for name, value in (told or {}).items():
            if name in env.vars:
                env.vars[name] = value
                env.origin[name] = (str(member.mod.path), member.fn.lineno)
        self._enter(member, env)

    def _block(self, stmts: Sequence[ast.stmt], env: Env) -> set[tuple[int, bool]]:
        state: set[tuple[int, bool]] = {(0, False)}
        for stmt in stmts:
            if all(done for _, done in state):
                break
            state = seq_counts(state, self._stmt(stmt, env))
        return state

    def _simple(self, counts: set[int], done: bool = False) -> set[tuple[int, bool]]:
        return {(n, done) for n in counts}

    def _stmt(self, stmt: ast.stmt, env: Env) -> set[tuple[int, bool]]:
        self.stmt = stmt
        if isinstance(stmt, ast.Assign):
            counts = self._cexpr(stmt.value, env)
            self._assign(stmt.targets, stmt.value, env)
            return self._simple(counts)
        if isinstance(stmt, ast.AnnAssign):
            counts = self._cexpr(stmt.value, env)
            if stmt.value is not None:
                self._assign([stmt.target], stmt.value, env)
            return self._simple(counts)
        if isinstance(stmt, ast.AugAssign):
            counts = self._cexpr(stmt.value, env)
            self._bind(stmt.target, UNKNOWN, frozenset(), self._def(stmt, env), env)
            return self._simple(counts)
        if isinstance(stmt, ast.Expr):
            return self._simple(self._cexpr(stmt.value, env))
        if isinstance(stmt, ast.Return):
            return self._simple(self._cexpr(stmt.value, env), done=True)
        if isinstance(stmt, (ast.Continue, ast.Break, ast.Raise)):
            return {(0, True)}
        if isinstance(stmt, ast.If):
            return self._if(stmt, env)
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            return self._loop(stmt, env)
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            return self._with(stmt, env)
        if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":  # try / try*
            res = self._block(getattr(stmt, "body", []), env)
            rest = [*getattr(stmt, "orelse", []), *getattr(stmt, "finalbody", [])]
            return seq_counts(res, self._block(rest, env))
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # a closure defined in `__call__` (e.g. a per-step helper) is followed when called
            self.local_funcs[stmt.name] = Member(self.mods[-1], stmt, "", closure=True)
            return {(0, False)}
        if isinstance(stmt, ast.Match):
            outs: list[Env] = []
            res_all: set[tuple[int, bool]] = set()
            for case in stmt.cases:
                e = env.copy()
                res_all |= self._block(case.body, e)
                outs.append(e)
            if outs:
                env.assign_from(join([env, *outs]))
            return res_all or {(0, False)}
        return {(0, False)}

    def _assign(self, targets: Sequence[ast.expr], value: ast.expr, env: Env) -> None:
        val = self._eval(value, env)
        refs = self._refs(value, env)
        d = self._def(value, env)
        for t in targets:
            if (
                isinstance(t, (ast.Tuple, ast.List))
                and isinstance(value, (ast.Tuple, ast.List))
                and len(t.elts) == len(value.elts)
            ):
                for te, ve in zip(t.elts, value.elts, strict=True):
                    self._bind(
                        te, self._eval(ve, env), self._refs(ve, env), self._def(ve, env), env
                    )
            else:
                self._bind(t, val, refs, d, env)

    def _bind(self, target: ast.AST, val: Value, refs: frozenset[str], d: Def, env: Env) -> None:
        where = (self.path, getattr(target, "lineno", d.line))
        if isinstance(target, ast.Name):
            env.vars[target.id] = val
            env.defs[target.id] = (d,)
            env.origin[target.id] = where
            if refs:
                env.aliases[target.id] = refs
            else:
                env.aliases.pop(target.id, None)
        elif (attr := self_attr(target)) is not None:
            env.selfv[attr] = val
            env.origin["self." + attr] = where
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._bind(elt, UNKNOWN, frozenset(), d, env)
        elif isinstance(target, ast.Starred):
            self._bind(target.value, UNKNOWN, frozenset(), d, env)

    def _if(self, stmt: ast.If, env: Env) -> set[tuple[int, bool]]:
        pre = self._simple(self._cexpr(stmt.test, env))
        t = truth(self._eval(stmt.test, env))
        if t is not None:
            taken, skipped = (stmt.body, stmt.orelse) if t else (stmt.orelse, stmt.body)
            before = len(self.current.skipped) if self.current else 0
            self._note_skipped(skipped, Guard(stmt.test, t, "false"), env)
            self.guards.append(Guard(stmt.test, not t, "true"))
            try:
                res = self._block(taken, env)
            finally:
                self.guards.pop()
            if self.current is not None and (
                len(self.current.skipped) > before or any(n for n, _ in res)
            ):
                self._explain_guard(stmt.test, env, self.current.guard_notes)
            return seq_counts(pre, res)
        e1, e2 = env.copy(), env.copy()
        self.guards.append(Guard(stmt.test, False, "maybe"))
        try:
            r1 = self._block(stmt.body, e1)
        finally:
            self.guards.pop()
        self.guards.append(Guard(stmt.test, True, "maybe"))
        try:
            r2 = self._block(stmt.orelse, e2)
        finally:
            self.guards.pop()
        if self.current is not None and any(n for n, _ in r1 | r2):
            self._explain_guard(stmt.test, env, self.current.guard_notes)
        live = [e for e, r in ((e1, r1), (e2, r2)) if not all(d for _, d in r)] or [e1, e2]
        env.assign_from(join(live))
        return seq_counts(pre, r1 | r2)

    def _with(self, stmt: ast.With | ast.AsyncWith, env: Env) -> set[tuple[int, bool]]:
        pre: set[int] = {0}
        label = None
        for item in stmt.items:
            pre = add_counts(pre, self._cexpr(item.context_expr, env))
            ce = item.context_expr
            if (
                isinstance(ce, ast.Call)
                and isinstance(ce.func, ast.Attribute)
                and ce.func.attr == "cache_context"
                and ce.args
                and isinstance(ce.args[0], ast.Constant)
            ):
                label = str(ce.args[0].value)
            if item.optional_vars is not None:
                self._bind(item.optional_vars, UNKNOWN, frozenset(), self._def(ce, env), env)
        if label is not None:
            self.contexts.append(label)
        try:
            res = self._block(stmt.body, env)
        finally:
            if label is not None:
                self.contexts.pop()
        return seq_counts(self._simple(pre), res)

    def _is_step_loop(self, stmt: ast.For | ast.AsyncFor | ast.While) -> bool:
        head = stmt.test if isinstance(stmt, ast.While) else stmt.iter
        if re.search(STEP_LOOP, short_text(head)):
            return True
        if not self.relaxed:
            return False
        return any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
            for n in walk(stmt)
        )

    def _loop(self, stmt: ast.For | ast.AsyncFor | ast.While, env: Env) -> set[tuple[int, bool]]:
        pre: set[int] = self._cexpr(stmt.test if isinstance(stmt, ast.While) else stmt.iter, env)
        body_env = env.copy()
        if not isinstance(stmt, ast.While):
            loop_var = Def(stmt, stmt.lineno, self.path, ())
            self._bind(stmt.target, UNKNOWN, frozenset(), loop_var, body_env)
        if (
            self.current is None
            and self._is_step_loop(stmt)
            and not self._has_inner_step_loop(stmt)
        ):
            loop = Loop(stmt, self.path, self.ctx.name)
            self.current = loop
            saved_guards, self.guards = self.guards, []
            try:
                loop.counts = self._block(stmt.body, body_env)
            finally:
                self.current = None
                self.guards = saved_guards
            self.loops.append(loop)
            env.assign_from(join([env, body_env]))
            return self._simple(pre)
        res = self._block(stmt.body, body_env)
        env.assign_from(join([env, body_env]))
        if self.current is None:
            return self._simple(pre)
        # an inner loop inside the denoising loop: each iteration may call the denoiser again
        per_iter = {n for n, _ in res}
        if max(per_iter) == 0:
            return self._simple(pre)
        times = self._iterations(stmt, env)
        head = short_text(stmt.test if isinstance(stmt, ast.While) else stmt.iter)
        if not re.search(GUIDANCE_LOOP, head) and not (
            times and isinstance(stmt.iter, (ast.List, ast.Tuple))
        ):
            # tiles, views, frames...: the calls of one iteration are what alternate per step
            self.current.inner.append(
                Evidence(
                    f"denoiser called inside inner loop over `{head}` (not a guidance-batch loop): "
                    "calls counted per iteration",
                    self.path,
                    stmt.lineno,
                )
            )
            return self._simple(add_counts(pre, per_iter))
        how = f"{times} iterations" if times else "one per guidance batch"
        self.current.inner.append(
            Evidence(
                f"denoiser called inside guidance loop over `{head}` ({how}): several calls a step",
                self.path,
                stmt.lineno,
            )
        )
        k = times if times is not None else 2
        return self._simple(add_counts(pre, {min(n * k, CAP) for n in per_iter}))

    def _iterations(self, stmt: ast.For | ast.AsyncFor | ast.While, env: Env) -> int | None:
        if isinstance(stmt, ast.While):
            return None
        it = stmt.iter
        if isinstance(it, (ast.List, ast.Tuple)):
            return len(it.elts)
        if (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name)
            and it.func.id == "range"
            and len(it.args) == 1
        ):
            v = self._eval(it.args[0], env)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return None

    def _has_inner_step_loop(self, stmt: ast.AST) -> bool:
        for node in walk(stmt):
            if node is stmt or not isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
                continue
            head = node.test if isinstance(node, ast.While) else node.iter
            if re.search(STEP_LOOP, short_text(head)):
                return True
        return False
