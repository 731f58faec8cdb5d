"""Attention masks under context parallelism: where they come from, and whether they need a reorder.

Ulysses' all-to-all concatenates each rank's `[text_r, image_r]` chunks in rank order. A mask over
the joint `[text, image]` sequence is therefore only valid after it is permuted into that order —
when text and image are split as separate tensors. When one joint tensor is split, the order is
unchanged and the mask can be used as it is.
"""

from __future__ import annotations

import ast

from ..astutil import callee_name, names_read, walk, walk_local
from ..model import Evidence
from ..parallel_input import ParallelContext
from .flow import ForwardFlow, length_sources
from .key_masks import is_key_mask
from .result import AttentionMask

_KWARGS_DICT_WORDS = ("kwargs",)
_SIZE_BUILDERS = ("ones", "zeros", "full", "empty", "pad", "cat", "concat")


def _is_mask_name(name: str) -> bool:
    return "mask" in name.lower()


def attention_mask(
    ctx: ParallelContext, flow: ForwardFlow, split_streams: tuple[str, ...]
) -> AttentionMask:
    path = ctx.path
    sources: list[Evidence] = []
    params: list[str] = []
    joint = False
    built = False  # forward builds a mask over the joint sequence itself
    line = ctx.forward.lineno if ctx.forward else 1
    block_args = set()
    for b in ctx.cached_lists:
        if b.call is not None:
            for a in [*b.call.args, *(k.value for k in b.call.keywords)]:
                block_args |= names_read(a)
    for param in flow.params:
        if is_key_mask(ctx, param):
            used = param in block_args or any(
                param in flow.derived.get(n, set()) for n in block_args
            )
            if used:
                params.append(param)
                sources.append(
                    Evidence(f"forward takes `{param}` and passes it to the blocks", path, line)
                )
    for name in sorted(block_args - set(flow.params)):
        if is_key_mask(ctx, name) and not any(
            param in flow.derived.get(name, set()) for param in params
        ):
            # a mask forward builds itself (`(ids[:, :, None] == ids[:, None]).unsqueeze(1)`)
            sources.append(
                Evidence(f"forward builds `{name}` and passes it to the blocks", path, line)
            )
    stream_origins = [flow.derived.get(v, {v}) for v in split_streams]
    for stmt in flow.statements:
        if stmt.lineno >= flow.first_loop_line or not isinstance(stmt, ast.Assign):
            continue
        targets = [n.id for t in stmt.targets for n in walk(t) if isinstance(n, ast.Name)]
        if not any(_is_mask_name(t) for t in targets):
            continue
        if _covers_streams(flow, stmt.value, stream_origins):
            joint = built = True
            sources.append(
                Evidence(
                    f"forward builds a mask over the joint sequence: `{ast.unparse(stmt)[:80]}`",
                    path,
                    stmt.lineno,
                )
            )
    guarded = _under_not_none(ctx.forward, set(params))
    for key_line in _kwargs_mask_keys(ctx):
        joint = True
        if key_line.path == path and any(a <= key_line.line <= b for a, b in guarded):
            continue  # built only when the caller passes a mask parameter: that source covers it
        sources.append(key_line)
    present = bool(sources)
    reorder = joint and len(split_streams) >= 2
    return AttentionMask(present, reorder, sources, params, built)


def _under_not_none(func: ast.AST | None, names: set[str]) -> list[tuple[int, int]]:
    """Line ranges of `if <name> is not None:` bodies for the given names."""
    out: list[tuple[int, int]] = []
    if func is None or not names:
        return out
    for node in walk(func):
        test = node.test if isinstance(node, ast.If) else None
        if (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id in names
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.IsNot)
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None
            and isinstance(node, ast.If)
            and node.body
        ):
            end = max(getattr(b, "end_lineno", b.lineno) or b.lineno for b in node.body)
            out.append((node.body[0].lineno, end))
    return out


def _covers_streams(flow: ForwardFlow, value: ast.expr, origins: list[set[str]]) -> bool:
    """A mask sized over the joint sequence: built (ones/zeros/full, pad, cat) with the length of a
    split stream, next to a text mask or the length of the other stream."""
    if len(origins) < 2:
        return False
    for node in walk_local(value):
        if not isinstance(node, ast.Call) or callee_name(node) not in _SIZE_BUILDERS:
            continue
        lengths = length_sources(flow, node)
        covered = sum(
            1 for origin in origins if any(flow.derived.get(src, {src}) & origin for src in lengths)
        )
        masks = any(_is_mask_name(n) for n in names_read(node))
        if covered >= 2 or (covered >= 1 and masks):
            return True
    return False


def _kwargs_mask_keys(ctx: ParallelContext) -> list[Evidence]:
    """`*_kwargs["attention_mask"] = ...` or `{"attention_mask": ...}`, in forward or pipeline."""
    out: list[Evidence] = []
    trees = [(ctx.forward, ctx.path)]
    if ctx.pipeline is not None:
        trees.append((ctx.pipeline.tree, str(ctx.pipeline.path)))
    for tree, path in trees:
        if tree is None:
            continue
        for node in walk(tree):
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.slice, ast.Constant)
                and node.slice.value == "attention_mask"
                and any(w in ast.unparse(node.value) for w in _KWARGS_DICT_WORDS)
            ):
                out.append(
                    Evidence(
                        "an `attention_mask` is passed through an attention-kwargs dict",
                        path,
                        node.lineno,
                    )
                )
            elif isinstance(node, ast.Call):
                for kw in node.keywords:
                    if (
                        kw.arg
                        and kw.arg.endswith("attention_kwargs")
                        and isinstance(kw.value, ast.Dict)
                        and any(
                            isinstance(k, ast.Constant) and k.value == "attention_mask"
                            for k in kw.value.keys
                        )
                    ):
                        out.append(
                            Evidence(
                                f"an `attention_mask` is passed in `{kw.arg}`", path, node.lineno
                            )
                        )
    return out
