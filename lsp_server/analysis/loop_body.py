"""The loop-body checks of the PatchFunctor analysis: under caching the body of a loop over a
cached list runs once (cache-dit swaps the list for a one-element list whose wrapper runs every
block), so work that varies per block must move into each block's call or refuse caching.

Each statement of the body is tainted (`index`: varies per block; `stream`: computed from a
stream the block calls assign; `state:<name>`: takes a value from a collection that outlives the
loop; `opt:x` / `flag:f`: runs only when input `x` is passed / flag `f` is on) and reported as
`loop_index_dependent`, `per_block_work`, `per_block_exchange`, `per_block_state` or
`loop_invariant` (see `patch_functor`'s docstring for what each means). A stream routed to the
blocks (`routed = blk(torch.gather(x, 1, idx), c)` written back into `x`) is a stream the blocks
carry, and a block input computed from a stream's contents (`m = self.mod(x)`, `blk(x, m)`) is
`per_block_work`, not loop-invariant (`stream_reads`).
"""

from __future__ import annotations

import ast

from .astutil import (
    is_call_output,
    mentions_gradient_checkpointing,
    names_assigned,
    names_read,
    not_none_guards,
    self_attr,
    walk_local,
)
from .block_calls import is_int_index
from .block_loops import LoopSite
from .patch_functor import (
    HIGH,
    MEDIUM,
    Context,
    Reason,
    _describe,
    _flag_tags,
    _is_active,
    _short,
)
from .stream_reads import (
    call_argument_names,
    routed_streams,
    stream_derived_arguments,
    value_names,
)

STREAM = "stream"  # taint: computed from a stream the block calls assign
STATE = "state"  # taint `state:<name>`: takes a value from a container that outlives the loop
# methods that add to a collection in place
_GROWERS = frozenset({"append", "extend", "insert", "add", "appendleft", "extendleft", "put"})


def _collection(node: ast.AST) -> bool:
    return isinstance(node, ast.List | ast.Tuple)


def loop_body_reasons(site: LoopSite, ctx: Context, one_output: bool = False) -> list[Reason]:
    """The work of the loop body over `site`'s list that breaks when the body runs once;
    `one_output`: the list's pattern hands back one stream (a tensor, under caching)."""
    scan = _LoopBodyScan(site, ctx, one_output)
    scan.visit(site.body, set())
    return scan.reasons


class _LoopBodyScan:
    """One walk of a block loop's body: each statement's taint tags (`index`: varies per block;
    `opt:x` / `flag:f`: runs only when input `x` is passed / flag `f` is on), and the reasons."""

    def __init__(self, site: LoopSite, ctx: Context, one_output: bool) -> None:
        self.site = site
        self.ctx = ctx
        self.one_output = one_output
        self.call_nodes = {id(c.call) for c in site.calls}
        index_vars = set(site.index_vars)
        for node in walk_local(site.loop):
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                index_vars.add(node.target.id)  # loop-carried counters (`block_id += 1`)
        self.index_vars = index_vars
        self.taint: dict[str, set[str]] = {k: set(v) for k, v in ctx.pre_loop_taint.items()}
        for var in index_vars:
            self.taint.setdefault(var, set()).add("index")
        # the streams the blocks carry: what the block calls assign (`x = block(x, c)`), and
        # streams routed to them (`routed = block(gather(x, 1, idx))`, written back into `x`)
        self.streams = {t for c in site.calls for t in c.targets if t}
        self.streams |= routed_streams(site.calls, site.body)
        self.stream_valued = _stream_valued(site.body, self.streams)
        self.call_inputs = call_argument_names(site.calls)
        for var in self.streams:
            self.taint.setdefault(var, set()).add(STREAM)
        self.loop_locals = names_assigned(site.loop)
        end = site.loop.end_lineno or site.loop.lineno
        self.read_after = {
            n.id
            for n in walk_local(site.method)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.lineno > end
        }
        self.reasons: list[Reason] = []

    def contains_call(self, stmt: ast.AST) -> bool:
        return any(id(n) in self.call_nodes for n in walk_local(stmt))

    def contains_call_node(self, stmt: ast.AST, call: ast.Call) -> bool:
        return any(n is call for n in walk_local(stmt))

    def tags_of(self, node: ast.AST) -> set[str]:
        out: set[str] = set()
        for name in names_read(node):
            out |= self.taint.get(name, set())
        if self.reads_block(node):
            out.add("index")
        for sub in walk_local(node):
            if (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and sub.func.attr in ("pop", "popleft")
                and not self_attr(sub.func.value)
            ):
                out.add("index")
                owner = self.outer_name(sub.func.value)
                if owner:
                    out.add(f"{STATE}:{owner}")
        return out

    def reads_block(self, node: ast.AST) -> bool:
        """`node` reads the loop's block other than by calling it (`blk.use_rope`,
        `isinstance(blk, A)`, `runner(blk, x)` excepted): a value that differs from block to
        block, like the index (under caching the name holds cache-dit's wrapper)."""
        var = self.site.block_var
        if var is None:
            return False
        callees: set[int] = set()
        for sub in walk_local(node):
            if isinstance(sub, ast.Call):
                callees.add(id(sub.func))
                first = sub.args[0] if id(sub) in self.call_nodes and sub.args else None
                if isinstance(first, ast.Call) and first.args:
                    first = first.args[0]  # `checkpoint(create_custom_forward(blk), x)`
                if first is not None:
                    callees.add(id(first))  # `checkpoint(blk, x, c)`
        return any(
            isinstance(sub, ast.Name)
            and sub.id == var
            and isinstance(sub.ctx, ast.Load)
            and id(sub) not in callees
            for sub in walk_local(node)
        )

    def outer_name(self, node: ast.AST) -> str | None:
        """`feats` / `self.feats` when it is defined outside the loop (it outlives the loop)."""
        if isinstance(node, ast.Name) and node.id not in self.loop_locals:
            return node.id
        attr = self_attr(node)
        return f"self.{attr}" if attr else None

    def grown(self, stmt: ast.AST) -> list[str]:
        """Collections defined outside the loop that `stmt` adds to (`feats.append(x)`,
        `self.cache.append(x)`, `outs = outs + (x,)`, `outs += [x]`)."""
        found: list[str] = []
        for sub in walk_local(stmt):
            target = None
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
                if sub.func.attr in _GROWERS:
                    target = sub.func.value
            elif isinstance(sub, ast.AugAssign) and _collection(sub.value):
                target = sub.target
            elif isinstance(sub, ast.Assign) and isinstance(sub.value, ast.BinOp):
                parts = (sub.value.left, sub.value.right)
                if isinstance(sub.value.op, ast.Add) and any(_collection(p) for p in parts):
                    names = names_assigned(sub) & {p.id for p in parts if isinstance(p, ast.Name)}
                    target = ast.Name(sorted(names)[0]) if names else None
            if isinstance(target, ast.Name) and not isinstance(sub, ast.Call):
                name: str | None = target.id  # rebound from itself: carried block to block
            else:
                name = self.outer_name(target) if target is not None else None
            if name and name not in found:
                found.append(name)
        return found

    def accumulated(self, stmt: ast.stmt, tags: set[str]) -> list[str]:
        """Values a block output adds to from block to block (`aux = aux + a` after `x, a =
        block(x)`, `total += loss`): rebound from themselves, not assigned earlier in the
        iteration, not a stream the blocks carry. Index-dependent rebinds stay per-block work."""
        if "index" in tags or STREAM not in tags:
            return []
        earlier = {
            name
            for node in walk_local(self.site.loop)
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
            and node.lineno < stmt.lineno
            for name in names_assigned(node)
        }
        return [n for n in _accumulated(stmt) if n not in self.streams and n not in earlier]

    def emit_state(self, stmt: ast.stmt, names: list[str], tags: set[str]) -> None:
        """Values passed per block through collections: refused when one is read after the
        loop (or lives on the module); otherwise the values only pass between this list's
        blocks, which is right under caching as long as no block runs after a skipped one."""
        listed = ", ".join(f"`{n}`" for n in names)
        kept = [n for n in names if n.startswith("self.") or n in self.read_after]
        if kept:
            self.emit(
                "per_block_state",
                f"`{_short(stmt)}` passes one value per block through {listed}, read after the "
                "loop: cache-dit skips the computation of blocks whose residual it reuses, so "
                "skipped blocks would add no value; caching this list is not generated",
                stmt.lineno,
                tags,
            )
            return
        self.emit(
            "per_block_exchange",
            f"`{_short(stmt)}` passes values between blocks through {listed}: each block's "
            "call does its part, which stays right under caching only while no block runs "
            "after a skipped one (`Bn_compute_blocks=0`, checked by `enable()`)",
            stmt.lineno,
            tags,
        )

    def emit(self, kind: str, message: str, line: int, tags: set[str]) -> None:
        active_when = _describe(tags, self.ctx.flags)
        severity = HIGH if "index" in tags or kind != "loop_invariant" else MEDIUM
        self.reasons.append(
            Reason(
                kind,
                message,
                line,
                severity,
                active_when,
                _is_active(tags, self.ctx),
                self.site.attr,
            )
        )

    def visit(self, body: list[ast.stmt], guard_tags: set[str]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If) and mentions_gradient_checkpointing(stmt.test):
                # the checkpointing branch is not run at inference
                self.visit(stmt.orelse, guard_tags)
                continue
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.Pass):
                continue
            if _is_block_alias(stmt, self.site):
                continue
            kept = self._kept_output(stmt)
            if kept is not None:  # `x = out["hidden"]` after `out = block(x, c)`
                if kept:
                    self.emit(
                        "block_output_access",
                        f"the loop keeps `{kept}` of each block's output (`{_short(stmt)}`), "
                        "but cache-dit's wrapper hands on what the blocks return as the "
                        "streams: each block runs through a step that returns the streams "
                        "themselves",
                        stmt.lineno,
                        guard_tags,
                    )
                continue
            if isinstance(stmt, ast.If):
                self.visit_if(stmt, guard_tags)
            elif self.contains_call(stmt):
                self.visit_call(stmt, guard_tags)
            else:
                self.visit_work(stmt, guard_tags)

    def _kept_output(self, stmt: ast.stmt) -> str | None:
        """A statement that takes the stream back out of the block call's result (`x = out`
        after `out = block(x, c)`: "" (a rename, nothing to do), `x = out["hidden"]` or
        `x = out.sample`: the part kept); None for anything else. `x = out[0]` is "" where
        the list's pattern hands back two streams (an element of the tuple cache-dit's wrapper
        returns), `[0]` where it hands back one (a tensor under caching: `[0]` is a row)."""
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            return None
        target = stmt.targets[0]
        inputs = {
            a.id
            for c in self.site.calls
            for a in [*c.args, *c.keywords.values()]
            if isinstance(a, ast.Name)
        }
        if not (isinstance(target, ast.Name) and target.id in inputs):
            return None
        value = stmt.value
        if isinstance(value, ast.Name):
            return "" if value.id in self.streams else None
        inner = value.value if isinstance(value, ast.Subscript | ast.Attribute) else None
        if not (isinstance(inner, ast.Name) and inner.id in self.streams):
            return None
        if isinstance(value, ast.Attribute):
            return f".{value.attr}"
        assert isinstance(value, ast.Subscript)
        if is_int_index(value.slice) and not self.one_output:
            return ""
        return f"[{ast.unparse(value.slice)}]"

    def visit_if(self, stmt: ast.If, guard_tags: set[str]) -> None:
        test_tags = self.tags_of(stmt.test)
        opt = {f"opt:{g}" for g in not_none_guards(stmt.test) & self.ctx.optional_inputs}
        flags = _flag_tags(stmt.test, self.ctx.flags)
        if not self.contains_call(stmt):
            self.record(stmt, guard_tags | opt | flags | self.tags_of(stmt))
            return
        if "index" in test_tags:
            self.emit(
                "loop_index_dependent",
                f"whether the block runs depends on the loop index (`{ast.unparse(stmt.test)}`)",
                stmt.lineno,
                guard_tags | test_tags,
            )
        self.visit(stmt.body, guard_tags | opt | flags | (test_tags - {"index"}))
        self.visit(stmt.orelse, guard_tags | (test_tags - {"index"}))

    def visit_call(self, stmt: ast.stmt, guard_tags: set[str]) -> None:
        """A statement holding the block call: its arguments must not vary per block (the block
        picked by the index, `self.blocks[i](...)`, is the callee, not an argument), and what it
        assigns must be the call's output, not a combination of it with other values."""
        combined = self._combined(stmt)
        if combined:
            self.emit(
                "per_block_work",
                f"the loop combines each block's output with other values (`{_short(stmt)}`): "
                "cache-dit's wrapper runs every block on the previous one's output, so the "
                "combination would run once, around all of them",
                stmt.lineno,
                guard_tags | {STREAM},
            )
        call_tags = self._tags_beside_callee(stmt) | guard_tags
        state = sorted(t.split(":", 1)[1] for t in call_tags if t.startswith(f"{STATE}:"))
        here = [c for c in self.site.calls if self.contains_call_node(stmt, c.call)]
        derived = [
            a
            for a in stream_derived_arguments(here, self.streams, self.stream_valued)
            if not isinstance(a, ast.Name)  # a name: its statement is per-block work
        ]
        if derived and not combined:
            self.emit(
                "per_block_work",
                f"the block call's argument `{_short(derived[0])}` is computed from the stream "
                "the blocks carry: cache-dit's wrapper would hand every block the first "
                "block's",
                stmt.lineno,
                guard_tags | {STREAM},
            )
        if state:
            self.emit_state(stmt, state, call_tags)
        elif "index" in call_tags:
            self.emit(
                "loop_index_dependent",
                "the block call's arguments depend on the loop index "
                f"(`{_short(stmt)}`); cache-dit evaluates them once for all blocks",
                stmt.lineno,
                call_tags,
            )

    def _packs_call_arguments(self, stmt: ast.stmt) -> bool:
        """`args = [x, ctx, temb]` for `block(*args)`: the block call's arguments written out
        beside it (read with the call; hoisting it would hand every block the first block's
        streams)."""
        if not (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.List | ast.Tuple)
        ):
            return False
        name = stmt.targets[0].id
        return any(
            isinstance(arg, ast.Starred)
            and isinstance(arg.value, ast.Name)
            and arg.value.id == name
            for c in self.site.calls
            for arg in c.call.args
        )

    def _combined(self, stmt: ast.stmt) -> bool:
        """`x = x + block(x, c)`, `x = block(x) * g`: the value assigned is more than the block
        call (or a part of its output, or one branch of a conditional)."""
        if not isinstance(stmt, ast.Assign):
            return False
        calls = {id(c.call) for c in self.site.calls}

        def is_call(node: ast.AST) -> bool:
            return id(node) in calls

        value = stmt.value
        return any(is_call(n) for n in walk_local(value)) and not is_call_output(value, is_call)

    def _tags_beside_callee(self, stmt: ast.stmt) -> set[str]:
        """`tags_of(stmt)` without the callee `self.<list>[i]` of the block calls."""
        callees = {
            id(c.call.func)
            for c in self.site.calls
            if isinstance(c.call.func, ast.Subscript)
            and self_attr(c.call.func.value) == self.site.attr
        }
        parts: list[ast.AST] = []
        stack: list[ast.AST] = [stmt]
        while stack:
            node = stack.pop()
            if id(node) in callees:
                continue
            if any(id(n) in callees for n in walk_local(node)):
                stack.extend(ast.iter_child_nodes(node))
            else:
                parts.append(node)
        return set().union(*(self.tags_of(p) for p in parts))

    def visit_work(self, stmt: ast.stmt, guard_tags: set[str]) -> None:
        stmt_tags = guard_tags | self.tags_of(stmt)
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.IfExp):
            guards = not_none_guards(stmt.value.test) & self.ctx.optional_inputs
            if guards and _inert(stmt.value.orelse):
                stmt_tags |= {f"opt:{g}" for g in guards}
        self.record(stmt, stmt_tags)

    def record(self, stmt: ast.stmt, stmt_tags: set[str]) -> None:
        for name in names_assigned(stmt):
            self.taint.setdefault(name, set()).update(stmt_tags)
        state = sorted(t.split(":", 1)[1] for t in stmt_tags if t.startswith(f"{STATE}:"))
        if stmt_tags & {"index", STREAM}:
            state += [
                n for n in self.grown(stmt) + self.accumulated(stmt, stmt_tags) if n not in state
            ]
        if state:
            self.emit_state(stmt, state, stmt_tags)
        elif "index" in stmt_tags:
            self.emit(
                "loop_index_dependent",
                f"loop body work depends on the block index (`{_short(stmt)}`); under caching it "
                "runs once, for block 0 only",
                stmt.lineno,
                stmt_tags,
            )
        elif STREAM in stmt_tags and names_assigned(stmt) & self.streams:
            self.emit(
                "per_block_work",
                f"loop body work changes the stream the blocks carry (`{_short(stmt)}`); under "
                "caching it would run once, after the last block",
                stmt.lineno,
                stmt_tags,
            )
        elif names_assigned(stmt) & self.call_inputs and value_names(stmt) & self.stream_valued:
            self.emit(
                "per_block_work",
                f"loop body work computes a block input from the stream the blocks carry "
                f"(`{_short(stmt)}`); under caching it would run once, from the first block's "
                "input",
                stmt.lineno,
                stmt_tags | {STREAM},
            )
        elif not self._packs_call_arguments(stmt):
            self.emit(
                "loop_invariant",
                f"extra loop-body statement (`{_short(stmt)}`); hoist it out of the block loop",
                stmt.lineno,
                stmt_tags,
            )


def _stream_valued(body: list[ast.stmt], streams: set[str]) -> set[str]:
    """The streams and the names the body computes from their contents (transitively)."""
    out = set(streams)
    assigns = [
        n for stmt in body for n in walk_local(stmt) if isinstance(n, ast.Assign | ast.AugAssign)
    ]
    changed = True
    while changed:
        changed = False
        for node in assigns:
            new = names_assigned(node) - out
            if new and value_names(node.value) & out:
                out |= new
                changed = True
    return out


def _accumulated(stmt: ast.stmt) -> list[str]:
    """Names a statement rebinds from themselves (`aux = aux + a`, `total += loss`): a value
    carried from block to block, one contribution per block."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    if isinstance(stmt, ast.Assign):
        return sorted(names_assigned(stmt) & names_read(stmt.value))
    return []


def _is_block_alias(stmt: ast.stmt, site: LoopSite) -> bool:
    """`layer_ = layer` / `block = self.blocks[i]`: naming the block, not extra work."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return False
    value = stmt.value
    return (isinstance(value, ast.Name) and value.id == site.block_var) or (
        isinstance(value, ast.Subscript) and self_attr(value.value) == site.attr
    )


def _inert(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value in (None, False, 0)
