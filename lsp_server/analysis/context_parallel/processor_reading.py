"""Reads one attention processor (or a plain module's `forward`): does it run context-parallel,
for which keys, and what must be patched."""

from __future__ import annotations

import ast
from dataclasses import replace

from ..astutil import (
    callee_name,
    names_read,
    self_attr,
    short_text,
    walk,
    walk_local,
)
from ..library_answers import library_answer
from ..model import Evidence
from ..parallel_input import ParallelContext
from ..sources import ClassRef
from .attention_facts import (
    ATTENTION_KERNELS,
    AttentionFacts,
    CrossCall,
    calls_sdpa,
    flash_names,
    own_attention_product,
    sdpa_names,
    stream_joins,
    unrouted_kernel,
)
from .called_functions import processor_caller
from .called_windows import called_windows
from .flow import data_names
from .result import SdpaRoute
from .token_windows import processor_stream, token_windows


def read_processor(
    ctx: ParallelContext,
    processor: ClassRef,
    attr: str,
    facts: AttentionFacts,
    method: str = "__call__",
    module: ClassRef | None = None,
) -> None:
    """`module`: the attention module that runs the processor (its methods `attn.<m>`)."""
    assert processor.node is not None
    call_method = next(
        (s for s in processor.node.body if isinstance(s, ast.FunctionDef) and s.name == method),
        None,
    )
    if call_method is None or processor.source is None:
        return
    path = str(processor.source.path)
    dispatched = False
    sdpa_aliases = sdpa_names(processor.source.import_statements())
    for node in walk_local(call_method):
        if not isinstance(node, ast.Call):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if "parallel_config" in keywords:
            dispatched = True
            _read_parallel_config(keywords["parallel_config"], facts)
        _note_gqa(keywords, attr, path, node, facts)
        if (
            calls_sdpa(node, sdpa_aliases)
            and not dispatched
            and _note_direct_sdpa(processor, attr, call_method, method, path, node, facts)
        ):
            continue  # cross-attention: stays local
        _note_mask_build(processor, path, node, facts)
    if not dispatched:
        _note_own_attention(processor, attr, call_method, path, facts)
        imports = processor.source.import_statements() if processor.source is not None else None
        note_unrouted_kernel(processor.name, call_method, path, facts, imports)
    if method != "forward":  # a module's own `forward` is read with the block: token_mixing
        _note_windows(ctx, processor, attr, call_method, module, facts)
    for order, line in stream_joins(call_method):
        where = Evidence(
            f"{processor.name} joins the streams as [{order[0]}, {order[1]}]", path, line
        )
        facts.joins.append((order, where))
    if facts.needs_processor_patch and facts.cross_attention_cp is None:
        facts.cross_attention_cp = True


def _note_windows(
    ctx: ParallelContext,
    processor: ClassRef,
    attr: str,
    call_method: ast.FunctionDef,
    module: ClassRef | None,
    facts: AttentionFacts,
) -> None:
    """Windows of the tokens a processor cuts itself or in a function it calls (an answer kept
    across runs for a processor and module of an installed library: `library_answers`)."""
    stream = processor_stream(call_method)

    def read() -> tuple[int, str] | None:
        return token_windows(call_method, stream) or called_windows(
            ctx, processor_caller(processor, call_method, module), stream
        )

    nodes = (call_method, *(m.node for m in (processor, module) if m is not None and m.node))
    sources = [m.source for m in (processor, module) if m is not None]
    paths = tuple(s.path for s in sources if s is not None)
    windows = library_answer("processor windows", nodes, paths, (stream,), read)
    if windows is not None and processor.source is not None:
        line, message = windows
        where = str(processor.source.path)
        facts.own_attention.append(Evidence(f"`{attr}` ({processor.name}) {message}", where, line))


def _read_parallel_config(value: ast.expr, facts: AttentionFacts) -> None:
    """`parallel_config=...` handed to the attention dispatch: for self-attention only (chosen
    on `encoder_hidden_states`), or for every call."""
    if isinstance(value, ast.IfExp) and "encoder_hidden_states" in ast.unparse(value.test):
        if facts.cross_attention_cp is None:
            facts.cross_attention_cp = False
    elif self_attr(value) or isinstance(value, ast.Attribute):
        facts.cross_attention_cp = True


def _note_gqa(
    keywords: dict[str, ast.expr], attr: str, path: str, node: ast.Call, facts: AttentionFacts
) -> None:
    if "enable_gqa" in keywords and not (
        isinstance(keywords["enable_gqa"], ast.Constant) and keywords["enable_gqa"].value is False
    ):
        facts.gqa.append(
            Evidence(
                f"`{attr}` attention runs with enable_gqa: Ulysses needs K/V "
                "repeated to all heads or a cp_gqa_strategy",
                path,
                node.lineno,
            )
        )


def _note_direct_sdpa(
    processor: ClassRef,
    attr: str,
    call_method: ast.FunctionDef,
    method: str,
    path: str,
    node: ast.Call,
    facts: AttentionFacts,
) -> bool:
    """An SDPA call not routed through the dispatch: a cross-attention of a plain module stays
    local (returns True); else the processor must be patched to the dispatch."""
    other = keys_from_another_input(call_method, node) if method == "forward" else None
    if other is not None:  # cross-attention: this rank's queries, the whole `other`
        _stays_local(processor.name, other, path, node, facts)
        query = (
            node.args[0] if node.args else next(k.value for k in node.keywords if k.arg == "query")
        )
        facts.cross_calls.append(
            CrossCall(
                attr,
                processor,
                call_method,
                node,
                other,
                tuple(sorted(param_origins(call_method, query))),
                facts.local_cross[-1],
            )
        )
        return True
    where = Evidence(
        f"{processor.name} calls F.scaled_dot_product_attention directly: patch it to "
        "cache-dit's _dispatch_attention_fn so attention runs the all-to-all",
        path,
        node.lineno,
    )
    needs_route(facts, processor, method, node, where)
    return False


def _stays_local(owner: str, other: str, path: str, call: ast.Call, facts: AttentionFacts) -> None:
    facts.local_cross.append(
        Evidence(
            f"{owner} attends to `{other}` (keys and values from another input than the "
            "queries): it stays local under context parallelism",
            path,
            call.lineno,
        )
    )


def needs_route(
    facts: AttentionFacts, owner: ClassRef, method: str, sdpa: ast.Call, where: Evidence
) -> None:
    """The class whose `method` runs `sdpa` is routed (the patch it would otherwise need)."""
    facts.needs_processor_patch.append(where)
    imports = owner.source.import_statements() if owner.source is not None else None
    _note_sdpa_route(facts, owner.name, method, sdpa, where, imports)


def note_unrouted_kernel(
    owner: str,
    func: ast.FunctionDef,
    path: str,
    facts: AttentionFacts,
    imports: list[ast.Import | ast.ImportFrom] | None = None,
) -> None:
    """An attention kernel other than SDPA in `func` (self-attention: its keys come from the
    queries' input): no CP backend reaches it, so CP is refused."""
    kernel = unrouted_kernel(func, imports)
    if kernel is None or keys_from_another_input(func, kernel) is not None:
        return
    facts.own_attention.append(unrouted_evidence(f"{owner} calls", kernel, "directly", path))


def unrouted_evidence(who: str, kernel: ast.Call, how: str, path: str) -> Evidence:
    """Why an attention kernel no CP backend reaches refuses CP."""
    return Evidence(
        f"{who} `{callee_name(kernel)}` {how}: only SDPA and plain `flash_attn_func(q, k, v)` "
        "calls are routed through cache-dit's context-parallel attention, so under context "
        "parallelism it would attend over this rank's tokens only",
        path,
        kernel.lineno,
    )


def note_block_sdpa(
    block: ClassRef,
    forward: ast.FunctionDef,
    call: ast.Call,
    sdpa: ast.Call,
    path: str,
    facts: AttentionFacts,
) -> None:
    """A block's `forward` running attention itself: `call` (SDPA, or the function of its file
    that calls `sdpa`) in `forward`. Self-attention is routed with the block class as the
    module; keys from another input than the queries stay local."""
    other = keys_from_another_input(forward, call)
    if other is not None:
        _stays_local(block.name, other, path, call, facts)
        return
    via = "" if call is sdpa else f" (through `{callee_name(call)}(...)`)"
    where = Evidence(
        f"{block.name}.forward calls F.scaled_dot_product_attention{via}: route it to "
        "cache-dit's _dispatch_attention_fn so attention runs the all-to-all",
        path,
        call.lineno,
    )
    needs_route(facts, block, "forward", sdpa, where)


def _note_mask_build(processor: ClassRef, path: str, node: ast.Call, facts: AttentionFacts) -> None:
    """A mask the processor builds or pads from the lengths it sees."""
    name = callee_name(node)
    if name == "prepare_attention_mask" or (
        name in ("cat", "concat", "pad", "ones", "ones_like", "full")
        and any("mask" in n.lower() for n in names_read(node))
    ):
        facts.masks.append(
            Evidence(
                f"{processor.name} builds or pads the attention mask from the lengths it sees "
                "(`" + short_text(node) + "`); under CP keys are gathered to full length, so "
                "patch it to build the mask for the gathered sequence",
                path,
                node.lineno,
            )
        )


def _note_own_attention(
    processor: ClassRef, attr: str, call_method: ast.FunctionDef, path: str, facts: AttentionFacts
) -> None:
    """Attention computed by hand (no kernel a context-parallel backend could run). Beside a
    kernel call, the hand-computed branch counts unless its condition is a flag of the class set
    to a constant that turns it off (`self.fused_attn = True` ... `if self.fused_attn: sdpa else:
    q @ k.T`); a flag known only at run time (`use_fused_attn()`) counts."""
    own = own_attention_product(call_method)
    if own is None:
        return
    kernels = any(
        isinstance(n, ast.Call) and callee_name(n) in ATTENTION_KERNELS
        for n in walk_local(call_method)
    )
    when = ""
    if kernels:
        branch = _branch_of(call_method, own)
        if branch is None:
            return  # beside a kernel outside any branch: not the attention itself
        test, taken_when = branch
        value = _flag_value(processor, test)
        if value is not None and bool(value) != taken_when:
            return  # the hand-computed branch is off with the class's own setting
        if value is None and _pin_kernel_branch(processor, test, taken_when, facts):
            return  # set at run time: the generated module pins the kernel branch
        when = f" when `{ast.unparse(test)}` is {taken_when}" + (
            "" if value is not None else " (known only at run time)"
        )
    facts.own_attention.append(
        Evidence(
            f"`{attr}` ({processor.name}) computes attention itself{when} "
            f"(`{short_text(own)}`), not through an attention kernel: under context "
            "parallelism it would attend over this rank's tokens only",
            path,
            own.lineno,
        )
    )


def _pin_kernel_branch(
    cls: ClassRef, test: ast.expr, hand_when: bool, facts: AttentionFacts
) -> bool:
    """`if self.flag:` chooses between the routed kernel and a hand-computed attention with a
    flag set at run time: the class's route pins the flag to the kernel's side (the generated
    module sets it on every routed module). False when the class has no route or the test is
    not a plain flag."""
    negate = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    attr = self_attr(test.operand if isinstance(test, ast.UnaryOp) else test)
    index = next((i for i, r in enumerate(facts.sdpa_routes) if r.class_name == cls.name), None)
    if attr is None or index is None:
        return False
    kernel_value = (not hand_when) != negate  # the flag value that runs the kernel branch
    route = facts.sdpa_routes[index]
    flags = tuple(dict.fromkeys((*route.kernel_flags, (attr, kernel_value))))
    facts.sdpa_routes[index] = replace(route, kernel_flags=flags)
    return True


def _branch_of(func: ast.FunctionDef, node: ast.AST) -> tuple[ast.expr, bool] | None:
    """The test of the innermost `if` holding `node`, and whether `node` runs when it is true."""
    found: tuple[ast.expr, bool] | None = None
    for stmt in walk_local(func):
        if not isinstance(stmt, ast.If):
            continue
        for taken, body in ((True, stmt.body), (False, stmt.orelse)):
            if any(n is node for part in body for n in walk(part)):
                found = (stmt.test, taken)  # deeper ifs come later in the walk
    return found


def _flag_value(cls: ClassRef, test: ast.expr) -> object | None:
    """`self.flag` / `not self.flag` where the class's `__init__` sets `self.flag = <constant>`
    (once): the test's value; None when not known."""
    negate = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    attr = self_attr(test.operand if isinstance(test, ast.UnaryOp) else test)
    init = next(
        (
            s
            for s in (cls.node.body if cls.node is not None else [])
            if isinstance(s, ast.FunctionDef) and s.name == "__init__"
        ),
        None,
    )
    if attr is None or init is None:
        return None
    values = [
        n.value
        for n in walk_local(init)
        if isinstance(n, ast.Assign) and any(self_attr(t) == attr for t in n.targets)
    ]
    if len(values) != 1 or not isinstance(values[0], ast.Constant):
        return None
    return (not values[0].value) if negate else values[0].value


def keys_from_another_input(func: ast.FunctionDef, call: ast.Call) -> str | None:
    """The parameter of `func` the keys of `call` (an SDPA call) derive from when the queries do
    not (cross-attention in a plain module's forward); None for self-attention or when unsure."""
    args = {k.arg: k.value for k in call.keywords if k.arg}
    query = call.args[0] if call.args else args.get("query")
    key = call.args[1] if len(call.args) > 1 else args.get("key")
    if query is None or key is None:
        return None
    from_query, from_key = param_origins(func, query), param_origins(func, key)
    # keys that may also come from the queries' input (`context if context is not None else x`)
    # are self-attention on some calls: not local
    return sorted(from_key)[0] if from_query and from_key and not from_key & from_query else None


def param_origins(func: ast.FunctionDef, expr: ast.AST) -> set[str]:
    """The parameters of `func` whose data `expr` carries (through its assignments)."""
    params = [a.arg for a in func.args.args[1:] + func.args.kwonlyargs]
    sources: dict[str, set[str]] = {}
    for node in walk_local(func):
        if isinstance(node, ast.Assign):
            read = data_names(node.value)  # `b = x.size(0)` carries no data of `x`
            for target in node.targets:
                for name in walk(target):
                    if isinstance(name, ast.Name):
                        sources.setdefault(name.id, set()).update(read)
    seen: set[str] = set()
    todo = list(names_read(expr))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += sources.get(name, ())
    return {n for n in seen if n in params}


def _note_sdpa_route(
    facts: AttentionFacts,
    class_name: str,
    method: str,
    call: ast.Call,
    where: Evidence,
    imports: list[ast.Import | ast.ImportFrom] | None = None,
) -> None:
    names = (call.func.id,) if isinstance(call.func, ast.Name) else ()
    flash = tuple(n for n in names if imports is not None and n in flash_names(imports))
    owner = "processor" if method == "__call__" else "module"
    for i, route in enumerate(facts.sdpa_routes):
        if route.class_name == class_name:
            merged = tuple(dict.fromkeys(route.names + names))
            both = tuple(dict.fromkeys(route.flash_names + flash))
            facts.sdpa_routes[i] = SdpaRoute(class_name, owner, merged, route.evidence, both)
            return
    facts.sdpa_routes.append(SdpaRoute(class_name, owner, names, where, flash))
