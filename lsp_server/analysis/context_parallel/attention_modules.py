"""Finds the attention modules a block builds and the processors they run."""

from __future__ import annotations

import ast
import builtins

from ..astutil import (
    call_name,
    callee_name,
    self_attr,
    short_text,
    walk_local,
)
from ..model import Evidence
from ..parallel_input import ParallelContext
from ..sources import ClassRef, SourceFile, qualified
from .attention_facts import (
    ATTENTION_KERNELS,
    AttentionFacts,
    calls_sdpa,
    own_attention_product,
    sdpa_names,
    stream_joins,
    unrouted_kernel,
)
from .cross_call_sites import judge_cross_calls
from .injected_modules import injected_modules
from .processor_reading import (
    keys_from_another_input,
    note_block_sdpa,
    read_processor,
    unrouted_evidence,
)


def attention_facts(ctx: ParallelContext, block: ClassRef) -> AttentionFacts:
    """Look at the attention modules a block builds and the processors they run."""
    facts = AttentionFacts()
    seen: set[str] = set()
    for func, owner in ctx.resolver.init_methods(block):
        _read_init(ctx, func, owner.source or ctx.source, facts, seen)
    injected = injected_modules(ctx, block)
    for module in injected.modules:
        _read_assign(ctx, module.attr, module.assign, module.source, facts, {})
    _note_unresolved(injected.unresolved, facts)
    _block_own_sdpa(ctx, block, facts)
    judge_cross_calls(ctx, block, facts)
    forward = ctx.resolver.find_method(block, "forward")
    if forward is not None and (forward[1].source or ctx.source) is not None:
        path = str((forward[1].source or ctx.source).path)
        for order, line in stream_joins(forward[0]):
            where = Evidence(
                f"{block.name} joins the streams as [{order[0]}, {order[1]}]", path, line
            )
            facts.joins.append((order, where))
    orders = {order for order, _ in facts.joins}
    if len(orders) == 1:
        facts.joint_order = next(iter(orders))
        facts.joint_order_at = facts.joins[0][1]
    return facts


def _read_init(
    ctx: ParallelContext,
    func: ast.FunctionDef,
    source: SourceFile,
    facts: AttentionFacts,
    seen: set[str],
) -> None:
    """The attention modules one `__init__` builds (attributes a more derived `__init__`
    already built are skipped: `seen`, updated once this one is read)."""
    here: set[str] = set()
    local_calls = _local_calls(func)
    for node in module_assigns(func):
        attr = next((self_attr(t) for t in node.targets if self_attr(t)), None)
        if attr is None or attr in seen:
            continue
        here.add(attr)
        _read_assign(ctx, attr, node, source, facts, local_calls)
    seen |= here


def _read_assign(
    ctx: ParallelContext,
    attr: str,
    node: ast.Assign,
    source: SourceFile,
    facts: AttentionFacts,
    local_calls: dict[str, ast.Call],
) -> None:
    """The attention module `self.<attr> = Cls(...)` builds (`Cls` named as `source` names it)."""
    cls = ctx.resolver.resolve_class(source, call_name(node.value))
    if cls.node is None:
        _torch_attention(source, attr, node, facts) or _unread(source, attr, node, facts)
        return
    if not _is_attention(ctx, cls):
        unrouted_through_function(cls, facts)
        through = _sdpa_through_function(cls)
        if _calls_attention_kernel(cls):  # a plain nn.Module computing attention itself
            facts.attention_seen = True
            read_processor(ctx, cls, attr, facts, method="forward")
            facts.third_party_attention.append(_third_party(attr, cls, source, node))
        elif through is not None:  # ... through a function of its file
            facts.attention_seen = True
            assert cls.source is not None
            note_block_sdpa(cls, *through, str(cls.source.path), facts)
            facts.third_party_attention.append(_third_party(attr, cls, source, node))
        else:
            _hand_attention(ctx, cls, attr, facts)
        return
    facts.attention_seen = True
    processor = _processor_class(ctx, node.value, cls, source, local_calls)
    if processor is None or processor.node is None:
        return
    read_processor(ctx, processor, attr, facts, module=cls)
    if not ctx.resolver.derives_from(cls, "AttentionModuleMixin") and not any(
        a.name in ("Attention", "AttentionModuleMixin", "MochiAttention")
        for a in ctx.resolver.iter_mro(cls)
    ):
        facts.third_party_attention.append(
            Evidence(
                f"`{attr}` is {cls.name}, not a diffusers Attention: cache-dit will not "
                "hand it the parallel config; the planner must set "
                "`processor._parallel_config`",
                str(source.path),
                node.lineno,
            )
        )


def _note_unresolved(unresolved: list[Evidence], facts: AttentionFacts) -> None:
    """A module handed to the block whose class no construction names: like a module whose
    source is not read (it may hold the block's attention)."""
    for why in unresolved:
        facts.unread_attention |= any(w in why.message.lower() for w in ("attn", "attention"))
        facts.unread_modules.append(why)


def module_assigns(func: ast.FunctionDef) -> list[ast.Assign]:
    """`self.x = Cls(...)` in `func`; `self.x = A(...) if flag else B(...)` counts as both
    (either class may run)."""
    out: list[ast.Assign] = []
    for node in walk_local(func):
        if not isinstance(node, ast.Assign):
            continue
        if isinstance(node.value, ast.Call):
            out.append(node)
        elif isinstance(node.value, ast.IfExp):
            for branch in (node.value.body, node.value.orelse):
                if isinstance(branch, ast.Call):
                    out.append(ast.copy_location(ast.Assign(node.targets, branch), node))
    return out


# torch's attention modules: their attention runs in torch's own kernels (the inference fast
# path `torch._native_multi_head_attention`, or a softmax product when weights are returned),
# which no context-parallel backend reaches
TORCH_ATTENTION = (
    "torch.nn.MultiheadAttention",
    "torch.nn.modules.activation.MultiheadAttention",
    "torch.nn.TransformerEncoderLayer",
    "torch.nn.TransformerDecoderLayer",
)


def _unread(source: SourceFile, attr: str, node: ast.Assign, facts: AttentionFacts) -> bool:
    """`self.attn = Attention(...)` imported from a package whose source is not found (timm's
    `Attention` in the original DiT code, without timm installed): whether it attends over the
    tokens, and through which kernel, is unknown, so a token split is not planned around it.
    torch's own modules (token-local layers) are known."""
    assert isinstance(node.value, ast.Call)
    written = call_name(node.value)
    name = qualified(source, written)
    imported = written.split(".", 1)[0] in source.imports
    if name.startswith("torch.") or name in dir(builtins) or not imported:
        return False
    words = f"{attr} {name.rsplit('.', 1)[-1]}".lower()
    facts.unread_attention |= "attn" in words or "attention" in words
    facts.unread_modules.append(
        Evidence(
            f"`{attr}` is {name}, whose source the analysis could not read (is its package "
            "installed where the analysis runs?): whether it attends over the tokens, and "
            "through which kernel, is unknown; context parallelism is not generated rather "
            "than risk an attention left on this rank's tokens",
            str(source.path),
            node.lineno,
        )
    )
    return True


def _torch_attention(
    source: SourceFile, attr: str, node: ast.Assign, facts: AttentionFacts
) -> bool:
    """`self.attn = nn.MultiheadAttention(...)`: attention no CP backend runs across ranks."""
    assert isinstance(node.value, ast.Call)
    name = qualified(source, call_name(node.value))
    if name not in TORCH_ATTENTION:
        return name.startswith("torch.")
    facts.own_attention.append(
        Evidence(
            f"`{attr}` is {name}: its attention runs in torch's own kernels (the inference fast "
            "path `_native_multi_head_attention`), which no context-parallel backend reaches: "
            "under context parallelism it would attend over this rank's tokens only",
            str(source.path),
            node.lineno,
        )
    )
    return True


def _block_own_sdpa(ctx: ParallelContext, block: ClassRef, facts: AttentionFacts) -> None:
    """A block whose own `forward` runs attention: SDPA called there, or in a function of the
    same file it calls (`attention(q, k, v, pe=pe)` of reference code that keeps its attention
    modules as bare projection holders). The block class is routed like a plain attention
    module; keys from another input than the queries stay local."""
    found = ctx.resolver.find_method(block, "forward")
    for func, owner in _forward_chain(ctx, found):
        source = owner.source or ctx.source
        if source is None:
            return
        found_call = sdpa_call(func, source, through_functions=True)
        if found_call is not None:
            facts.attention_seen = True
            note_block_sdpa(owner, func, *found_call, str(source.path), facts)
        unrouted_through_function(owner, facts)


def _forward_chain(
    ctx: ParallelContext, found: tuple[ast.FunctionDef, ClassRef] | None
) -> list[tuple[ast.FunctionDef, ClassRef]]:
    """A `forward` and those of the bases it runs through `super().forward(...)` (a block
    subclass wrapping its base's output in a record or a tuple), 3 levels at most."""
    chain: list[tuple[ast.FunctionDef, ClassRef]] = []
    while found is not None and len(chain) < 3:
        chain.append(found)
        func, owner = found
        if not any(_is_super_forward(n) for n in walk_local(func)):
            break
        found = next(
            (
                (stmt, base)
                for base in list(ctx.resolver.iter_mro(owner))[1:]
                if base.node is not None
                for stmt in base.node.body
                if isinstance(stmt, ast.FunctionDef) and stmt.name == "forward"
            ),
            None,
        )
    return chain


def _is_super_forward(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "forward"
        and isinstance(node.func.value, ast.Call)
        and isinstance(node.func.value.func, ast.Name)
        and node.func.value.func.id == "super"
    )


def sdpa_call(
    func: ast.FunctionDef, source: SourceFile, through_functions: bool
) -> tuple[ast.Call, ast.Call] | None:
    """(the call in `func`, the SDPA call it makes): SDPA called in `func` itself, or, with
    `through_functions`, in a function of the same file `func` calls (`flash_attention(q, k, v)`
    falling back to SDPA)."""
    aliases = sdpa_names(source.import_statements())
    top = source.top_level
    for node in walk_local(func):
        if not isinstance(node, ast.Call):
            continue
        if calls_sdpa(node, aliases):
            return node, node
        helper = top.get(node.func.id) if isinstance(node.func, ast.Name) else None
        if through_functions and isinstance(helper, ast.FunctionDef):
            kernels = [
                n for n in walk_local(helper) if isinstance(n, ast.Call) and calls_sdpa(n, aliases)
            ]
            if kernels:
                # a bare name first (`flash_attn_func` beside `F.scaled_dot_product_attention`):
                # the route rebinds it
                kernels.sort(key=lambda n: not isinstance(n.func, ast.Name))
                return node, kernels[0]
    return None


def unrouted_through_function(cls: ClassRef, facts: AttentionFacts) -> None:
    """`forward` of `cls` calling a function of its file that runs a kernel no CP backend
    reaches (`flash_attn_varlen_func` when flash-attn is installed, SDPA otherwise): refused
    unless that call is a cross-attention (keys from another input)."""
    forward = _own_forward(cls)
    if forward is None or cls.source is None:
        return
    top = cls.source.top_level
    for node in walk_local(forward):
        helper = (
            top.get(node.func.id)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            else None
        )
        if not isinstance(helper, ast.FunctionDef):
            continue
        kernel = unrouted_kernel(helper, cls.source.import_statements())
        if kernel is None or keys_from_another_input(forward, node) is not None:
            continue
        where = str(cls.source.path)
        facts.own_attention.append(
            unrouted_evidence(f"{cls.name} runs", kernel, f"through `{helper.name}(...)`", where)
        )
        return


def _sdpa_through_function(
    cls: ClassRef,
) -> tuple[ast.FunctionDef, ast.Call, ast.Call] | None:
    """A plain module whose `forward` calls a function of its file that calls SDPA: (forward,
    that call, the SDPA call)."""
    forward = _own_forward(cls)
    if forward is None or cls.source is None:
        return None
    found = sdpa_call(forward, cls.source, through_functions=True)
    return (forward, *found) if found is not None else None


def _own_forward(cls: ClassRef) -> ast.FunctionDef | None:
    """The `forward` the class defines itself (None when it has none or was not read)."""
    if cls.node is None:
        return None
    return next(
        (s for s in cls.node.body if isinstance(s, ast.FunctionDef) and s.name == "forward"),
        None,
    )


def _calls_attention_kernel(cls: ClassRef) -> bool:
    """Its own `forward` calls an attention kernel (also one bound under another name)."""
    forward = _own_forward(cls)
    imports = cls.source.import_statements() if cls.source is not None else []
    aliases = sdpa_names(imports)
    return forward is not None and (
        any(
            isinstance(n, ast.Call)
            and (callee_name(n) in ATTENTION_KERNELS or calls_sdpa(n, aliases))
            for n in walk_local(forward)
        )
        or unrouted_kernel(forward, imports) is not None
    )


def _third_party(attr: str, cls: ClassRef, source, node: ast.stmt) -> Evidence:
    return Evidence(
        f"`{attr}` is {cls.name}, not a diffusers Attention: cache-dit will not hand it the "
        "parallel config; the planner must set it and route attention through cache-dit's "
        "_dispatch_attention_fn",
        str(source.path),
        node.lineno,
    )


def _is_attention(ctx: ParallelContext, cls: ClassRef) -> bool:
    if "processor" in {
        a.arg
        for f in cls.node.body
        if isinstance(f, ast.FunctionDef)  # type: ignore[union-attr]
        and f.name == "__init__"
        for a in f.args.args
    }:
        return True
    # diffusers' own classes only: third-party code names its plain attention `Attention` too
    return any(
        a.name in ("Attention", "AttentionModuleMixin") and _from_diffusers(a)
        for a in ctx.resolver.iter_mro(cls)
    )


def _from_diffusers(cls: ClassRef) -> bool:
    if cls.qualname.startswith("diffusers."):
        return True
    path = cls.source.path if cls.source is not None else None
    return path is not None and "diffusers" in path.parts


def _local_calls(func: ast.FunctionDef) -> dict[str, ast.Call]:
    """Locals of `func` assigned a call (`processor = BriaAttnProcessor()`), by name."""
    return {
        target.id: node.value
        for node in walk_local(func)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def processor_of(ctx: ParallelContext, call: ast.Call, cls: ClassRef, source) -> ClassRef | None:
    """The processor class an attention module built by `call` runs, when its `forward` hands
    the work to `self.processor`; None otherwise or when not read."""
    found = ctx.resolver.find_method(cls, "forward")
    if found is None or not any(
        isinstance(node, ast.Call) and self_attr(node.func) == "processor"
        for node in walk_local(found[0])
    ):
        return None
    processor = _processor_class(ctx, call, cls, source)
    return processor if processor is not None and processor.node is not None else None


def _processor_class(
    ctx: ParallelContext,
    call: ast.Call,
    cls: ClassRef,
    source,
    local_calls: dict[str, ast.Call] | None = None,
) -> ClassRef | None:
    for kw in call.keywords:
        value = kw.value
        if kw.arg == "processor" and isinstance(value, ast.Name) and local_calls:
            value = local_calls.get(value.id, value)  # `processor=processor`, built just above
        if kw.arg == "processor" and isinstance(value, ast.Call):
            return ctx.resolver.resolve_class(source, call_name(value))
    for ancestor in ctx.resolver.iter_mro(cls):
        if ancestor.node is None or ancestor.source is None:
            continue
        for stmt in ancestor.node.body:
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_default_processor_cls" for t in stmt.targets
            ):
                return ctx.resolver.resolve_class(ancestor.source, ast.unparse(stmt.value))
        init = next(
            (
                s
                for s in ancestor.node.body
                if isinstance(s, ast.FunctionDef) and s.name == "__init__"
            ),
            None,
        )
        if init is not None:
            for node in walk_local(init):
                if isinstance(node, ast.IfExp) and isinstance(node.body, ast.Call):
                    name = call_name(node.body)
                    if "Processor" in name:
                        return ctx.resolver.resolve_class(ancestor.source, name)
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Call)
                    and any(isinstance(t, ast.Name) and t.id == "processor" for t in node.targets)
                ):
                    return ctx.resolver.resolve_class(ancestor.source, call_name(node.value))
    return None


def _hand_attention(ctx: ParallelContext, cls: ClassRef, attr: str, facts: AttentionFacts) -> None:
    """A plain module (or the processor its `__init__` builds) multiplying keys by hand."""
    candidates: list[tuple[ClassRef, str]] = [(cls, "forward")]
    for func, where in ctx.resolver.init_methods(cls):
        source = where.source or cls.source
        for node in walk_local(func) if source is not None else ():
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and any(self_attr(t) == "processor" for t in node.targets)
            ):
                candidates.append(
                    (ctx.resolver.resolve_class(source, call_name(node.value)), "__call__")
                )
    for ref, method in candidates:
        found = ctx.resolver.find_method(ref, method) if ref.node is not None else None
        if found is None:
            continue
        func, owner = found
        if any(
            isinstance(n, ast.Call) and callee_name(n) in ATTENTION_KERNELS
            for n in walk_local(func)
        ):
            return
        own = own_attention_product(func)
        if own is not None:
            path = str((owner.source or cls.source).path) if (owner.source or cls.source) else ""
            facts.own_attention.append(
                Evidence(
                    f"`{attr}` ({ref.name}) computes attention itself (`{short_text(own)}`), "
                    "not through an attention kernel: under context parallelism it would "
                    "attend over this rank's tokens only",
                    path,
                    own.lineno,
                )
            )
            return
