"""Where the split sequence is gathered after the blocks, and what `forward` still reads after the
gather."""

from __future__ import annotations

import ast
from functools import partial

from ..astutil import (
    callee_name,
    declared_params,
    is_call_output,
    self_attr,
    short_text,
    walk,
    walk_local,
)
from ..forward_pattern import read_signature
from ..model import Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from .block_binding import block_params, bound_args, call_targets, name_of
from .flow import ForwardFlow, before_the_blocks, data_names, is_sequence_global
from .forward_statements import assigned_names, module_on, own_reads, short_stmt
from .local_slices import without_local_slices
from .result import LAST, GatherOutput, HookPlan
from .root_split_drift import _ROW_SCATTERS
from .row_ids import row_id_params


def place_gathers(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    evidence: list[Evidence],
    cached: list[ParallelBlockList],
    local_lengths: bool,
) -> None:
    """Gather on the last token-local module before the output needs the whole sequence; a second
    output stream (an audio head) gets its own gather when it reaches a module of its own."""
    # the last to run: by its loop's line, then (one loop over nested lists) the list order
    last = max(enumerate(cached), key=lambda ib: (max(lp.lineno for lp in ib[1].loops), ib[0]))[1]
    params = block_params(ctx, last)
    targets = call_targets(last)
    stream = None
    if last.call is not None and params:
        stream = name_of(bound_args(last.call, params).get(params[0]))
    first = stream or (targets[0] if targets else None)
    others = [t for t in targets if t != first]
    path = ctx.path
    whole = set() if local_lengths else whole_token_tensors(flow, stream)
    # under a block split, what the earlier lists' loops hand back is still this rank's part
    local = frozenset() if local_lengths else _earlier_outputs(cached, last)
    point = partial(_gather_point, ctx, flow, local_lengths=local_lengths, whole=whole, local=local)
    combined = _combines_outputs(last)
    candidate, stop = point({first} if first else set(), head_first=True, combined=combined)
    if candidate:
        plan.gather(
            candidate[0],
            GatherOutput(
                1,
                3,
                reason="last token-local module before the output needs the full sequence",
                line=candidate[1],
            ),
        )
        evidence.append(Evidence(f"gather at `{candidate[0]}`", path, candidate[1]))
        for other in others:
            extra, _ = point({other})
            if extra and extra[0] != candidate[0]:
                plan.gather(
                    extra[0], GatherOutput(1, 3, reason=f"output head of `{other}`", line=extra[1])
                )
                evidence.append(Evidence(f"gather `{other}` at `{extra[0]}`", path, extra[1]))
        return
    outputs, skip = _block_outputs(ctx, flow, plan, last, params, max(1, len(targets)))
    key = f"{last.attr}.{LAST}"
    plan.gather(
        key,
        GatherOutput(
            1,
            3,
            outputs=outputs,
            reason="the code after the loop needs the full sequence",
            line=stop[1] if stop else 0,
            skip=skip,
        ),
    )
    evidence.append(
        Evidence(
            f"gather at the last block of `{last.attr}`: "
            f"{stop[0] if stop else '`output` follows the loop'}",
            path,
            stop[1] if stop else last.loops[-1].lineno,
        )
    )


def _block_outputs(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    block: ParallelBlockList,
    params: list[str],
    targets: int,
) -> tuple[int, tuple[int, ...]]:
    """How many values the block returns, and which of them are not split token streams (a
    modulation handed back, `return x, c`; an auxiliary value): a gather on the block must
    leave those alone. Read from the block's `return` statements (each element followed to the
    parameter it comes from); `targets` (what the loop unpacks) where they do not agree."""
    found = ctx.resolver.find_method(block.block, "forward")
    if found is None or not params:
        return targets, ()
    func, owner = found
    returns = read_signature(func, owner.name, ctx.path).returns
    counts = {len(r.streams) for r in returns}
    if len(counts) != 1 or returns[0].streams == [] or any(None in r.streams for r in returns):
        return targets, ()
    # the names split anywhere (at the root, at any list's blocks): a stream the first list
    # splits and the last list returns is gathered too; under a root split, a block parameter
    # bound to a value made from a split input of forward (blocks taking the text first)
    split = {params[0]}.union(*(inputs for inputs in plan.splits.values()))
    roots = set(plan.splits.get("", {}))
    if roots and block.call is not None:
        for param, arg in bound_args(block.call, params).items():
            if any(flow.derived.get(n, set()) & roots for n in data_names(arg)):
                split.add(param)
    streams = returns[0].streams
    skip = tuple(i for i, name in enumerate(streams) if name not in split)
    if len(streams) == 1 or len(skip) == len(streams):
        return targets, ()
    return len(streams), skip


def last_loop_end(cached: list[ParallelBlockList]) -> int:
    """The last line of the last loop over a cached list."""
    ends = (
        getattr(loop, "end_lineno", loop.lineno) or loop.lineno for b in cached for loop in b.loops
    )
    return max(ends, default=0)


def read_after_loops(flow: ForwardFlow, cached: list[ParallelBlockList]) -> frozenset[str]:
    """Names `forward` reads after the last loop over a cached list (before any rebinding)."""
    last_loop = last_loop_end(cached)
    out: set[str] = set()
    rebound: set[str] = set()
    for stmt in flow.statements:
        if stmt.lineno <= last_loop:
            continue
        out |= own_reads(stmt) - rebound
        rebound |= set(assigned_names(stmt))
    return frozenset(out)


def split_values_after_gather(
    ctx: ParallelContext, flow: ForwardFlow, plan: HookPlan, cached: list[ParallelBlockList]
) -> list[Evidence]:
    """A module output split in place (`split_output`) stays this rank's slice for the rest of
    `forward`: a read after the gather (by blocks the plan does not split, by the output head)
    sees local positions next to a whole sequence. No hook can give both: refused."""
    split_modules = {
        key
        for key, inputs in plan.splits.items()
        if any(
            s.split_output
            for spec in inputs.values()
            for s in (spec if isinstance(spec, tuple) else (spec,))
        )
    }
    if not split_modules or not plan.gathers:
        return []
    last_loop = last_loop_end(cached)
    gather_line = max(
        (last_loop if ".<" in key or not g.line else g.line) for key, g in plan.gathers.items()
    )
    names = {t: c.attr for c in flow.module_calls if c.attr in split_modules for t in c.targets}
    out: list[Evidence] = []
    for stmt in flow.statements:
        if stmt.lineno <= gather_line:
            continue
        for name in sorted(own_reads(stmt) & set(names)):
            out.append(
                Evidence(
                    f"`{name}` (the output of `self.{names[name]}`) is split in place for the "
                    f"blocks, but `forward` reads it again after the gather (line {stmt.lineno}: "
                    f"`{short_stmt(stmt)}`), where the sequence is whole: no hook plan gives both; "
                    "context parallelism is not generated",
                    ctx.path,
                    stmt.lineno,
                )
            )
            del names[name]
        for target in assigned_names(stmt):
            names.pop(target, None)  # reassigned: later reads see a new value
        if not names:
            break
    return out


def whole_token_tensors(flow: ForwardFlow, stream: str | None) -> set[str]:
    """Token tensors `forward` computes from the stream before the loops (`residual =
    hidden_states.clone()`): under a split at the first block they keep every token, so code
    after the loops that combines them with the stream needs the stream gathered first. Sizes
    and other metadata read from the stream do not count."""
    if stream is None:
        return set()
    tracked = {stream}
    out: set[str] = set()
    for stmt in before_the_blocks(flow):
        if not isinstance(stmt, ast.Assign) or not data_names(stmt.value) & tracked:
            continue
        if is_sequence_global(stmt.value, tracked) or _reduces(stmt.value):
            continue  # reshaped, sliced or reduced: not the stream's tokens any more
        names = set(assigned_names(stmt))
        if stream in names:
            continue  # the stream itself, rebound before the loop: split with it
        out |= names
        tracked |= names
    return out


def _reduces(expr: ast.expr) -> bool:
    """A call that reduces or measures (`x.mean(1)`, `len(x)`, `self.rotary(x, n)`): its result
    is not a per-token tensor of the stream."""
    for node in walk(expr):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else None
            if name in ("clone", "to", "float", "half", "detach", "contiguous", "type_as"):
                continue
            return True
    return False


def _mixed_whole(value: ast.expr, tracked: set[str], whole: set[str]) -> str | None:
    """A whole token tensor combined elementwise with the tracked (split) stream."""
    for node in walk(value):
        if not isinstance(node, ast.BinOp):
            continue
        if not isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
            continue
        sides = [data_names(node.left), data_names(node.right)]
        for mine, other in (sides, sides[::-1]):
            if mine & tracked and other & whole:
                return sorted(other & whole)[0]
    return None


def _gather_point(
    ctx: ParallelContext,
    flow: ForwardFlow,
    tracked: set[str],
    local_lengths: bool,
    whole: set[str],
    local: frozenset[str] = frozenset(),
    head_first: bool = False,
    combined: bool = False,
) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
    """(module, line) of the last token-local module on `tracked` after the loops, and the first
    op that needs the whole sequence (also: combining it with a whole token tensor, or a module
    handed per-token row ids, which are whole there); a slice by the length of a `local` stream
    (still this rank's part) does not need it, but the gather must then come after it: with
    `head_first`, a module whose output a plain function takes (`unpatchify(self.head(x))`)
    is a candidate before that function; with no module after the cut, it stops at the cut.
    `combined`: the loop adds each block's output to its stream (`x = x + blk(x)`), so no gather
    can be at the last block: such a head is a candidate too."""
    candidate: tuple[str, int] | None = None
    stop: tuple[str, int] | None = None
    # (candidate, stop) where a slice by a rank's own length was first seen: the gather must
    # come after that cut (the whole sequence is not cut by one rank's length)
    before_cut: list[tuple[tuple[str, int] | None, tuple[str, int]]] = []
    tracked = set(tracked)
    for stmt in flow.statements:
        if stmt.lineno <= flow.last_loop_end or not isinstance(stmt, ast.Assign | ast.Return):
            continue
        value = stmt.value
        if value is None or not data_names(value) & tracked:
            continue
        module = module_on(value, tracked, flow)
        mixed = _mixed_whole(value, tracked, whole)
        if mixed is not None:
            stop = (
                f"`{short_stmt(stmt)}` after the loop combines the stream with `{mixed}`, "
                "which holds every token",
                stmt.lineno,
            )
            break
        ids = _row_ids_taken(ctx, flow, module, value) if module else None
        if ids is not None:
            stop = (f"`self.{module}` picks rows per token with `{ids}`", stmt.lineno)
            break
        cut = without_local_slices(value, local)
        op = is_sequence_global(cut, tracked, local_lengths) or (
            None if local_lengths else _rows_placed(cut, tracked)  # root split: rows local too
        )
        at_head = head_first and (bool(before_cut) or combined)
        through = at_head and _only_through(value, module, tracked)
        if module and (not op or through):
            candidate = (module, stmt.lineno)  # (`unpatchify(self.head(x))`: at the head)
        if op:
            stop = (f"`{op}` follows the loop", stmt.lineno)
            break
        if not before_cut and ast.dump(cut) != ast.dump(value):
            before_cut.append((candidate, (f"`{short_stmt(stmt)}` follows the loop", stmt.lineno)))
        if isinstance(stmt, ast.Assign):
            tracked |= {n.id for t in stmt.targets for n in walk(t) if isinstance(n, ast.Name)}
    if before_cut and (candidate is None or candidate[1] <= before_cut[0][1][1]):
        return before_cut[0]  # no module after the cut takes the gather: it stops there
    return candidate, stop


# ops placing or picking rows at sequence-wide indices (`torch.zeros_like(x).scatter(1, idx, x)`,
# `torch.gather(x, 1, idx)`): the indices number the whole sequence's tokens
_ROW_OPS = frozenset({*_ROW_SCATTERS, "gather", "index_select", "take_along_dim"})


def _rows_placed(value: ast.expr, tracked: set[str]) -> str | None:
    """A row op (`_ROW_OPS`) on a tracked stream, as a method or handed to a torch function."""
    for node in walk(value):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _ROW_OPS
        ):
            continue
        operands = [node.func.value, *node.args, *(k.value for k in node.keywords)]
        if any(data_names(o) & tracked for o in operands):
            return node.func.attr
    return None


def _only_through(value: ast.expr, module: str, tracked: set[str]) -> bool:
    """`value` is a plain function handed the output of one `self.<module>(...)` call
    (`unpatchify(self.head(x), ...)`), every read of a tracked stream is inside that call, and
    the call itself is free of slices and joins: the function works on the module's output,
    which a gather there makes whole."""
    calls = [n for n in walk(value) if isinstance(n, ast.Call) and self_attr(n.func) == module]
    if len(calls) != 1 or is_sequence_global(calls[0], tracked):
        return False
    # only a plain function handed the module's output (`unpatchify(self.head(x), ...)`)
    if not (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and any(a is calls[0] for a in value.args)
    ):
        return False
    inside = {id(n) for n in walk(calls[0])}
    reads = [n for n in walk(value) if isinstance(n, ast.Name) and n.id in tracked]
    return all(id(n) in inside for n in reads)


def _earlier_outputs(cached: list[ParallelBlockList], last: ParallelBlockList) -> frozenset[str]:
    """The names the loops of the lists before `last` assign (their blocks' outputs)."""
    mine = set(call_targets(last))
    return frozenset(n for b in cached if b is not last for n in call_targets(b) if n not in mine)


def _row_ids_taken(
    ctx: ParallelContext, flow: ForwardFlow, module: str, value: ast.expr
) -> str | None:
    """The argument of `self.<module>(...)` in `value` its forward uses as per-token row ids."""
    ctor = flow.constructors.get(module)
    if not ctor:
        return None
    ref = ctx.resolver.resolve_class(flow.constructor_sources.get(module, ctx.source), ctor)
    found = ctx.resolver.find_method(ref, "forward") if ref.node is not None else None
    if found is None:
        return None
    ids = row_id_params(found[0])
    if not ids:
        return None
    params = declared_params(found[0])
    for node in walk(value):
        if isinstance(node, ast.Call) and self_attr(node.func) == module:
            bound = {params[i]: a for i, a in enumerate(node.args) if i < len(params)}
            bound.update({k.arg: k.value for k in node.keywords if k.arg})
            for param in ids:
                if param in bound:
                    return ast.unparse(bound[param])
    return None


def _combines_outputs(block: ParallelBlockList) -> bool:
    """The loop combines each block's output with the stream it carries (`x = x + blk(x, c)`)
    rather than taking it as the stream (see `gathered_updates`)."""
    stmt = _call_statement(block) if block.call is not None else None
    return stmt is not None and not (
        is_call_output(stmt.value, partial(_same_place, call=block.call))
        or isinstance(stmt.value, ast.Call)  # a runner or checkpoint handed the block
    )


def gathered_updates(plan: HookPlan, cached: list[ParallelBlockList], path: str) -> list[Evidence]:
    """A gather on the last block's output when the loop adds that output to the stream it
    carries (`x = x + blk(x, c)`): the hook would gather the update while the loop adds it to
    this rank's tokens. Refused (no token-local module after the loop could carry the gather)."""
    out: list[Evidence] = []
    for block in cached:
        if f"{block.attr}.{LAST}" not in plan.gathers or block.call is None:
            continue
        stmt = _call_statement(block)
        if stmt is not None and _combines_outputs(block):
            out.append(
                Evidence(
                    f"the loop combines each `{block.attr}` block's output with the stream "
                    f"(`{short_stmt(stmt)}`) and no module after the loop can take the gather: "
                    "a gather at the last block would gather the update alone",
                    path,
                    stmt.lineno,
                )
            )
    return out


def record_gathers(
    ctx: ParallelContext, plan: HookPlan, cached: list[ParallelBlockList]
) -> list[Evidence]:
    """A gather on the last block of a list whose blocks hand back a dict or a record
    (`return {"image": x, "text": t}`, `return BlockOut(hidden=x)`): cache-dit's gather hook
    takes a tensor or a tuple of them and stops on anything else. Refused, naming the return."""
    out: list[Evidence] = []
    for block in cached:
        if f"{block.attr}.{LAST}" not in plan.gathers:
            continue
        found = ctx.resolver.find_method(block.block, "forward")
        if found is None:
            continue
        func, owner = found
        for node in walk_local(func):
            if isinstance(node, ast.Return) and node.value is not None and _record(node.value):
                out.append(
                    Evidence(
                        f"the gather after the last `{block.attr}` block would take its output, "
                        f"which {owner.name} hands back as a record (`{short_text(node.value)}`)"
                        ": cache-dit gathers tensors and tuples of them only; context "
                        "parallelism is not generated",
                        str(owner.source.path) if owner.source else ctx.path,
                        node.lineno,
                    )
                )
                break
    return out


def root_record_output(ctx: ParallelContext, plan: HookPlan) -> list[Evidence]:
    """A split at the root (`""`) of a transformer whose `forward` only ever hands back a dict or
    a record (`return {"sample": x}`, no tensor or tuple path such as diffusers' `if not
    return_dict: return (output,)`): cache-dit's root hook checks the output and stops on
    anything but a tensor or a tuple of them. Refused, naming the return."""
    forward = ctx.forward
    if forward is None or not plan.splits.get(""):
        return []
    returns = [n for n in walk_local(forward) if isinstance(n, ast.Return) and n.value is not None]
    if not returns or not all(_always_record(r.value) for r in returns if r.value is not None):
        return []
    node = returns[0]
    return [
        Evidence(
            f"forward hands back a record on every path (`{short_text(node.value)}`), and the "
            "split at its input puts cache-dit's root hook around it, which takes a tensor or a "
            "tuple of them only; context parallelism is not generated",
            ctx.path,
            node.lineno,
        )
    ]


def _always_record(value: ast.expr) -> bool:
    if isinstance(value, ast.IfExp):
        return _always_record(value.body) and _always_record(value.orelse)
    return _record(value)


def _record(value: ast.expr) -> bool:
    """A dict display, `dict(...)`, or a call of a class (`BlockOut(...)`)."""
    if isinstance(value, ast.Dict):
        return True
    if isinstance(value, ast.Call):
        name = callee_name(value)
        return name == "dict" or (name[:1].isupper() and name != "Tensor")
    return False


def _call_statement(block: ParallelBlockList) -> ast.Assign | None:
    call = block.call
    assert call is not None
    for loop in block.loops:
        for node in walk(loop):
            if isinstance(node, ast.Assign) and any(_same_place(n, call) for n in walk(node.value)):
                return node
    return None


def _same_place(node: ast.AST, call: ast.Call) -> bool:
    return (
        isinstance(node, ast.Call)
        and node.lineno == call.lineno
        and node.col_offset == call.col_offset
    )
