"""Work outside attention that chooses among the tokens a block sees.

Expert-choice mixture-of-experts layers let every expert pick its `capacity` best tokens, with
the capacity computed from the sequence length (`capacity = factor * seq_len / num_experts`,
`torch.topk(affinity, k=capacity, dim=-1)` over the tokens). Under a token split each rank's
experts pick among that rank's tokens only, with a capacity from the local length: a different
computation, which no hook makes whole. Found in the block's own `forward` and in the forwards
of the modules it builds (two levels down); attention modules are left to the attention readers.

A module built unconditionally refuses context parallelism. One built under a condition of the
block's `__init__` (`if moe_enabled:`) only in some configurations: a caution naming the
condition, since whether it exists is a configuration fact.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from ..astutil import (
    call_name,
    declared_params,
    names_read,
    param_defaults,
    run_memo,
    self_attr,
    short_text,
    walk_local,
)
from ..model import Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from ..sources import ClassRef, SourceFile
from .attention_facts import sdpa_names
from .called_functions import Caller, module_caller
from .called_reductions import called_reduction
from .called_windows import called_windows
from .constant_branches import truth
from .injected_modules import injected_modules
from .kernel_tables import kernel_table
from .token_axis_ops import token_axis_work
from .token_reductions import SHIFTS, names, token_reduction
from .token_resampling import token_resampling
from .token_windows import token_windows
from .token_work import (
    causal_attention,
    first_param,
    local_positions,
    optional_guard,
    own_table_cut,
    own_tokens,
    token_convolution,
    token_norm,
    token_relayout,
)

_SELECTIONS = ("topk", "kthvalue", "sort", "argsort")


@dataclass(frozen=True)
class TokenChoice:
    """Where a block's module selects among the tokens, and under which `__init__` condition."""

    evidence: Evidence
    condition: str | None


def token_choice_refusals(
    ctx: ParallelContext, blocks: list[ParallelBlockList]
) -> tuple[list[Evidence], list[Evidence]]:
    """(refusals, cautions) of the lists `blocks` (each block class read once): a selection in
    a module built unconditionally, or under a condition that holds in this configuration
    (config.json, else the transformer's default), refuses; one under a condition that does not
    hold is absent; one whose condition is not read cautions."""
    refusals: list[Evidence] = []
    cautions: list[Evidence] = []
    read: set[str] = set()
    choices = []
    for block in blocks:
        if block.block.name not in read:
            read.add(block.block.name)
            choices += [(block, choice) for choice in token_choices(ctx, block)]
    for block, choice in choices:
        if choice.condition is None:
            refusals.append(_refusal(choice.evidence, ""))
            continue
        value = _condition_value(ctx, block, choice.condition)
        if value is True:
            refusals.append(_refusal(choice.evidence, f" (`{choice.condition}` holds here)"))
        elif value is None:
            cautions.append(
                Evidence(
                    f"with `{choice.condition}` (a condition in the block's code): "
                    f"{choice.evidence.message}; context parallelism would then differ from one "
                    "process",
                    choice.evidence.path,
                    choice.evidence.line,
                )
            )
    return refusals, cautions


def _refusal(evidence: Evidence, why: str) -> Evidence:
    return Evidence(
        f"{evidence.message}{why}: context parallelism is not generated",
        evidence.path,
        evidence.line,
    )


def _condition_value(ctx: ParallelContext, block: ParallelBlockList, condition: str) -> bool | None:
    """A bare flag, or a flag compared with a constant (`positional_embeddings == "sinusoidal"`,
    `norm is not None`), evaluated with the flag's value (`_flag_value`); None when not read."""
    try:
        test = ast.parse(condition, mode="eval").body
    except SyntaxError:
        return None
    flags: dict[str, object] = {}
    for name in names_read(test):
        found = _flag_value(ctx, block, name)
        if found is not None:
            flags[name] = found[0]
    return truth(test, flags)


def _flag_value(ctx: ParallelContext, block: ParallelBlockList, name: str) -> tuple[object] | None:
    """A flag's value (in a 1-tuple: it may be None): config.json's, else the transformer
    `__init__`'s default, else (when the transformer builds the blocks without passing it) the
    block `__init__`'s default."""
    if ctx.config is not None and name in ctx.config:
        return (ctx.config[name],)
    if ctx.init is None:
        return None
    default = param_defaults(ctx.init).get(name)
    if isinstance(default, ast.Constant):
        return (default.value,)
    builds = [
        n
        for n in walk_local(ctx.init)
        if isinstance(n, ast.Call) and call_name(n).split(".")[-1] == block.block.name
    ]
    init = ctx.resolver.find_method(block.block, "__init__")
    params = declared_params(init[0]) if init is not None else []
    place = params.index(name) if name in params else len(params)
    passed = any(
        any(k.arg in (name, None) for k in n.keywords) or len(n.args) > place for n in builds
    )
    if builds and init is not None and not passed:
        own = param_defaults(init[0]).get(name)
        if isinstance(own, ast.Constant):
            return (own.value,)
    return None


def token_choices(ctx: ParallelContext, block: ParallelBlockList) -> list[TokenChoice]:
    """Selections over the tokens a block's (sub)modules make outside attention (read once per
    block class and analysis run: a frame split reads its routed lists again)."""
    memo = run_memo("token_choices")
    # what a block is handed depends on the transformer building it (`injected_modules`)
    key = (id(block.block.node), id(ctx.transformer.node), id(ctx.resolver))
    if memo is not None and key in memo:
        return list(memo[key])
    found: list[TokenChoice] = []
    _scan(ctx, block.block, None, found, 0, set())
    if memo is not None and block.block.node is not None:
        memo[key] = list(found)
    return found


def attention_token_work(ctx: ParallelContext, cls: ClassRef) -> list[Evidence]:
    """What an attention module `cls` does to the tokens it sees besides attending (positions it
    counts from its own length, a table cut to it, causal attention, kernels from a table,
    windows), read as for a token split: refusals, one built under a condition included."""
    found: list[TokenChoice] = []
    _scan(ctx, cls, None, found, 0, set(), attention_only=True)
    return [_refusal(c.evidence, f" (with `{c.condition}`)" if c.condition else "") for c in found]


def _scan(
    ctx: ParallelContext,
    cls: ClassRef,
    condition: str | None,
    found: list[TokenChoice],
    depth: int,
    seen: set[str],
    attention_only: bool = False,
) -> None:
    """Attention modules (`attention_only`) are read for positions they count themselves only:
    the rest of their work is the attention readers'."""
    if cls.node is None or cls.name in seen or depth > 2:
        return
    seen.add(cls.name)
    forward = ctx.resolver.find_method(cls, "forward")
    if forward is not None:
        source = forward[1].source or cls.source
        path = str(source.path) if source is not None else ctx.path

        def report(line: int, message: str, cond: str | None = None) -> None:
            found.append(TokenChoice(Evidence(f"{cls.name} {message}", path, line), cond))

        if _read_forward(ctx, cls, forward[0], report, condition, depth, attention_only):
            return
    for sub, cond in _built_modules(ctx, cls, condition):
        inner_attention = attention_only or _is_attention_like(sub)
        _scan(ctx, sub, cond, found, depth + 1, seen, inner_attention)


def _read_forward(
    ctx: ParallelContext,
    cls: ClassRef,
    func: ast.FunctionDef,
    report: Callable[..., None],
    condition: str | None,
    depth: int,
    attention_only: bool,
) -> bool:
    """Report what `func` does to the tokens it sees; True when that settles the module (its
    submodules are not read)."""
    source = cls.source or ctx.source
    aliases = frozenset(sdpa_names(source.import_statements())) if source else frozenset()
    causal = causal_attention(func, aliases)
    if causal is not None and causal[2] is not None:  # a flag: whether it holds is not read
        report(causal[0], causal[1], condition or causal[2])
    local = (
        local_positions(func)
        or own_table_cut(func)
        or (causal[:2] if causal is not None and causal[2] is None else None)
    )
    if local is None and not attention_only:  # an attention module's own work: its readers'
        local = (
            (token_relayout(func) if depth == 0 else None)  # the block's own stream
            or token_norm(ctx, cls, func)
            or own_tokens(func)
        )
    caller = module_caller(ctx, cls, func)
    stream = first_param(func)
    # attention modules too: their q, k, v, also in the functions they hand them to
    local = (
        local
        or kernel_table(ctx, cls, func)
        or token_convolution(ctx, cls, func)
        or token_resampling(ctx, cls, func)
        or token_windows(func)
        or called_windows(ctx, caller, stream)
        or (token_axis_work(ctx, cls, func, attention=True) if attention_only else None)
    )
    if local is not None:
        guard = optional_guard(func, local[0])  # work only with an optional input
        report(local[0], local[1], condition or guard)
        if guard is None:
            return True
    if attention_only:
        return False
    found = _global_work(ctx, cls, func, caller, stream)
    if found is not None:
        report(*found, condition)
        return True
    return False


def _global_work(
    ctx: ParallelContext,
    cls: ClassRef,
    func: ast.FunctionDef,
    caller: Caller | None,
    stream: str | None,
) -> tuple[int, str] | None:
    """Work of a module outside attention over every token it sees (a reduction flowing back
    into the stream, also in a function it hands the tokens to; a selection sized by the
    sequence length; work along the token axis of its laid-out values): (line, message)."""
    reduced = token_reduction(func.body, stream)
    if reduced is not None and call_name(reduced).split(".")[-1] in SHIFTS:
        return reduced.lineno, (
            f"pairs each token with its neighbours (`{short_text(reduced)}`): under a token "
            "split the tokens at each rank's edge would meet this rank's own"
        )
    if reduced is not None:
        return reduced.lineno, (
            f"reduces over the tokens it sees (`{short_text(reduced)}`): under a token "
            "split each rank would reduce over its own tokens"
        )
    called = called_reduction(ctx, caller, stream)  # in a function it hands the tokens to
    if called is not None:
        return called
    hit = _selection(func)
    if hit is not None:
        return hit.lineno, (
            f"picks among the tokens it sees (`{short_text(hit)}`, its size from the "
            "sequence length): under a token split each rank would pick among its own tokens"
        )
    return token_axis_work(ctx, cls, func, attention=False)


def _built_modules(
    ctx: ParallelContext, cls: ClassRef, condition: str | None
) -> list[tuple[ClassRef, str | None]]:
    """The classes `cls.__init__` (and its bases' `__init__`) build as attributes, each with the
    condition it is built under (`if moe_enabled:`, either side of `A(d) if conv else B(d)`)."""
    out: list[tuple[ClassRef, str | None]] = []
    seen: set[str] = set()  # attributes a more derived `__init__` built
    for func, owner in ctx.resolver.init_methods(cls):
        source = owner.source or ctx.source
        here: set[str] = set()
        for node, test in _module_assigns(func):
            attr = next((self_attr(t) for t in node.targets if self_attr(t)), None)
            if attr is None or attr in seen:
                continue
            here.add(attr)
            out += _built_by(ctx, source, node, test, condition)
        seen |= here
    for module in injected_modules(ctx, cls).modules:  # handed in by whoever builds `cls`
        out += _built_by(ctx, module.source, module.assign, None, condition)
    return out


def _built_by(
    ctx: ParallelContext,
    source: SourceFile,
    node: ast.Assign,
    test: ast.expr | None,
    condition: str | None,
) -> list[tuple[ClassRef, str | None]]:
    """The classes one `self.<attr> = ...` builds, each with its condition."""
    out: list[tuple[ClassRef, str | None]] = []
    built: list[tuple[ast.Call, ast.expr | None]] = []
    if isinstance(node.value, ast.Call):
        built.append((node.value, test))
    elif isinstance(node.value, ast.IfExp):  # `MixFFN(d) if conv else nn.Sequential(...)`
        value = node.value
        if isinstance(value.body, ast.Call):
            built.append((value.body, test or value.test))
        if isinstance(value.orelse, ast.Call):
            negated = ast.UnaryOp(ast.Not(), value.test)
            built.append((value.orelse, test or negated))
    for call, branch_test in built:
        sub = ctx.resolver.resolve_class(source, call_name(call))
        if sub.node is None:
            continue
        cond = condition or (ast.unparse(branch_test) if branch_test is not None else None)
        out.append((sub, cond))
    return out


def _module_assigns(func: ast.FunctionDef) -> list[tuple[ast.Assign, ast.expr | None]]:
    """`self.x = Cls(...)` in `__init__`, each with the test of the `if` it sits under."""
    out: list[tuple[ast.Assign, ast.expr | None]] = []

    def visit(body: list[ast.stmt], test: ast.expr | None) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call | ast.IfExp):
                out.append((stmt, test))
            elif isinstance(stmt, ast.If):
                visit(stmt.body, stmt.test if test is None else test)
                visit(stmt.orelse, test)

    visit(func.body, None)
    return out


def _is_attention_like(cls: ClassRef) -> bool:
    name = cls.name.lower()
    return "attention" in name or "attn" in name


def _selection(func: ast.FunctionDef) -> ast.Call | None:
    """A `topk` (or sort) whose size comes from the token length of the forward's first input
    (`bs, slen, dim = x.shape` ... `capacity = f(slen)` ... `topk(a, k=capacity)`)."""
    params = declared_params(func)
    if not params:
        return None
    lengths = _token_lengths(func, params[0])
    if not lengths:
        return None
    for node in walk_local(func):
        if not (isinstance(node, ast.Call) and call_name(node).split(".")[-1] in _SELECTIONS):
            continue
        sized = [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "k")]
        if any(names(a) & lengths for a in sized):
            return node
    return None


def _token_lengths(func: ast.FunctionDef, stream: str) -> set[str]:
    """Locals holding the token length of `stream` (`_, n, _ = x.shape`, `n = x.shape[1]`,
    `x.size(1)`) and the locals computed from them."""
    lengths: set[str] = set()
    assigns = sorted(
        (n for n in walk_local(func) if isinstance(n, ast.Assign)), key=lambda n: n.lineno
    )
    for node in assigns:
        value = node.value
        for target in node.targets:
            if (
                isinstance(target, ast.Tuple)
                and len(target.elts) >= 2
                and _shape_of(value, stream)
                and isinstance(target.elts[1], ast.Name)
            ):
                lengths.add(target.elts[1].id)
            elif isinstance(target, ast.Name) and (
                _axis_one_of(value, stream) or (names(value) & lengths)
            ):
                lengths.add(target.id)
    return lengths


def _shape_of(value: ast.expr, stream: str) -> bool:
    """`x.shape` / `x.shape[:2]` / `x.size()` of `stream`."""
    if isinstance(value, ast.Subscript):
        value = value.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and not value.args:
        value = value.func if value.func.attr == "size" else value
    return (
        isinstance(value, ast.Attribute)
        and value.attr in ("shape", "size")
        and isinstance(value.value, ast.Name)
        and value.value.id == stream
    )


def _axis_one_of(value: ast.expr, stream: str) -> bool:
    """`x.shape[1]` / `x.size(1)` of `stream`."""
    if (
        isinstance(value, ast.Subscript)
        and isinstance(value.value, ast.Attribute)
        and value.value.attr == "shape"
        and isinstance(value.value.value, ast.Name)
        and value.value.value.id == stream
    ):
        return isinstance(value.slice, ast.Constant) and value.slice.value == 1
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "size"
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == stream
        and len(value.args) == 1
        and isinstance(value.args[0], ast.Constant)
        and value.args[0].value == 1
    )
