"""Which block lists of a transformer are cached: each list's representative block call and
block signature, and why a list is not proposed for caching (a side branch, an optional branch,
a short pre-stage, or an interleaved partner of another list) — `select_lists`."""

from __future__ import annotations

import ast
from typing import NamedTuple

from .astutil import not_none_guards, walk, walk_local
from .block_lists import BlockListDecl
from .block_loops import BlockCall, main_call, main_site
from .delegating_forward import delegated_function
from .forward_pattern import BlockSignature, read_signature
from .list_discovery import ListFacts
from .list_interleaving import Interleaving
from .patch_functor import Context
from .resolver import Resolver
from .sources import ClassRef, SourceFile

# A list this many times shorter than the longest cached list is a pre/post "refiner": too few
# blocks for DBCache to skip anything useful.
SHORT_LIST_RATIO = 4
SHORT_LIST_MAX = 4


class PreparedList(NamedTuple):
    """A block list with its representative block call, its blocks' forward signature, and why
    it is not cached (None: it is)."""

    facts: ListFacts
    call: BlockCall | None
    sig: BlockSignature | None
    aux: str | None


def select_lists(
    resolver: Resolver,
    source: SourceFile,
    lists: list[ListFacts],
    ctx: Context,
    interleaved: dict[str, Interleaving],
) -> tuple[list[PreparedList], set[str], list[Interleaving]]:
    """Each list prepared (in run order); the interleaved lists refused because their lead list
    is not cacheable (`blocked`); the interleaved groups cached as steps of their lead
    (`merged`)."""
    longest = max(lists, key=lambda f: f.count or 0) if any(f.count for f in lists) else None
    prepared = []
    for facts in lists:
        call = main_call(main_site(facts.sites))
        sig = block_signature(resolver, source, facts.elements[0], facts.decl)
        aux = auxiliary_reason(facts, call, sig, longest, ctx)
        prepared.append(PreparedList(facts, call, sig, aux))
    if all(aux for *_, aux in prepared):
        # Side-branch rules are relative: a model whose only loop collects side outputs
        # (a ControlNet) still caches that loop.
        prepared = [PreparedList(f, c, s, None) for f, c, s, _ in prepared]
    # Interleaved lists are cached as per-block steps of their lead list; when the lead
    # cannot be cached itself, none of them is.
    auxes = {f.decl.attr: aux for f, _, _, aux in prepared}
    blocked = {attr for attr, group in interleaved.items() if auxes.get(group.lead)}
    merged = [g for a, g in interleaved.items() if a == g.lead and a not in blocked]
    prepared = [
        PreparedList(
            f,
            c,
            s,
            interleaved[f.decl.attr].refusal()
            if f.decl.attr in blocked
            else interleaved[f.decl.attr].partner_reason()
            if f.decl.attr in interleaved and interleaved[f.decl.attr].lead != f.decl.attr
            else aux,
        )
        for f, c, s, aux in prepared
    ]
    return prepared, blocked, merged


def block_signature(
    resolver: Resolver, source: SourceFile, block: ClassRef, decl: BlockListDecl
) -> BlockSignature | None:
    """The signature of the block class' forward; for a wrapper (`return self.block(...)`), with
    the returns of the wrapped class' forward."""
    found = resolver.find_method(block, "forward")
    if found is None:
        return None
    func, owner = found
    path = str(owner.source.path) if owner.source else str(source.path)
    delegated = delegated_function(resolver, owner.source or source, func)
    if delegated is not None:  # `return mix(*args, half=self.half, **kwargs)`
        inner_func, inner_source, bound = delegated
        sig = read_signature(inner_func, block.name, str(inner_source.path))
        sig.params = [p for p in sig.params if p not in bound]
        sig.kwonly = [p for p in sig.kwonly if p not in bound]
        return sig
    sig = read_signature(func, block.name, path)
    if sig.delegates_to and not sig.returns:
        # `return self.block(...)`: a wrapper; read the wrapped class from the constructor.
        for element in decl.elements:
            for inner_name in element.inner:
                src = block.source or source
                inner = resolver.resolve_class(source, inner_name)
                if inner.node is None and src is not source:
                    inner = resolver.resolve_class(src, inner_name)
                inner_found = resolver.find_method(inner, "forward")
                if inner_found:
                    inner_func, inner_owner = inner_found
                    inner_path = str(inner_owner.source.path) if inner_owner.source else path
                    wrapped = read_signature(inner_func, inner.name, inner_path)
                    sig.returns = wrapped.returns
                    return sig
    return sig


def auxiliary_reason(
    facts: ListFacts,
    call: BlockCall | None,
    sig: BlockSignature | None,
    longest: ListFacts | None,
    ctx: Context,
) -> str | None:
    """Why a block list is a side branch or a short pre-stage rather than a list to cache."""
    site = main_site(facts.sites)
    if call is not None and sig is not None and sig.named:
        first = _arg_for(call, sig, 0)
        if isinstance(first, ast.Name) and call.targets and first.id not in call.targets:
            return (
                f"its loop does not update `{first.id}` (the stream it receives); "
                "it computes side outputs, so there is nothing to cache"
            )
        if (
            isinstance(first, ast.Name)
            and first.id in call.targets
            and not any(_read_after(s.method, first.id, s.loop) for s in facts.sites)
        ):
            return (
                f"the stream it updates (`{first.id}`) is not used after its loop; "
                "only its side outputs are, so it is a side branch"
            )
    guards = _optional_guards(site.method, site.loop, ctx.optional_inputs)
    if guards:
        names = ", ".join(f"`{g}`" for g in sorted(guards))
        return f"it runs only when {names} is passed (an optional branch)"
    if (
        longest is not None
        and longest is not facts
        and facts.count
        and longest.count
        and facts.count <= SHORT_LIST_MAX
        and facts.count * SHORT_LIST_RATIO <= longest.count
        and min(s.order for s in facts.sites) < min(s.order for s in longest.sites)
    ):
        return (
            f"a {facts.count}-block pre-stage before the {longest.count}-block "
            f"`{longest.decl.attr}`: too short for DBCache to skip anything useful"
        )
    return None


def _read_after(func: ast.FunctionDef, name: str, loop: ast.stmt) -> bool:
    end = getattr(loop, "end_lineno", loop.lineno)
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and n.lineno > end
        for n in walk_local(func)
    )


def _optional_guards(func: ast.FunctionDef, loop: ast.stmt, optional: set[str]) -> set[str]:
    """Optional inputs that must be passed for `loop` to run (`if x is not None:` around it)."""
    out: set[str] = set()
    for node in walk_local(func):
        if isinstance(node, ast.If) and any(
            child is loop for stmt in node.body for child in walk(stmt)
        ):
            out |= not_none_guards(node.test) & optional
    return out


def _arg_for(call: BlockCall, sig: BlockSignature, index: int) -> ast.expr | None:
    if index < len(call.args):
        return call.args[index]
    if index < len(sig.named):
        return call.keywords.get(sig.named[index])
    return None
