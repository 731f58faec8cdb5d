"""Masks over the split tokens: which ones are split with them, which must stay whole (refused or
cautioned), which block a root split, and where a mask over two split streams is reordered."""

from __future__ import annotations

import ast
from typing import Any

from ..astutil import (
    callee_name,
    names_read,
    walk,
)
from ..model import Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from .block_binding import block_list_keys, block_params, bound_args, name_of
from .flow import ForwardFlow, before_the_blocks
from .forward_statements import OTHER_STREAM_WORDS, assigned_names, short_stmt
from .key_masks import is_key_mask
from .mask_axes import mask_axis_from_uses
from .mask_uses import per_token_uses
from .result import HookPlan, SplitInput

_MASK_BUILDERS = ("zeros", "ones", "full", "empty")


def split_token_masks(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    split_vars: list[str],
) -> list[Evidence]:
    """A mask forward builds over the split stream's tokens (`torch.zeros(b, x.shape[1])`, then
    filled by position) that the blocks use only for per-token work, never as an attention mask
    (a modulation chosen per token): it is split with the tokens at every block, on the axis
    built from the stream's length. Masks that also reach attention stay whole and are judged by
    `whole_token_masks`; masks a caller passes have no shape forward shows, so they are not
    split on a guess."""
    if set(plan.splits.get("", {})):
        return []  # under a root split the mask is built from the local length already
    out: list[Evidence] = []
    uses: tuple[dict[str, tuple[int, str, bool]], set[str]] | None = None
    for param, expr in bound.items():
        name = name_of(expr)
        if name is None or name in split_vars:
            continue
        if not (is_key_mask(ctx, param) or is_key_mask(ctx, name)):
            continue
        axis = _token_axis(flow, name, split_vars)
        if axis is None:
            continue
        if uses is None:
            uses = per_token_uses(ctx, block)
        per_token, to_attention = uses
        if param not in per_token or param in to_attention:
            continue
        split_dim, dims = axis
        line, use, _ = per_token[param]
        where = block.call.lineno if block.call else 1
        plan.split(
            f"{block.attr}.*",
            param,
            SplitInput(
                split_dim,
                dims,
                reason=f"`{name}` marks the split stream's tokens; the blocks use it per token",
                line=where,
            ),
        )
        out.append(
            Evidence(
                f"split `{name}` (as `{param}`) with the tokens at every block: forward builds it "
                f"over the split stream's length (axis {split_dim}) and the blocks use it only "
                f"for per-token work (line {line}: `{use}`), never as an attention mask",
                ctx.path,
                where,
            )
        )
    return out


def _token_axis(flow: ForwardFlow, name: str, split_vars: list[str]) -> tuple[int, int] | None:
    """(axis, rank) of a mask forward builds with `torch.zeros/ones/full/empty(...)` whose sizes
    include the split stream's length (`x.shape[1]`, `x.size(1)`): the one axis measured on a
    split stream. None when the mask is built any other way or reassigned whole."""
    value = None
    for stmt in before_the_blocks(flow):
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in stmt.targets
        ):
            value = stmt.value  # a rebinding (`mask[:, a:b] = 1` writes into it)
    if not (isinstance(value, ast.Call) and callee_name(value) in _MASK_BUILDERS):
        return None
    sizes = list(value.args)
    if len(sizes) == 1 and isinstance(sizes[0], ast.Tuple | ast.List):
        sizes = list(sizes[0].elts)
    if len(sizes) < 2 or any(isinstance(a, ast.Starred) for a in sizes):
        return None
    measured = [
        i
        for i, size in enumerate(sizes)
        if any(
            isinstance(n, ast.Attribute | ast.Call)
            and (
                (isinstance(n, ast.Attribute) and n.attr == "shape")
                or (isinstance(n, ast.Call) and callee_name(n) == "size")
            )
            and names_read(n) & set(split_vars)
            for n in walk(size)
        )
        and _measures_tokens(size)
    ]
    return (measured[0], len(sizes)) if len(measured) == 1 else None


def _measures_tokens(size: ast.expr) -> bool:
    """`x.shape[1]` / `x.size(1)`: the sequence axis of a (B, S, C) stream."""
    if isinstance(size, ast.Subscript) and isinstance(size.slice, ast.Constant):
        return size.slice.value == 1
    if isinstance(size, ast.Call) and size.args and isinstance(size.args[0], ast.Constant):
        return size.args[0].value == 1
    return False


def masks_marked_by_position(
    ctx: ParallelContext, flow: ForwardFlow, streams: set[str]
) -> list[Evidence]:
    """A mask built over the stream's length and then written by token position
    (`mask[:, start:end] = 1`): under a root split it would have this rank's length and every
    rank would count positions from 0, marking the wrong tokens."""
    for stmt in before_the_blocks(flow):
        if not isinstance(stmt, ast.Assign):
            continue
        for target in stmt.targets:
            if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
                continue
            name = target.value.id
            if not is_key_mask(ctx, name) or _token_axis(flow, name, sorted(streams)) is None:
                continue
            return [
                Evidence(
                    f"`{short_stmt(stmt)}` marks tokens of `{name}` by position, a mask built "
                    "over the stream's length: under a root split every rank would count "
                    "positions from 0",
                    ctx.path,
                    stmt.lineno,
                )
            ]
    return []


def attention_masks_from_lengths(
    ctx: ParallelContext,
    flow: ForwardFlow,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    stream_vars: list[str | None],
) -> list[Evidence]:
    """A mask forward builds from a stream's length (`torch.ones(b, img.shape[1])` joined with
    the text mask) that the blocks hand to attention: a root split would build it from this
    rank's length while the attention's keys span every rank's tokens. A split at the first
    block keeps it whole: a root blocker, not a refusal."""
    streams = {v for v in stream_vars if v}
    uses: tuple[dict[str, tuple[int, str, bool]], set[str]] | None = None
    for param, expr in bound.items():
        name = name_of(expr)
        if (
            name is None
            or name in streams
            or not (is_key_mask(ctx, param) or is_key_mask(ctx, name))
        ):
            continue
        measured = flow.shape_derived.get(name, set()) & streams
        if not measured:
            continue
        if uses is None:
            uses = per_token_uses(ctx, block)
        if param not in uses[1]:
            continue
        return [
            Evidence(
                f"`{name}` is built from the length of `{sorted(measured)[0]}` and reaches "
                f"attention (as `{param}`): a root split would give it this rank's length, "
                "while the keys span every rank's tokens; split at the first block instead",
                ctx.path,
                block.call.lineno if block.call else 1,
            )
        ]
    return []


def whole_token_masks(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    split_vars: list[str],
) -> list[tuple[str, Evidence]]:
    """A mask over the split stream's tokens that the blocks receive whole, and that a block uses
    for per-token work (a modulation chosen per token, a multiply after attention), not only as
    the attention mask: that work needs this rank's slice, the attention every key's column.
    Where the code shows the mask's token axis (it is built over the stream's length, or applied
    to a stream after trailing unit axes), it is split with the tokens at every block: the
    per-token work gets this rank's slice, and the generated module's CP attention gathers the
    columns of a mask over this rank's keys with the keys (`render_attention_masks`). Otherwise
    refused with the reason. Masks of the text stream are left alone (the text is whole inside
    the attention).

    (kind, evidence) pairs: kind "split" (planned), "caution" (the block skips the per-token
    work for a None mask and forward may pass None: a mode the plan still serves) or "refuse"."""
    planned = set().union(*(set(plan.splits.get(k, {})) for k in block_list_keys(block)))
    root = set(plan.splits.get("", {}))
    out: list[tuple[str, Evidence]] = []
    uses: tuple[dict[str, tuple[int, str, bool]], set[str]] | None = None
    for param, expr in bound.items():
        name = name_of(expr)
        if name is None or name in split_vars or param in planned:
            continue
        if not (is_key_mask(ctx, param) or is_key_mask(ctx, name)):
            continue
        if any(w in n.lower() for n in (param, name) for w in OTHER_STREAM_WORDS):
            continue
        sources = flow.derived.get(name, {name})
        if sources & root:
            continue  # split at the root with the tokens
        measured = flow.shape_derived.get(name, set()) & set(split_vars)
        given = {s for s in sources if s in flow.params and s != flow.hidden}
        if not measured and not given:
            continue
        if uses is None:
            uses = per_token_uses(ctx, block)
        per_token, to_attention = uses
        where = block.call.lineno if block.call else 1
        if measured and root:
            # under a root split the stream is local before the mask is built: the mask has
            # this rank's length, right for per-token work, wrong for attention over all keys
            if param in to_attention:
                out.append(("refuse", Evidence(
                    f"`{name}` is built from the length of `{sorted(measured)[0]}`, which the "
                    f"root split has made this rank's length, and the blocks pass it (as "
                    f"`{param}`) to attention, whose keys span every rank's tokens; context "
                    "parallelism is not generated",
                    ctx.path,
                    where,
                )))  # fmt: skip
            continue
        if param not in per_token:
            continue
        line, use, guarded = per_token[param]
        axis = _token_axis(flow, name, split_vars) or _applied_axis(
            ctx, flow, plan, block, bound, (name, param), split_vars
        )
        if axis is not None:
            use_at = (line, use, where)
            out.append(
                ("split", _split_with_tokens(ctx, plan, block, (name, param), axis, use_at, uses))
            )
            continue
        optional = guarded and _may_be_none(flow, name)
        why = (
            f"built from the length of `{sorted(measured)[0]}`"
            if measured
            else f"passed in by the caller as `{sorted(given)[0]}`"
        )
        message = _unread_axis_message((name, param), why, (line, use), optional)
        out.append(("caution" if optional else "refuse", Evidence(message, ctx.path, where)))
    return out


def _split_with_tokens(
    ctx: ParallelContext,
    plan: HookPlan,
    block: ParallelBlockList,
    names: tuple[str, str],
    axis: tuple[int, int],
    use_at: tuple[int, str, int],
    uses: tuple[dict[str, tuple[int, str, bool]], set[str]],
) -> Evidence:
    """Split the mask `names` = (forward name, block parameter) at every block on `axis`."""
    name, param = names
    split_dim, dims = axis
    line, use, where = use_at
    keys = param in uses[1]
    also = " and as an attention mask" if keys else ""
    plan.split(
        f"{block.attr}.*",
        param,
        SplitInput(
            split_dim,
            dims,
            reason=f"`{name}` covers the split stream's tokens; the blocks use it per token{also}",
            line=where,
        ),
    )
    gathered = (
        ", and as an attention mask, whose columns the generated CP attention gathers with the keys"
        if keys
        else ""
    )
    return Evidence(
        f"split `{name}` (as `{param}`) with the tokens at every block (axis {split_dim}): the "
        f"blocks use it for per-token work (line {line}: `{use}`), which needs this rank's "
        f"slice{gathered}",
        ctx.path,
        where,
    )


def _unread_axis_message(
    names: tuple[str, str], why: str, use_at: tuple[int, str], optional: bool
) -> str:
    name, param = names
    line, use = use_at
    outcome = (
        "the plan holds only while it is None (the blocks skip that work then); "
        "context parallelism fails when it is given"
        if optional
        else "context parallelism is not generated"
    )
    return (
        f"`{name}` ({why}) covers every token of the split stream, and the blocks use it "
        f"as `{param}` for per-token work (line {line}: `{use}`) besides any attention "
        f"mask: that work needs this rank's slice, an attention mask the whole, and its "
        f"token axis is not read where it is applied to a stream; {outcome}"
    )


def _applied_axis(
    ctx: ParallelContext,
    flow: ForwardFlow,
    plan: HookPlan,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    names: tuple[str, str],
    split_vars: list[str],
) -> tuple[int, int] | None:
    """(axis, rank) of a mask from where forward (as `name`) or the block (as `param`) applies
    it to a split stream, whose split spec gives the token axis and rank."""
    block_streams: dict[str, tuple[int, int]] = {}
    for key, inputs in plan.splits.items():
        if key not in ("", f"{block.attr}.0", f"{block.attr}.*"):
            continue
        for stream, spec in inputs.items():
            if isinstance(spec, SplitInput) and spec.expected_dims:
                block_streams[stream] = (spec.split_dim, spec.expected_dims)
    forward_streams = {
        var: block_streams[p]
        for p, expr in bound.items()
        if p in block_streams and (var := name_of(expr)) in split_vars
    }
    for var in split_vars:  # under a root split: the stream forward derives from a split input
        sources = [var, *sorted(flow.derived.get(var, ()))]
        spec = next((block_streams[s] for s in sources if s in block_streams), None)
        if spec is not None:
            forward_streams.setdefault(var, spec)
    block_streams.update(
        {p: forward_streams[v] for p, e in bound.items() if (v := name_of(e)) in forward_streams}
    )
    name, param = names
    axis = mask_axis_from_uses(flow.statements, name, forward_streams)
    if axis is not None:
        return axis
    found = ctx.resolver.find_method(block.block, "forward")
    if found is None:
        return None
    body = [n for n in walk(found[0]) if isinstance(n, ast.stmt) and n is not found[0]]
    return mask_axis_from_uses(body, param, block_streams)


def _may_be_none(flow: ForwardFlow, name: str) -> bool:
    """Whether forward may hand the blocks None for `name`: it comes from a parameter that
    defaults to None, or forward assigns None to it somewhere."""
    if name in flow.optional or flow.derived.get(name, set()) & flow.optional:
        return True
    return any(
        isinstance(stmt, ast.Assign)
        and name in assigned_names(stmt)
        and (
            (isinstance(stmt.value, ast.Constant) and stmt.value.value is None)
            or (
                isinstance(stmt.value, ast.IfExp)
                and any(
                    isinstance(v, ast.Constant) and v.value is None
                    for v in (stmt.value.body, stmt.value.orelse)
                )
            )
        )
        for stmt in flow.statements
    )


def mask_reorder_plan(
    ctx: ParallelContext, plan: HookPlan, joint_order: tuple[str, str] | None
) -> dict[str, Any] | None:
    """Where a mask over separately split streams is permuted into all-to-all order: the first
    cached list's blocks, their mask parameter and their two stream parameters split at
    `<list>.0`, in the order the attention joins them (`joint_order`, from the processor). None
    when any of these is not read exactly (the CP part is then refused)."""
    main = ctx.cached_lists[0] if ctx.cached_lists else None
    if joint_order is None or main is None or main.call is None:
        return None
    # only the first list runs on the split sequence (gathered at its last block): later lists
    # get the whole sequence and the mask as forward built it
    if not plan.gathers or any(not k.startswith(f"{main.attr}.") for k in plan.gathers):
        return None
    params = block_params(ctx, main)
    bound = bound_args(main.call, params)
    streams = list(plan.splits.get(f"{main.attr}.0", {}))
    if len(streams) != 2 or any(
        k.startswith(f"{main.attr}.")
        and k not in (f"{main.attr}.0", f"{main.attr}.*")
        and ".<" not in k
        for k in plan.splits
    ):
        return None
    kinds = {
        name: ("encoder" if any(w in name.lower() for w in OTHER_STREAM_WORDS) else "hidden")
        for name in streams
    }
    if sorted(kinds.values()) != ["encoder", "hidden"]:
        return None
    ordered = [next(n for n in streams if kinds[n] == kind) for kind in joint_order]
    masks = [
        p
        for p, expr in bound.items()
        if p in params and (is_key_mask(ctx, p) or is_key_mask(ctx, name_of(expr) or ""))
    ]
    if len(masks) != 1:
        return None
    return {"list": main.attr, "mask": masks[0], "streams": ordered, "line": main.call.lineno}


def masks_with_stream(
    ctx: ParallelContext, flow: ForwardFlow, plan: HookPlan, block: ParallelBlockList
) -> list[dict[str, Any]]:
    """Masks of a stream the plan splits where every block receives it (the text, so that the
    cross-attention's keys run context-parallel): the processor sees this rank's share of that
    stream, so its mask must be this rank's share too (a processor that pads or builds the mask
    from the key length then sees matching lengths, and the generated CP attention gathers the
    columns with the keys). The generated module splits such a mask where each block receives
    it, on the axis that has the stream's full length. A mask is paired with a stream by the
    words that mark the other stream (`encoder_attention_mask` with `encoder_hidden_states`)
    when exactly one such stream is split at every block."""
    if block.call is None:
        return []
    params = block_params(ctx, block)
    bound = bound_args(block.call, params)
    each = plan.splits.get(f"{block.attr}.*", {})
    streams = [
        name
        for name, spec in each.items()
        if isinstance(spec, SplitInput)
        and spec.expected_dims == 3
        and any(w in name.lower() for w in OTHER_STREAM_WORDS)
    ]
    if len(streams) != 1:
        return []
    out = []
    for param in params:
        value = bound.get(param)
        if value is None or param in each or not is_key_mask(ctx, param):
            continue
        if isinstance(value, ast.Constant) or not any(
            w in param.lower() for w in OTHER_STREAM_WORDS
        ):
            continue
        line = block.call.lineno
        name = name_of(value)
        sources = flow.derived.get(name, {name}) if name else set()
        out.append(
            {
                "list": block.attr,
                "mask": param,
                "stream": streams[0],
                "params": sorted(s for s in sources if s in flow.params),
                "message": f"`{param}` is the mask of `{streams[0]}`, which is split where "
                f"every block of `{block.attr}` receives it: the mask is split with it there "
                "(on the axis of the stream's full length)",
                "path": ctx.path,
                "line": line,
            }
        )
    return out
