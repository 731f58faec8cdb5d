"""The context-parallel result of a factorised split (`factorised_split`): the root hook plan,
the attention routed in the lists that attend over the split axis, and why a split is refused
when their attention cannot run across ranks or a mask reaches it."""

from __future__ import annotations

import ast

from ..astutil import call_name, names_in
from ..model import Diagnostic, Evidence
from ..parallel_input import ParallelContext
from .attention_facts import AttentionFacts
from .axis_atoms import init_calls
from .factorised_split import FactorisedSplit
from .flow import ForwardFlow
from .nested_attention import block_attention_facts, no_attention_read
from .preflight import evidence_diagnostics, head_checks
from .result import ContextParallelResult, SdpaRoute
from .token_mixing import attention_token_work, token_choice_refusals


def factorised_result(
    ctx: ParallelContext,
    flow: ForwardFlow,
    split: FactorisedSplit,
    read: dict[int, AttentionFacts] | None = None,
) -> tuple[ContextParallelResult | None, list[Evidence]]:
    """The result, or the reasons the routed lists cannot run across ranks. `read`: attention
    facts already read, by the block class's node (`id`; not read again)."""
    read = dict(read or {})
    routes: dict[str, SdpaRoute] = {}
    patches: list[Evidence] = []
    gqa: list[Evidence] = []
    reasons: list[Evidence] = []
    lists = {region.split(".")[0] for region in split.routed}
    routed = [b for b in ctx.block_lists if b.attr in lists]
    for block in routed:
        facts = read.get(id(block.block.node)) or block_attention_facts(ctx, block.block)
        read[id(block.block.node)] = facts
        unread = (
            facts.unread_modules[:1] if facts.unread_attention or not facts.attention_seen else []
        )
        reasons += facts.own_attention[:1] or unread or no_attention_read(ctx, block.block, facts)
        for route in facts.sdpa_routes:
            routes.setdefault(route.class_name, route)
        patches += facts.needs_processor_patch
        gqa += facts.gqa
        reasons += _masks_reaching(ctx, flow, block.attr, block.call)
    whole = [b for b in ctx.block_lists if b.attr in split.routed]
    refusals, cautions = token_choice_refusals(ctx, whole)  # as a token split of those lists
    reasons += refusals + _routed_module_work(ctx, split)
    if reasons:
        return None, reasons
    result = ContextParallelResult(
        approach="root_split",
        plan=split.hook_plan(),
        evidence=list(split.evidence),
        patches=list(dict.fromkeys(patches)),
        sdpa_routes=list(routes.values()),
        factorised=split,
    )
    warnings: list[Diagnostic] = head_checks(ctx)
    warnings += evidence_diagnostics("CDIT215", "warning", patches[:1])
    warnings += evidence_diagnostics("CDIT213", "warning", gqa[:1])
    warnings += evidence_diagnostics("CDIT221", "warning", cautions)
    warnings.append(
        Diagnostic(
            "info",
            "CDIT222",
            f"context parallelism splits axis {split.axis} of `{split.param}` (not the token "
            "sequence), whose size the caller chooses: under Ulysses or Ring it must divide by "
            "the CP size (the generated module checks it at each call); under Ulysses Anything "
            "Attention any size of at least the CP size runs, the first ranks taking one more "
            "entry",
            ctx.path,
            split.evidence[0].line if split.evidence else 1,
        )
    )
    result.warnings = warnings
    result.uaa_recommended = True
    return result, []


def _routed_module_work(ctx: ParallelContext, split: FactorisedSplit) -> list[Evidence]:
    """Attention modules routed inside blocks (`<list>.*.<attr>`), read as a token split reads
    attention: positions they count from their own length, causal attention (cache-dit's CP
    attention stops on it), windows."""
    out: list[Evidence] = []
    for region in split.routed:
        parts = region.split(".")
        block = next((b for b in ctx.block_lists if b.attr == parts[0]), None)
        if len(parts) != 3 or block is None:
            continue
        built = init_calls(ctx, block.block).get(parts[2])
        if built is None or built[1].source is None:
            continue
        cls = ctx.resolver.resolve_class(built[1].source, call_name(built[0]))
        if cls.node is not None:
            out += [
                Evidence(f"`{region}`: {e.message}", e.path, e.line)
                for e in attention_token_work(ctx, cls)
            ]
    return out


def _masks_reaching(
    ctx: ParallelContext, flow: ForwardFlow, attr: str, call: ast.Call | None
) -> list[Evidence]:
    """A mask forward takes handed to a routed list's blocks: their attention would run across
    ranks with a mask over this rank's share of the axis; refused."""
    if not isinstance(call, ast.Call):
        return []
    passed = set().union(*(names_in(a) for a in [*call.args, *(k.value for k in call.keywords)]))
    sources = {s for name in passed for s in flow.derived.get(name, {name})}
    masks = sorted(p for p in sources & set(flow.params) if "mask" in p.lower())
    if not masks:
        return []
    return [
        Evidence(
            f"`{masks[0]}` reaches the blocks of `{attr}`, whose attention runs across ranks over "
            "the split axis: the mask is not split with it; context parallelism is not generated",
            ctx.path,
            call.lineno,
        )
    ]
