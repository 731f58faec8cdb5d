"""Reasons a hook plan cannot serve the transformer: a stream regrouped between blocks, sizes
measured on the whole stream handed to blocks that get this rank's tokens."""

from __future__ import annotations

import ast

from ..astutil import callee_name, int_literal, names_in, walk
from ..model import Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from .block_binding import block_list_keys, is_block_call, name_of
from .flow import ForwardFlow, before_the_blocks
from .forward_statements import assigned_names, short_stmt
from .listed_inputs import comprehension_aliases
from .result import HookPlan
from .token_reductions import reduction_in

_REGROUPS = frozenset(
    {"reshape", "view", "permute", "transpose", "flatten", "unflatten", "rearrange", "movedim"}
)


def regrouped_between_blocks(ctx: ParallelContext, block: ParallelBlockList) -> list[Evidence]:
    """The loop over the cached list regroups the stream between blocks (frames <-> tokens, as
    factorised video transformers do around a temporal block): the split axis is a different
    axis from one block to the next, and the attention after the regroup runs over a sequence
    that is not the split one. A hook plan splits once; refused with the statement."""
    for stmt, streams in _loop_assignments(block):
        if _mentions_checkpointing(stmt.value):
            continue
        assigned = _targets(stmt)
        regroup = any(
            isinstance(n, ast.Call) and callee_name(n) in _REGROUPS for n in walk(stmt.value)
        )
        if assigned & streams and regroup:
            return [
                Evidence(
                    f"the loop over `{block.attr}` regroups `{sorted(assigned & streams)[0]}` "
                    f"between blocks (line {stmt.lineno}: `{short_stmt(stmt)}`): "
                    "the split axis changes from one block to the next, "
                    "and attention after the regroup "
                    "runs over a sequence that is not the split one; a hook plan splits "
                    "once, so context parallelism is not generated",
                    ctx.path,
                    stmt.lineno,
                )
            ]
    return []


def run_order_refusals(ctx: ParallelContext, cached: list[ParallelBlockList]) -> list[Evidence]:
    """Loops that do not run a list's blocks once each, first to last (reversed, a block called
    twice, an early exit: `ParallelBlockList.run_order`): the plan splits where the list's first
    block runs and gathers after its last, which are not the first and last to run there (the
    runs stopped on shapes at the first call)."""
    return [
        Evidence(
            f"{what}: the hook plan's split at the list's first block and gather after its last "
            "would not be where the tokens enter and leave it; context parallelism is not "
            "generated",
            ctx.path,
            line,
        )
        for block in cached
        for what, line in block.run_order
    ]


def lengths_read_in_loop(ctx: ParallelContext, block: ParallelBlockList) -> list[Evidence]:
    """The loop computes what it hands the blocks from the length of the stream it carries
    (`table = rope(x.shape[1])` before each `x = block(x, table)`): inside the split region that
    length is this rank's, so positions would count from 0 on every rank. No hook can change a
    value the loop computes; refused with the statement."""
    if block.call is None:
        return []
    passed = set().union(
        *(names_in(a) for a in [*block.call.args, *(k.value for k in block.call.keywords)])
    )
    inline = _inline_lengths(block)
    if inline is not None:
        return [_inline_length_refusal(ctx, block, *inline)]
    for stmt, streams in _loop_assignments(block):
        measured = _lengths_of(stmt.value) & streams
        assigned = (_targets(stmt) & passed) - streams  # the stream itself: a regroup (above)
        if assigned and measured:
            return [
                Evidence(
                    f"the loop over `{block.attr}` computes `{sorted(assigned)[0]}` "
                    f"from the length of `{sorted(measured)[0]}` it carries before each block "
                    f"(line {stmt.lineno}: `{short_stmt(stmt)}`): inside the split region "
                    "that length is this rank's, so every rank would count positions from 0; "
                    "context parallelism is not generated",
                    ctx.path,
                    stmt.lineno,
                )
            ]
    return []


def reduced_in_loop(ctx: ParallelContext, block: ParallelBlockList) -> list[Evidence]:
    """The loop reduces the stream it carries over the tokens before handing the result on
    (`cond = c + self.pool(x.mean(1))` before each `x = block(x, cond)`, a token shift with
    `roll`): inside the split region the stream is this rank's, so each rank would pool its own
    tokens. No hook reaches a value the loop computes; refused with the statement."""
    for stmt, streams in _loop_assignments(block):
        hit = reduction_in(stmt.value, streams)
        if hit is not None:
            return [
                Evidence(
                    f"the loop over `{block.attr}` reduces `{sorted(streams)[0]}` over its "
                    f"tokens between blocks (line {stmt.lineno}: `{short_stmt(stmt)}`): inside "
                    "the split region each rank holds its own tokens, so each would pool its "
                    "own; context parallelism is not generated",
                    ctx.path,
                    stmt.lineno,
                )
            ]
    return []


def whole_tokens_in_loop(
    ctx: ParallelContext, block: ParallelBlockList, whole: set[str]
) -> list[Evidence]:
    """`whole`: token tensors forward takes from the stream before the loops (`skip = x`),
    which keep every token under a split at the first block. A loop statement other than the
    block call that reads one (`x = x + skip` at mid depth) combines it with this rank's
    tokens: no hook reaches a value the loop reads; refused with the statement."""
    if not whole:
        return []
    for stmt, _ in _loop_assignments(block):
        read = names_in(stmt.value) & whole
        if read:
            name = sorted(read)[0]
            return [
                Evidence(
                    f"the loop over `{block.attr}` reads `{name}` (line {stmt.lineno}: "
                    f"`{short_stmt(stmt)}`), taken from the stream before the split at its "
                    "first block: it holds every token while the loop carries this rank's; "
                    "context parallelism is not generated",
                    ctx.path,
                    stmt.lineno,
                )
            ]
    return []


def _inline_lengths(block: ParallelBlockList) -> tuple[ast.Assign, ast.expr, str] | None:
    """An argument of the block call as written that reads the length of a stream the call
    assigns (`x = layer(x, self.freqs_cis[: x.shape[1]], c)`): (statement, argument, stream)."""
    for loop in block.loops:
        for stmt in walk(loop):
            if not (isinstance(stmt, ast.Assign) and is_block_call(stmt.value, block)):
                continue
            assert isinstance(stmt.value, ast.Call)
            streams = _targets(stmt)
            for arg in [*stmt.value.args, *(k.value for k in stmt.value.keywords)]:
                if isinstance(arg, ast.Name):
                    continue
                measured = _lengths_of(arg) & streams
                if measured:
                    return stmt, arg, sorted(measured)[0]
    return None


def _inline_length_refusal(
    ctx: ParallelContext, block: ParallelBlockList, stmt: ast.Assign, arg: ast.expr, stream: str
) -> Evidence:
    return Evidence(
        f"the loop over `{block.attr}` hands each block `{ast.unparse(arg)}`, read from the "
        f"length of `{stream}` it carries (line {stmt.lineno}): inside the split region that "
        "length is this rank's, so every rank would count positions from 0; context "
        "parallelism is not generated",
        ctx.path,
        stmt.lineno,
    )


def _loop_assignments(block: ParallelBlockList) -> list[tuple[ast.Assign, set[str]]]:
    """The assignments of the loops over `block` besides the block call, each with the streams
    that call assigns."""
    out: list[tuple[ast.Assign, set[str]]] = []
    for loop in block.loops:
        body = [s for s in walk(loop) if isinstance(s, ast.stmt) and s is not loop]
        call_stmt = next(
            (s for s in body if isinstance(s, ast.Assign) and is_block_call(s.value, block)), None
        )
        if call_stmt is None:
            continue
        streams = _targets(call_stmt)
        out += [(s, streams) for s in body if isinstance(s, ast.Assign) and s is not call_stmt]
    return out


def _targets(stmt: ast.Assign) -> set[str]:
    return set().union(*(names_in(t) for t in stmt.targets))


def _lengths_of(node: ast.AST) -> set[str]:
    """Names whose sequence length `node` may read: `x.shape[1]`, `x.shape[-2]`, `x.size(1)`,
    `x.shape` as a whole; the batch (`[0]`) and the width (`[-1]`) are not lengths."""
    out: set[str] = set()
    for n in walk(node):
        if isinstance(n, ast.Subscript) and _shape_of(n.value) and int_literal(n.slice) in (0, -1):
            continue
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "size":
            owner = n.func.value
            if isinstance(owner, ast.Name) and not (n.args and int_literal(n.args[0]) in (0, -1)):
                out.add(owner.id)
            continue
        if isinstance(n, ast.Attribute) and n.attr == "shape" and isinstance(n.value, ast.Name):
            parent_index = [p for p in walk(node) if isinstance(p, ast.Subscript) and p.value is n]
            if not parent_index or any(int_literal(p.slice) not in (0, -1) for p in parent_index):
                out.add(n.value.id)
    return out


def _shape_of(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "shape"


def _mentions_checkpointing(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return "gradient_checkpointing" in text


def whole_sizes(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    split_vars: list[str],
) -> list[Evidence]:
    """Sizes forward measured on the whole stream (`(frames, height, width)` of the patchified
    latent) handed to blocks that the plan gives this rank's tokens: a block that reshapes by
    them breaks. Refused (a hook cannot rewrite a size)."""
    planned = set().union(*(set(plan.splits.get(k, {})) for k in block_list_keys(block)))
    # the split streams and what they are computed from (`x = embed(latents)`: latents' sizes)
    origins = set(split_vars).union(*(flow.derived.get(v, set()) for v in split_vars))
    out: list[Evidence] = []
    grid_params: list[tuple[str, str]] = []  # (param, size) passed one by one: `block(x, T, S)`
    for param, expr in bound.items():
        if param in planned or name_of(expr) in split_vars:
            continue
        size = name_of(expr)
        if size and flow.shape_derived.get(size, set()) & origins and _is_plain_size(flow, size):
            grid_params.append((param, size))
        grid = _grid_tensor(flow, expr, origins)
        if grid is not None:
            out.append(
                Evidence(
                    f"the blocks receive `{name_of(expr)}` as `{param}`: a tensor of the whole "
                    f"`{grid}`'s grid sizes (`{short_stmt(_value_of(flow, name_of(expr)))}`), "
                    "while the plan gives them this rank's tokens; context parallelism is not "
                    "generated",
                    ctx.path,
                    block.call.lineno if block.call else 1,
                )
            )
            continue
        if not isinstance(expr, ast.Tuple):
            continue
        sized = sorted(
            e.id
            for e in expr.elts
            if isinstance(e, ast.Name)
            and flow.shape_derived.get(e.id, set()) & origins
            and _is_plain_size(flow, e.id)
        )
        if sized:
            out.append(
                Evidence(
                    f"the blocks receive `{short_stmt(expr)}` as `{param}`: sizes measured on the "
                    f"whole `{sorted(flow.shape_derived[sized[0]] & origins)[0]}`, while "
                    "the plan gives them this rank's tokens; context parallelism is not generated",
                    ctx.path,
                    block.call.lineno if block.call else 1,
                )
            )
    if len(grid_params) >= 2:  # a grid handed over size by size (one length alone: a key length)
        sizes = ", ".join(f"`{size}` as `{param}`" for param, size in grid_params)
        measured = sorted(flow.shape_derived[grid_params[0][1]] & origins)[0]
        out.append(
            Evidence(
                f"the blocks receive {sizes}: grid sizes measured on the whole `{measured}` "
                "(blocks lay tokens out by them), while the plan gives them this rank's tokens; "
                "context parallelism is not generated",
                ctx.path,
                block.call.lineno if block.call else 1,
            )
        )
    return out


_SIZE_CALLS = ("int", "len", "round", "max", "min", "ceil", "floor")
_TENSOR_OF = ("tensor", "as_tensor", "LongTensor", "IntTensor", "stack")


def _value_of(flow: ForwardFlow, name: str | None) -> ast.expr:
    """The last value forward assigns `name` before the cached loops (`None` as a constant when
    there is none)."""
    value: ast.expr = ast.Constant(None)
    for stmt in before_the_blocks(flow):
        if name and isinstance(stmt, ast.Assign) and name in assigned_names(stmt):
            value = stmt.value
    return value


def _grid_tensor(flow: ForwardFlow, expr: ast.expr, origins: set[str]) -> str | None:
    """`grid_sizes = torch.tensor([x.shape[2:]] * b)`: a tensor made of several axis sizes of a
    split stream (or what it is computed from), as blocks use to lay tokens out on the grid;
    the stream measured, or None. One length alone (`[x.shape[1]] * b`, a key length) is not."""
    name = name_of(expr)
    value = _value_of(flow, name)
    if not (isinstance(value, ast.Call) and callee_name(value) in _TENSOR_OF):
        return None
    aliases = comprehension_aliases(value, origins)  # `[u.shape[2:] for u in x]`: `u` of `x`
    for node in walk(value):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Slice)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "shape"
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id in origins | set(aliases)
        ):
            return aliases.get(node.value.value.id, node.value.value.id)
    return None


def _is_plain_size(flow: ForwardFlow, name: str) -> bool:
    """A number forward computes from shapes (`t = x.shape[2] // p`), not a tensor built with
    one (`freqs = self.rope(x.shape[1])`)."""
    value = _value_of(flow, name)
    if isinstance(value, ast.Constant) and value.value is None:
        return False
    calls = [n for n in walk(value) if isinstance(n, ast.Call)]
    return all(callee_name(c) in _SIZE_CALLS for c in calls)
