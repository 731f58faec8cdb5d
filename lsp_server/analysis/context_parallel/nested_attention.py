"""The attention a block holds below its own attributes, or computes by hand in its own forward.

`attention_facts` reads the modules the block's `__init__` builds (`self.attn =
SelfAttention(...)`) and the kernel its own `forward` calls. Third-party blocks often wrap a layer
that holds the attention (`self.inner = AdaBlock(...)`, whose `__init__` builds `self.attn`), or
compute `softmax(q @ k^T) @ v` in their own `forward`. Read neither, the hooks split the tokens
with no route to cache-dit's attention: every rank attended over its own tokens only, and the
run was silently wrong (or stopped on a mask built for the whole sequence). Here the plain
modules the block builds are read like the block itself, a few levels down, so that an SDPA
there is routed and a hand-written or unrouted attention there refuses the split; the block's
own hand-written attention refuses it as well.
"""

from __future__ import annotations

import ast

from ..astutil import call_name, callee_name, short_text, walk_local
from ..model import Evidence
from ..parallel_input import ParallelContext
from ..sources import ClassRef, qualified
from .attention_facts import ATTENTION_KERNELS, AttentionFacts, own_attention_product
from .attention_modules import (
    _calls_attention_kernel,
    _is_attention,
    attention_facts,
    module_assigns,
    sdpa_call,
)

# how far below the block the modules it builds are read (`self.inner = Layer(...)` whose
# `__init__` builds `self.attn = SelfAttention(...)`: the attention is at depth 2)
NESTED_DEPTH = 3


def block_attention_facts(ctx: ParallelContext, block: ClassRef) -> AttentionFacts:
    """`attention_facts` of `block`, with the attention of the plain modules it builds (and
    theirs, `NESTED_DEPTH` levels down) and a hand-written attention in its own forward."""
    facts = attention_facts(ctx, block)
    _own_product(ctx, block, facts)
    _read_nested(ctx, block, facts, 1, {block.qualname})
    return facts


def _own_product(ctx: ParallelContext, block: ClassRef, facts: AttentionFacts) -> None:
    """The block's own `forward` multiplying queries by keys itself (no kernel call there)."""
    found = ctx.resolver.find_method(block, "forward")
    if found is None:
        return
    func, owner = found
    source = owner.source or ctx.source
    if source is None or sdpa_call(func, source, through_functions=True) is not None:
        return
    if any(
        isinstance(n, ast.Call) and callee_name(n) in ATTENTION_KERNELS for n in walk_local(func)
    ):
        return
    own = own_attention_product(func)
    if own is None:
        return
    facts.own_attention.append(
        Evidence(
            f"{owner.name}.forward computes attention itself (`{short_text(own)}`), not through "
            "an attention kernel: under context parallelism it would attend over this rank's "
            "tokens only",
            str(source.path),
            own.lineno,
        )
    )


def _read_nested(
    ctx: ParallelContext, cls: ClassRef, facts: AttentionFacts, depth: int, visited: set[str]
) -> None:
    """The attention facts of each plain module `cls` builds, merged into `facts`."""
    if depth > NESTED_DEPTH:
        return
    for child in plain_children(ctx, cls):
        if child.qualname in visited:
            continue
        visited.add(child.qualname)
        _merge(facts, attention_facts(ctx, child))
        _read_nested(ctx, child, facts, depth + 1, visited)


def plain_children(ctx: ParallelContext, cls: ClassRef) -> list[ClassRef]:
    """The classes of the modules every `__init__` of `cls` (and its bases) builds whose source
    is read and that are neither an attention module nor a module calling an attention kernel
    (`attention_facts` reads those where they are built)."""
    out: list[ClassRef] = []
    for ancestor in ctx.resolver.iter_mro(cls):
        if ancestor.node is None or ancestor.source is None:
            continue
        for init in ancestor.node.body:
            if not (isinstance(init, ast.FunctionDef) and init.name == "__init__"):
                continue
            for node in module_assigns(init):
                child = ctx.resolver.resolve_class(ancestor.source, call_name(node.value))
                if child.node is None or _is_attention(ctx, child):
                    continue
                if not _calls_attention_kernel(child) and child not in out:
                    out.append(child)
    return out


def _merge(facts: AttentionFacts, sub: AttentionFacts) -> None:
    """What a nested module's reading found, added to the block's (routes once per class)."""
    known = {r.class_name for r in facts.sdpa_routes}
    facts.sdpa_routes += [r for r in sub.sdpa_routes if r.class_name not in known]
    for name in (
        "needs_processor_patch",
        "third_party_attention",
        "gqa",
        "masks",
        "own_attention",
        "unread_modules",
        "local_cross",
    ):
        mine = getattr(facts, name)
        mine += [e for e in getattr(sub, name) if e not in mine]
    facts.unread_attention |= sub.unread_attention
    facts.attention_seen |= sub.attention_seen
    if facts.cross_attention_cp is None:
        facts.cross_attention_cp = sub.cross_attention_cp


def no_attention_read(
    ctx: ParallelContext, block: ClassRef, facts: AttentionFacts
) -> list[Evidence]:
    """A refusal when no attention of `block` was read at all (no attention module, kernel call
    or hand-written product in it or the modules it builds) while it builds a module that could
    hold one (a class built by a function, held in a list, or running a processor that was not
    read): a split would leave that attention on this rank's tokens, with nothing routed."""
    if facts.attention_seen or facts.own_attention or facts.unread_modules:
        return []
    if token_local(ctx, block, 0):  # nothing in it could attend (an MLP-only block)
        return []
    line = block.node.lineno if block.node is not None else 1
    path = str(block.source.path) if block.source is not None else str(ctx.source.path)
    return [
        Evidence(
            f"no attention of {block.name} was read (no attention module, attention kernel call "
            "or hand-written product in it or the modules it builds, "
            f"{NESTED_DEPTH} levels down): context parallelism is not generated rather than "
            "split its tokens around an attention no route reaches",
            path,
            line,
        )
    ]


# torch modules that work on each token alone (or are containers checked element by element)
TOKEN_LOCAL = frozenset(
    f"torch.nn.{name}"
    for name in (
        "Linear",
        "LayerNorm",
        "RMSNorm",
        "GELU",
        "SiLU",
        "ReLU",
        "Tanh",
        "Sigmoid",
        "Mish",
        "Dropout",
        "Identity",
        "Sequential",
    )
)


def token_local(ctx: ParallelContext, cls: ClassRef, depth: int) -> bool:
    """Whether every module `cls` builds is a torch module working on each token alone (a
    `Sequential` of them) or a read plain class of such modules, `NESTED_DEPTH` levels down,
    and no method of them runs an attention kernel or multiplies by keys."""
    if depth > NESTED_DEPTH or cls.node is None or cls.source is None:
        return False
    for ancestor in ctx.resolver.iter_mro(cls):
        if ancestor.node is None or ancestor.source is None:
            continue
        if _attends(ancestor.node):
            return False
        for init in ancestor.node.body:
            if not (isinstance(init, ast.FunctionDef) and init.name == "__init__"):
                continue
            for node in module_assigns(init):
                if not _local_call(ctx, ancestor, node.value, depth):
                    return False
    return True


def builds_attention(ctx: ParallelContext, owner: ClassRef, call: ast.Call) -> bool:
    """`call` (in an `__init__` of `owner`) builds an attention module: diffusers' processor
    based attention, or a class a method of which calls an attention kernel itself."""
    if owner.source is None:
        return False
    cls = ctx.resolver.resolve_class(owner.source, call_name(call))
    if cls.node is None:
        return False
    if _is_attention(ctx, cls) or _calls_attention_kernel(cls):
        return True
    return any(a.node is not None and _attends(a.node) for a in ctx.resolver.iter_mro(cls))


def builds_token_local(ctx: ParallelContext, owner: ClassRef, call: ast.expr) -> bool:
    """`call` (in an `__init__` of `owner`) builds a module that works on each token alone."""
    return _local_call(ctx, owner, call, 0)


def _local_call(ctx: ParallelContext, owner: ClassRef, call: ast.expr, depth: int) -> bool:
    """`call` builds a token-local module (`nn.Sequential(...)`: each of its elements)."""
    assert owner.source is not None
    if not isinstance(call, ast.Call):
        return False
    name = qualified(owner.source, call_name(call))
    if name in TOKEN_LOCAL:
        elements = call.args if name.endswith(".Sequential") else []
        return all(_local_call(ctx, owner, e, depth) for e in elements)
    child = ctx.resolver.resolve_class(owner.source, call_name(call))
    return child.node is not None and token_local(ctx, child, depth + 1)


def _attends(node: ast.ClassDef) -> bool:
    """A method of the class calls an attention kernel or multiplies by keys itself (a
    processor's `__call__`)."""
    for func in node.body:
        if not isinstance(func, ast.FunctionDef):
            continue
        calls = [n for n in walk_local(func) if isinstance(n, ast.Call)]
        if any(callee_name(n) in ATTENTION_KERNELS for n in calls):
            return True
        if own_attention_product(func) is not None:
            return True
    return False
