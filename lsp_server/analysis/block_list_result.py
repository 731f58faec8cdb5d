"""The result for one cached block list (`block_list_result`): its ForwardPattern with the
evidence for it, cache-dit's `check_forward_pattern` / `check_num_outputs` settings, and the
PatchFunctor reasons its loop and block call give (keyword re-binding, loop-body work, the order
of the streams)."""

from __future__ import annotations

import ast

from .analysis_result import BlockListResult
from .astutil import names_read
from .block_loops import BlockCall, LoopSite, in_checkpoint_branch
from .forward_pattern import (
    ENCODER,
    HIDDEN,
    BlockSignature,
    PatternChoice,
    choose_pattern,
    pattern_from_loop_targets,
)
from .list_discovery import ListFacts
from .list_paths import list_source
from .loop_body import loop_body_reasons
from .model import Evidence
from .patch_functor import (
    Context,
    Reason,
    binding_problem,
    keyword_only_streams,
    loop_bound_reason,
    partial_loop_reason,
    stream_order_reason,
)
from .repeated_runs import repeated_run_reasons
from .sources import ClassRef

# patterns whose blocks hand back one stream: cache-dit's wrapper returns it as a tensor
ONE_OUTPUT = frozenset({"Pattern_2", "Pattern_3"})


def block_list_result(
    path: str,
    facts: ListFacts,
    site: LoopSite,
    call: BlockCall | None,
    block: ClassRef,
    sig: BlockSignature | None,
    order: int,
    ctx: Context,
    forward: ast.FunctionDef | None,
    is_diffusers: bool,
) -> tuple[BlockListResult, list[Reason]]:
    """The result for the list `facts` (#`order` in run order), run by the loop `site` with the
    block call `call` of blocks of class `block`; and the PatchFunctor reasons it gives. `path`
    is the analyzed file."""
    decl = facts.decl
    evidence = _list_evidence(path, facts, site, block, order)
    choice = _choose_pattern(path, site, call, block, sig, evidence)
    pattern, reasons = _checked_binding(path, facts, call, sig, choice, evidence)
    reasons += _loop_reasons(facts, site, call, sig, choice, ctx, forward, pattern)
    pattern = _through_reordering_step(path, block, call, pattern, reasons, evidence)
    check, check_num = _cache_checks(sig, pattern, is_diffusers)
    result = BlockListResult(
        attr=decl.attr,
        block_class=block.name,
        block_class_path=str(block.source.path) if block.source else None,
        block_class_line=block.node.lineno if block.node else None,
        forward_pattern=pattern,
        signature_pattern=choice.signature_pattern,
        confidence=choice.confidence,
        evidence=evidence,
        order=order,
        count=facts.count,
        count_expr=decl.count_expr,
        alternatives=choice.alternatives,
        check_forward_pattern=check,
        check_num_outputs=check_num,
        container=decl.container,
    )
    if len({e.name for e in facts.elements}) > 1:
        result.evidence.append(
            Evidence(
                "elements are built from several classes: "
                + ", ".join(sorted({e.name for e in facts.elements})),
                path,
                decl.line,
            )
        )
    return result, reasons


def _list_evidence(
    path: str, facts: ListFacts, site: LoopSite, block: ClassRef, order: int
) -> list[Evidence]:
    """Where the list is declared and where forward runs it."""
    decl = facts.decl
    where = list_source(decl.attr)
    what = f"`{where}` is an nn.{decl.container} of {block.name} (built by {decl.built_by})"
    if "." in decl.attr:
        nested = decl.attr.rpartition(".")[2].isdigit()
        held = "one of the lists of an nn.ModuleList" if nested else "held in an nn.ModuleDict"
        what += (
            f", {held}: the integration hands cache-dit `{where}` under a name of its own and "
            "puts the cached list in its place while forward runs"
        )
    if decl.container != "ModuleList":
        what += (
            "; forward iterates it and nothing calls it whole: the integration makes it an "
            "nn.ModuleList of the same modules (cache-dit caches ModuleLists; state-dict keys "
            "unchanged)"
        )
    return [
        Evidence(what, path, decl.line),
        Evidence(
            f"forward runs `{where}` (#{order} in execution order)",
            path,
            site.loop.lineno,
        ),
    ]


def _choose_pattern(
    path: str,
    site: LoopSite,
    call: BlockCall | None,
    block: ClassRef,
    sig: BlockSignature | None,
    evidence: list[Evidence],
) -> PatternChoice:
    """The ForwardPattern from the block's forward (or, without it, from the loop's assignment);
    the signature and return evidence is appended to `evidence`."""
    if sig is None:
        choice = PatternChoice(
            None, None, None, False, f"the forward of {block.name} could not be located", 0.1
        )
        if call is not None and call.targets:
            stub = BlockSignature(block.name, path, 0, [], True, True, [])
            choice = pattern_from_loop_targets(stub, call.targets, _stream_args(call), None)
        return choice
    choice = choose_pattern(
        sig,
        call.targets if call else None,
        _stream_args(call) if call else None,
        _loop_reads(site),
    )
    evidence.append(
        Evidence(
            f"{block.name}.forward({_signature_text(sig)}): {choice.reason}",
            sig.path,
            sig.line,
        )
    )
    for ret in sig.returns[:3]:
        text = ", ".join(s or "None" for s in ret.streams)
        evidence.append(Evidence(f"returns ({text}) [{ret.via}]", sig.path, ret.line))
    return choice


def _checked_binding(
    path: str,
    facts: ListFacts,
    call: BlockCall | None,
    sig: BlockSignature | None,
    choice: PatternChoice,
    evidence: list[Evidence],
) -> tuple[str | None, list[Reason]]:
    """The pattern once cache-dit's positional re-call of the block is checked: Pattern_2 becomes
    Pattern_3 when only that keeps the call's binding intact; a binding the pattern still breaks
    is a `keyword_binding` reason."""
    pattern = choice.pattern
    reasons: list[Reason] = []
    if call is None or sig is None or pattern is None:
        return pattern, reasons
    problem = binding_problem(sig, call, pattern)
    if problem and pattern == "Pattern_2" and not binding_problem(sig, call, "Pattern_3"):
        evidence.append(
            Evidence(
                f"Pattern_2 would mis-bind the call ({problem}); Pattern_3 keeps it intact",
                path,
                call.call.lineno,
            )
        )
        pattern, problem = "Pattern_3", None
        choice.alternatives = []
    keyword_only = keyword_only_streams(sig, pattern)
    if keyword_only:
        names = ", ".join(f"`{s}`" for s in keyword_only)
        problem = (
            f"{sig.class_name}.forward takes {names} only by keyword, but cache-dit calls every "
            "block with its streams positionally: each block runs through a step that takes "
            "them positionally and calls the block by name"
        )
        kind = "keyword_only_streams"
    else:
        kind = "keyword_binding"
    if problem:
        reasons.append(Reason(kind, problem, call.call.lineno, "high", None, True, facts.decl.attr))
    return pattern, reasons


def _loop_reasons(
    facts: ListFacts,
    site: LoopSite,
    call: BlockCall | None,
    sig: BlockSignature | None,
    choice: PatternChoice,
    ctx: Context,
    forward: ast.FunctionDef | None,
    pattern: str | None,
) -> list[Reason]:
    """The loop-body reasons of the list's loops (not the gradient-checkpointing ones), and the
    stream-order reason of its main loop. `pattern`: the list's ForwardPattern (with one output
    stream, cache-dit's wrapper hands back the stream itself, so `[0]` of it is a part)."""
    reasons: list[Reason] = []
    one_output = pattern in ONE_OUTPUT
    access = call.output_access(one_output) if call is not None else None
    if call is not None and access is not None:
        reasons.append(
            Reason(
                "block_output_access",
                f"the loop keeps `{access}` of each block's output, but cache-dit's wrapper "
                "hands on what the blocks return as the streams: each block runs through a step "
                "that returns the streams themselves",
                call.call.lineno,
                "high",
                None,
                True,
                facts.decl.attr,
            )
        )
    for s in facts.sites:
        if in_checkpoint_branch(s):
            continue
        reasons += loop_body_reasons(s, ctx, one_output)
        if s.bound is not None:
            reasons.append(loop_bound_reason(s, facts.decl.count_expr))
        if s.part is not None:
            reasons.append(partial_loop_reason(s))
    if (
        call is not None
        and sig is not None
        and forward is not None
        and choice.second_stream
        and choice.returns_two
    ):
        reason = stream_order_reason(site, call, choice.second_stream, sig, forward)
        if reason:
            reasons.append(reason)
    return reasons + repeated_run_reasons(facts.sites)  # reversed, twice called, early exit


def _through_reordering_step(
    path: str,
    block: ClassRef,
    call: BlockCall | None,
    pattern: str | None,
    reasons: list[Reason],
    evidence: list[Evidence],
) -> str | None:
    """The pattern the list runs as when the block takes the denoised stream second
    (`stream_order`): each block runs through a step that takes the two streams the other way
    round and returns them as the block does, so Pattern_0 and Pattern_1 trade places."""
    swapped = _SWAPPED.get(pattern or "")
    if call is None or swapped is None or not any(r.kind == "stream_order" for r in reasons):
        return pattern
    evidence.append(
        Evidence(
            f"{block.name} takes the denoised stream second: each block runs through a step "
            f"taking the streams the other way round, so the list runs as {swapped} (the "
            f"block itself reads as {pattern})",
            path,
            call.call.lineno,
        )
    )
    return swapped


_SWAPPED = {"Pattern_0": "Pattern_1", "Pattern_1": "Pattern_0"}


def _cache_checks(
    sig: BlockSignature | None, pattern: str | None, is_diffusers: bool
) -> tuple[bool | None, bool | None]:
    """cache-dit's `check_forward_pattern` (the block takes the pattern's stream names) and
    `check_num_outputs` (its return annotation counts the pattern's outputs); None without a
    signature."""
    if sig is None:
        return None, None
    names = set(sig.named)
    needs = {HIDDEN} | ({ENCODER} if pattern in ("Pattern_0", "Pattern_1", "Pattern_2") else set())
    check = bool(is_diffusers and needs <= names)
    annotation = sig.return_annotation or ""
    n = annotation.count("torch.Tensor")
    out_len = 2 if pattern in ("Pattern_0", "Pattern_1", "Pattern_4", "Pattern_5") else 1
    return check, bool(n) and n == out_len


def _loop_reads(site: LoopSite) -> set[str]:
    return set().union(*(names_read(stmt) for stmt in site.body))


def _stream_args(call: BlockCall) -> list[str | None]:
    return [a.id if isinstance(a, ast.Name) else None for a in call.args] + [
        v.id if isinstance(v, ast.Name) else None for v in call.keywords.values()
    ]


def _signature_text(sig: BlockSignature) -> str:
    """`x, c` or, with keyword-only parameters, `x, *, c` (as written)."""
    if not sig.kwonly:
        return ", ".join(sig.params)
    return ", ".join([*sig.params, "*", *sig.kwonly])
