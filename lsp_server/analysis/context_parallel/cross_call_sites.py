"""A plain attention module whose keys come from another input than its queries (`forward(self,
x, ctx)`) is cross-attention by its signature only: what it attends over is what the block hands
it. Read where the block calls it:

- keys from another input (a text stream, a learned bank): stays local, as read so far;
- keys from the block's own tokens, queries too (`self.attn(h, h)`): self-attention over split
  tokens: its SDPA is routed through cache-dit's context-parallel attention;
- keys from the block's own tokens, queries from elsewhere (`self.pool(self.query, x)`, text
  reading the image back): every rank would attend over its own tokens only, and cache-dit's
  attention splits queries and keys alike: context parallelism is refused;
- one module class called both ways: a route would all-to-all the whole other input: refused.
"""

from __future__ import annotations

import ast

from ..astutil import declared_params, self_attr, walk, walk_local
from ..model import Evidence
from ..parallel_input import ParallelContext
from ..sources import ClassRef
from .attention_facts import AttentionFacts, CrossCall
from .called_functions import bound_arguments
from .flow import data_names
from .processor_reading import needs_route


def judge_cross_calls(ctx: ParallelContext, block: ClassRef, facts: AttentionFacts) -> None:
    found = ctx.resolver.find_method(block, "forward")
    if found is None or not facts.cross_calls:
        return
    forward = found[0]
    params = declared_params(forward)
    if not params:
        return
    path = str((found[1].source or ctx.source).path)
    kinds: dict[str, set[str]] = {}
    for cross in facts.cross_calls:
        for call in _calls_of(forward, cross.attr):
            kind = _kind(call, cross, _carrying(forward, params[0], call.lineno))
            kinds.setdefault(cross.module.name, set()).add(kind)
            if kind == "query elsewhere":
                facts.own_attention.append(_whole_queries(block, cross, call, path))
    for cross in facts.cross_calls:
        seen = kinds.get(cross.module.name, set())
        if seen == {"self"}:
            where = Evidence(
                f"{block.name} calls `self.{cross.attr}` with its own tokens as both queries "
                f"and keys: {cross.module.name}'s SDPA is routed to cache-dit's "
                "_dispatch_attention_fn so attention runs the all-to-all",
                path,
                cross.sdpa.lineno,
            )
            needs_route(facts, cross.module, cross.method.name, cross.sdpa, where)
            if cross.local in facts.local_cross:
                facts.local_cross.remove(cross.local)
        elif "self" in seen and "local" in seen:
            facts.own_attention.append(
                Evidence(
                    f"{block.name} calls {cross.module.name} both over its own tokens and as "
                    "cross-attention to another input: routing it would split that input too; "
                    "context parallelism is not generated",
                    path,
                    cross.sdpa.lineno,
                )
            )
            kinds[cross.module.name] = set()  # said once


def _kind(call: ast.Call, cross: CrossCall, tokens: set[str]) -> str:
    bound = dict(bound_arguments(call, cross.method))
    key = bound.get(cross.key_param)
    if key is None or not data_names(key) & tokens:
        return "local"
    queries = [bound[p] for p in cross.query_params if p in bound]
    if queries and all(data_names(q) & tokens for q in queries):
        return "self"
    return "query elsewhere"


def _whole_queries(block: ClassRef, cross: CrossCall, call: ast.Call, path: str) -> Evidence:
    return Evidence(
        f"{block.name} calls `self.{cross.attr}({ast.unparse(call)[len(cross.attr) + 6 : -1]})`: "
        f"its keys (`{cross.key_param}`) are the block's own tokens while its queries are "
        "not: under a token split each rank would attend over its own tokens only; context "
        "parallelism is not generated",
        path,
        call.lineno,
    )


def _calls_of(forward: ast.FunctionDef, attr: str) -> list[ast.Call]:
    return [
        node
        for node in walk_local(forward)
        if isinstance(node, ast.Call) and self_attr(node.func) == attr
    ]


def _carrying(forward: ast.FunctionDef, stream: str, line: int) -> set[str]:
    """`stream` and the names forward assigns from its data before `line` (in source order: a
    name assigned from the tokens later does not carry them earlier)."""
    assigns = sorted(
        (
            n
            for n in walk_local(forward)
            if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign)
        ),
        key=lambda n: (n.lineno, n.col_offset),
    )
    carrying = {stream}
    for node in assigns:
        if node.lineno >= line or node.value is None or not data_names(node.value) & carrying:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        carrying |= {n.id for t in targets for n in walk(t) if isinstance(n, ast.Name)}
    return carrying
