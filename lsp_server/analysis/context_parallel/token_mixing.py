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
from dataclasses import dataclass

from ..astutil import (
    call_name,
    declared_params,
    int_literal,
    param_defaults,
    self_attr,
    short_text,
    walk_local,
)
from ..model import Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from ..sources import ClassRef

_SELECTIONS = ("topk", "kthvalue", "sort", "argsort")


@dataclass(frozen=True)
class TokenChoice:
    """Where a block's module selects among the tokens, and under which `__init__` condition."""

    evidence: Evidence
    condition: str | None


def token_choice_refusals(
    ctx: ParallelContext, block: ParallelBlockList
) -> tuple[list[Evidence], list[Evidence]]:
    """(refusals, cautions): a selection in a module built unconditionally, or under a condition
    that holds in this configuration (config.json, else the transformer's default), refuses; one
    under a condition that does not hold is absent; one whose condition is not read cautions."""
    refusals: list[Evidence] = []
    cautions: list[Evidence] = []
    for choice in token_choices(ctx, block):
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
    """A bare flag's value: config.json's, else the transformer `__init__`'s default, else (when
    the transformer builds the blocks without passing it) the block `__init__`'s default."""
    if not condition.isidentifier():
        return None
    if ctx.config is not None and condition in ctx.config:
        return bool(ctx.config[condition])
    if ctx.init is not None:
        default = param_defaults(ctx.init).get(condition)
        if isinstance(default, ast.Constant):
            return bool(default.value)
        builds = [
            n
            for n in walk_local(ctx.init)
            if isinstance(n, ast.Call) and call_name(n).split(".")[-1] == block.block.name
        ]
        init = ctx.resolver.find_method(block.block, "__init__")
        params = declared_params(init[0]) if init is not None else []
        place = params.index(condition) if condition in params else len(params)
        passed = any(
            any(k.arg in (condition, None) for k in n.keywords) or len(n.args) > place
            for n in builds
        )
        if builds and init is not None and not passed:
            own = param_defaults(init[0]).get(condition)
            if isinstance(own, ast.Constant):
                return bool(own.value)
    return None


def token_choices(ctx: ParallelContext, block: ParallelBlockList) -> list[TokenChoice]:
    """Selections over the tokens a block's (sub)modules make outside attention."""
    found: list[TokenChoice] = []
    _scan(ctx, block.block, None, found, 0, set())
    return found


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
        func = forward[0]
        source = forward[1].source or cls.source
        path = str(source.path) if source is not None else ctx.path

        def report(line: int, message: str, cond: str | None = None) -> None:
            found.append(TokenChoice(Evidence(f"{cls.name} {message}", path, line), cond))

        causal = _causal_attention(func)
        if causal is not None and causal[2] is not None:  # a flag: whether it holds is not read
            report(causal[0], causal[1], condition or causal[2])
        local = _local_positions(func) or (
            causal[:2] if causal is not None and causal[2] is None else None
        )
        if local is None and not attention_only:  # an attention module's own work: its readers'
            local = (
                (_token_relayout(func) if depth == 0 else None)  # the block's own stream
                or _token_convolution(ctx, cls, func)
                or _token_norm(ctx, cls, func)
                or _own_tokens(func)
            )
        if local is not None:
            guard = _optional_guard(func, local[0])  # work only with an optional input
            report(local[0], local[1], condition or guard)
            if guard is None:
                return
        if not attention_only:
            reduced = token_reduction(func.body, _first_param(func))
            if reduced is not None:
                report(
                    reduced.lineno,
                    f"reduces over the tokens it sees (`{short_text(reduced)}`): under a token "
                    "split each rank would reduce over its own tokens",
                    condition,
                )
                return
            hit = _selection(func)
            if hit is not None:
                report(
                    hit.lineno,
                    f"picks among the tokens it sees (`{short_text(hit)}`, its size from the "
                    "sequence length): under a token split each rank would pick among its own "
                    "tokens",
                    condition,
                )
                return
    init = ctx.resolver.find_method(cls, "__init__")
    if init is None:
        return
    func, owner = init
    source = owner.source or ctx.source
    for node, test in _module_assigns(func):
        attr = next((self_attr(t) for t in node.targets if self_attr(t)), None)
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
            if attr is None or sub.node is None:
                continue
            cond = condition or (ast.unparse(branch_test) if branch_test is not None else None)
            inner_attention = attention_only or _is_attention_like(sub)
            _scan(ctx, sub, cond, found, depth + 1, seen, inner_attention)


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
        if any(_names(a) & lengths for a in sized):
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
                _axis_one_of(value, stream) or (_names(value) & lengths)
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


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


_REDUCTIONS = (
    "mean",
    "sum",
    "amax",
    "amin",
    "max",
    "min",
    "std",
    "var",
    "logsumexp",
    "norm",
    "prod",
    "cumsum",
    "softmax",
    "log_softmax",
)
# calls after which a value's axis 1 may no longer be the tokens'
_LAYOUT = (
    "reshape",
    "view",
    "transpose",
    "permute",
    "flatten",
    "unflatten",
    "movedim",
    "swapaxes",
    "einsum",
    "rearrange",
    "unbind",
    "cat",
    "stack",
    "index_select",
    "gather",
    "scaled_dot_product_attention",
    "matmul",
    "bmm",
)


def _first_param(func: ast.FunctionDef) -> str | None:
    params = declared_params(func)
    return params[0] if params else None


def token_reduction(body: list[ast.stmt], stream: str | None) -> ast.Call | None:
    """A reduction over axis 1 (or -2) of the batch-first token stream `stream` or a value made
    from it by token-local work (element-wise math, module calls; no reshape or transpose):
    `x.mean(dim=1)`, `torch.sum(h, 1)`, `F.softmax(x, dim=1)`, whose result flows back into the
    stream (an auxiliary loss returned beside it does not count). The first in source order."""
    if stream is None:
        return None
    tracked = {stream}
    reduced: dict[str, ast.Call] = {}  # names holding a token reduction -> the reduction
    statements = sorted(
        (n for stmt in body for n in walk_local(stmt) if isinstance(n, ast.stmt)),
        key=lambda n: (n.lineno, n.col_offset),
    )
    for stmt in statements:
        value = stmt.value if isinstance(stmt, ast.Assign | ast.AugAssign | ast.Return) else None
        if value is None:
            continue
        if isinstance(stmt, ast.Return) and isinstance(value, ast.Tuple) and value.elts:
            value = value.elts[0]  # the stream; the rest (an aux loss) is not the tokens
        hit = reduction_in(value, tracked)
        carried = next((reduced[n] for n in sorted(_names(value)) if n in reduced), None)
        hit = hit or carried
        targets = (
            {n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if isinstance(stmt, ast.Assign)
            else {stmt.target.id}
            if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name)
            else set()
        )
        if hit is not None and (isinstance(stmt, ast.Return) or targets & tracked):
            return hit  # it reaches the stream
        if hit is not None:
            reduced.update(dict.fromkeys(targets, hit))
        elif _names(value) & tracked and not _relayouts(value):
            tracked |= targets
    return None


def reduction_in(value: ast.expr, tracked: set[str]) -> ast.Call | None:
    for node in ast.walk(value):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name = node.func.attr
        if name not in _REDUCTIONS:
            continue
        on_torch = isinstance(node.func.value, ast.Name) and node.func.value.id in ("torch", "F")
        if on_torch:
            operand = node.args[0] if node.args else None
            dim_node = node.args[1] if len(node.args) > 1 else None
        else:
            operand = node.func.value
            dim_node = node.args[0] if node.args else None
        dim_node = next((k.value for k in node.keywords if k.arg in ("dim", "axis")), dim_node)
        if operand is None or dim_node is None or not _plain_of(operand, tracked):
            continue
        dims = dim_node.elts if isinstance(dim_node, ast.Tuple | ast.List) else [dim_node]
        if any(int_literal(d) in (1, -2) for d in dims):
            return node
    return None


def _plain_of(operand: ast.expr, tracked: set[str]) -> bool:
    """A tracked name, or token-local work on one (no relayout)."""
    return bool(_names(operand) & tracked) and not _relayouts(operand)


def _relayouts(value: ast.expr) -> bool:
    return any(
        isinstance(n, ast.Call) and call_name(n).split(".")[-1] in _LAYOUT for n in ast.walk(value)
    ) or any(isinstance(n, ast.Subscript) for n in ast.walk(value))


def _local_positions(func: ast.FunctionDef) -> tuple[int, str] | None:
    """`torch.arange(n)` over a length read from axis 1 or -2 of a parameter (`n = q.shape[-2]`,
    `x.size(1)`): positions counted from the tokens this module sees. (line, message)"""
    params = set(declared_params(func))
    lengths: set[str] = set()
    for node in sorted(
        (n for n in walk_local(func) if isinstance(n, ast.Assign)), key=lambda n: n.lineno
    ):
        if _token_length_read(node.value, params) or _names(node.value) & lengths:
            lengths |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for target in node.targets:  # `b, n, d = x.shape`
            if (
                isinstance(target, ast.Tuple)
                and len(target.elts) == 3
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "shape"
                and _names(node.value) & params
                and isinstance(target.elts[1], ast.Name)
            ):
                lengths.add(target.elts[1].id)
    for node in walk_local(func):
        if isinstance(node, ast.Call) and call_name(node).split(".")[-1] == "arange":
            sized = node.args[1:2] if len(node.args) > 1 else node.args[:1]
            if any(_names(a) & lengths or _token_length_read(a, params) for a in sized):
                return node.lineno, (
                    f"counts positions from the tokens it sees (`{short_text(node)}`): under a "
                    "token split every rank would count its own tokens from 0"
                )
    return None


def _token_length_read(value: ast.expr, params: set[str]) -> bool:
    """`x.shape[1]`, `q.shape[-2]`, `x.size(1)`, `x.size(-2)` of a parameter."""
    for node in ast.walk(value):
        axis: ast.expr | None = None
        owner: ast.expr | None = None
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "shape"
        ):
            axis, owner = node.slice, node.value.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "size"
            and len(node.args) == 1
        ):
            axis, owner = node.args[0], node.func.value
        if axis is not None and owner is not None and int_literal(axis) in (1, -2):
            return bool(_names(owner) & params)
    return False


_CONVS = ("Conv1d", "Conv2d", "Conv3d")


def _token_convolution(
    ctx: ParallelContext, cls: ClassRef, forward: ast.FunctionDef
) -> tuple[int, str] | None:
    """A convolution with a kernel wider than 1 that the module builds and calls in `forward`:
    it mixes neighbouring tokens (Mix-FFN, depthwise token convolutions)."""
    init = ctx.resolver.find_method(cls, "__init__")
    if init is None:
        return None
    wide: dict[str, str] = {}
    for node in walk_local(init[0]):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        if call_name(node.value).split(".")[-1] not in _CONVS:
            continue
        kernel = node.value.args[2] if len(node.value.args) > 2 else None
        kernel = next((k.value for k in node.value.keywords if k.arg == "kernel_size"), kernel)
        sizes = kernel.elts if isinstance(kernel, ast.Tuple) else [kernel] if kernel else []
        if sizes and all(int_literal(k) == 1 for k in sizes):
            continue  # a 1x1 convolution is a per-token projection
        for target in node.targets:
            if (attr := self_attr(target)) is not None:
                wide[attr] = short_text(node.value)
    for node in walk_local(forward):
        if isinstance(node, ast.Call) and (attr := self_attr(node.func)) in wide:
            return node.lineno, (
                f"convolves neighbouring tokens (`self.{attr}` = `{wide[attr]}`): under a "
                "token split the tokens at each rank's edges would miss their neighbours"
            )
    return None


def _causal_attention(func: ast.FunctionDef) -> tuple[int, str, str | None] | None:
    """`scaled_dot_product_attention(..., is_causal=<not False>)`: cache-dit 1.5.3's
    context-parallel attention stops on it ("Causal attention is not yet supported for templated
    attention"). (line, message, the flag's text when it is not a constant)."""
    for node in walk_local(func):
        if not (
            isinstance(node, ast.Call)
            and call_name(node).split(".")[-1] == "scaled_dot_product_attention"
        ):
            continue
        flag = next((k.value for k in node.keywords if k.arg == "is_causal"), None)
        if flag is None or (isinstance(flag, ast.Constant) and flag.value is False):
            continue
        message = (
            f"attends causally (`is_causal={ast.unparse(flag)}`): cache-dit 1.5.3's "
            'context-parallel attention stops on causal attention ("not yet supported for '
            'templated attention")'
        )
        return node.lineno, message, None if isinstance(flag, ast.Constant) else ast.unparse(flag)
    return None


_TOKEN_NORMS = ("GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "BatchNorm1d", "BatchNorm2d")


def _token_norm(
    ctx: ParallelContext, cls: ClassRef, forward: ast.FunctionDef
) -> tuple[int, str] | None:
    """A GroupNorm / InstanceNorm / BatchNorm the module builds and applies to its tokens laid
    out channels-first: its statistics run over every token."""
    init = ctx.resolver.find_method(cls, "__init__")
    if init is None:
        return None
    norms = {
        attr: call_name(node.value).split(".")[-1]
        for node in walk_local(init[0])
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and call_name(node.value).split(".")[-1] in _TOKEN_NORMS
        for target in node.targets
        if (attr := self_attr(target)) is not None
    }
    stream = _first_param(forward)
    if not norms or stream is None:
        return None
    for node in walk_local(forward):
        if (
            isinstance(node, ast.Call)
            and (attr := self_attr(node.func)) in norms
            and node.args
            and stream in _names(node.args[0])
        ):
            return node.lineno, (
                f"normalises its tokens with a {norms[attr]} (`self.{attr}`), whose statistics "
                "run over every token: under a token split each rank would use its own"
            )
    return None


def _own_tokens(func: ast.FunctionDef) -> tuple[int, str] | None:
    """`torch.cat([self.reg.expand(b, -1, -1), x], dim=1)`: tokens of the module's own (a
    parameter, a buffer, a new tensor) joined to the token stream: under a token split every
    rank would add them, and the attention would see one copy per rank."""
    stream = _first_param(func)
    if stream is None:
        return None
    for node in walk_local(func):
        if not (
            isinstance(node, ast.Call)
            and call_name(node).split(".")[-1] in ("cat", "concat", "concatenate")
            and node.args
            and isinstance(node.args[0], ast.List | ast.Tuple)
        ):
            continue
        dim = node.args[1] if len(node.args) > 1 else None
        dim = next((k.value for k in node.keywords if k.arg in ("dim", "axis")), dim)
        if int_literal(dim) not in (1, -2):
            continue
        parts = node.args[0].elts
        own = [p for p in parts if _is_own_tensor(p)]
        if own and any(stream in _names(p) for p in parts if p not in own):
            return node.lineno, (
                f"joins tokens of its own to the stream (`{short_text(node)}`): under a token "
                "split every rank would add them, and attention would see one copy per rank"
            )
    return None


def _is_own_tensor(expr: ast.expr) -> bool:
    """`self.reg`, `self.reg.expand(b, -1, -1)`, `self.reg.repeat(...)`, `torch.zeros(...)`."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        if expr.func.attr in ("expand", "repeat", "to", "type_as", "expand_as"):
            expr = expr.func.value
            continue
        return call_name(expr).split(".")[-1] in ("zeros", "ones", "randn", "empty", "full")
    return self_attr(expr) is not None


def _token_relayout(func: ast.FunctionDef) -> tuple[int, str] | None:
    """A reshape of the token stream (or token-local work on it) that regroups its token axis:
    `x.reshape(b * self.frames, n // self.frames, d)`, `x.unflatten(1, (f, -1))`. A new shape that
    starts with the batch and then the token length (or -1), as head splits do, keeps the tokens.
    Under a token split the regrouped axis would mix each rank's slice into wrong groups."""
    stream = _first_param(func)
    if stream is None:
        return None
    batch, length = (
        {f"{stream}.shape[0]", f"{stream}.size(0)"},
        {
            f"{stream}.shape[1]",
            f"{stream}.size(1)",
        },
    )
    tracked = {stream}
    measured: set[str] = set()  # lengths read from a parameter's shape: local under a split
    statements = sorted(
        (n for n in walk_local(func) if isinstance(n, ast.Assign)), key=lambda n: n.lineno
    )
    for stmt in statements:
        target = stmt.targets[0] if len(stmt.targets) == 1 else None
        if (
            isinstance(target, ast.Tuple)
            and len(target.elts) == 3
            and isinstance(stmt.value, ast.Attribute)
            and stmt.value.attr == "shape"
            and isinstance(stmt.value.value, ast.Name)
            and stmt.value.value.id == stream
        ):
            first, second = target.elts[0], target.elts[1]
            if isinstance(first, ast.Name):
                batch.add(first.id)
            if isinstance(second, ast.Name):
                length.add(second.id)
            continue
        hit = _regroup(stmt.value, tracked, batch, length)
        if hit is not None:
            return hit.lineno, (
                f"regroups the tokens it sees (`{short_text(hit)}`): under a token split each "
                "rank's slice would be cut into the wrong groups"
            )
        if isinstance(target, ast.Name) and _measured(stmt.value, func):
            measured.add(target.id)
        cut = _fixed_token_slice(stmt.value, tracked, measured)
        if cut is not None:
            return cut.lineno, (
                f"takes fixed token positions (`{short_text(cut)}`): under a token split each "
                "rank holds other tokens at those positions"
            )
        if _names(stmt.value) & tracked and not _relayouts_of(stmt.value, tracked):
            tracked |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return None


def _relayouts_of(value: ast.expr, tracked: set[str]) -> bool:
    """A relayout call or a subscript applied to a tracked value (`c[:, None]` beside it is
    fine)."""
    for node in ast.walk(value):
        if isinstance(node, ast.Subscript) and _names(node.value) & tracked:
            return True
        if (
            isinstance(node, ast.Call)
            and call_name(node).split(".")[-1] in _LAYOUT
            and any(_names(a) & tracked for a in [node.func, *node.args])
        ):
            return True
    return False


def _regroup(
    value: ast.expr, tracked: set[str], batch: set[str], length: set[str]
) -> ast.Call | None:
    for node in ast.walk(value):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if not (isinstance(owner, ast.Name) and owner.id in tracked):
            continue
        name = node.func.attr
        if name == "unflatten" and node.args and int_literal(node.args[0]) in (1, -2):
            return node
        if name not in ("reshape", "view") or not node.args:
            continue
        sizes = list(node.args)
        if len(sizes) == 1 and isinstance(sizes[0], ast.Tuple | ast.List):
            sizes = list(sizes[0].elts)
        if len(sizes) < 2 or any(isinstance(a, ast.Starred) for a in sizes):
            continue
        first, second = (ast.unparse(a) for a in sizes[:2])
        if first in batch and (second in length or second == "-1"):
            continue  # batch, tokens, then features (heads)
        if len(sizes) == 2 and (first == "-1" or _is_product(sizes[0], batch, length)):
            continue  # one row per token (`reshape(b * n, d)`): each token stays whole
        return node
    return None


def _is_product(size: ast.expr, batch: set[str], length: set[str]) -> bool:
    return (
        isinstance(size, ast.BinOp)
        and isinstance(size.op, ast.Mult)
        and {ast.unparse(size.left), ast.unparse(size.right)} & batch != set()
        and {ast.unparse(size.left), ast.unparse(size.right)} & length != set()
    )


def _measured(value: ast.expr, func: ast.FunctionDef) -> bool:
    """A length read from a parameter's shape (`t.shape[1]`, `t.size(1)`): local under a split,
    so cutting the stream at it stays consistent (a joint stream cut back at the text length)."""
    params = set(declared_params(func))
    return any(
        (isinstance(n, ast.Attribute) and n.attr == "shape" and _names(n.value) & params)
        or (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "size"
            and _names(n.func.value) & params
        )
        for n in ast.walk(value)
    )


def _fixed_token_slice(
    value: ast.expr, tracked: set[str], measured: set[str]
) -> ast.Subscript | None:
    """`x[:, : self.ref_tokens]`, `x[:, 4:]`: the stream's token axis cut at positions that do not
    come from a length the block measured."""
    for node in ast.walk(value):
        if not (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id in tracked
            and isinstance(node.slice, ast.Tuple)
            and len(node.slice.elts) >= 2
        ):
            continue
        first, tokens = node.slice.elts[0], node.slice.elts[1]
        if not (isinstance(first, ast.Slice) and first.lower is None and first.upper is None):
            continue
        if not isinstance(tokens, ast.Slice):
            continue
        bounds = [b for b in (tokens.lower, tokens.upper) if b is not None]
        if bounds and not any(
            _names(b) & measured
            or any(isinstance(n, ast.Attribute) and n.attr == "shape" for n in ast.walk(b))
            for b in bounds
        ):
            return node
    return None


def _optional_guard(func: ast.FunctionDef, line: int) -> str | None:
    """`if local_seq is not None:` around `line`, for a parameter that defaults to None: the work
    runs only when the caller passes it (a caution, not a refusal)."""
    optional = {
        name
        for name, default in param_defaults(func).items()
        if isinstance(default, ast.Constant) and default.value is None
    }
    for node in walk_local(func):
        if not isinstance(node, ast.If) or not node.body:
            continue
        end = getattr(node.body[-1], "end_lineno", node.body[-1].lineno) or node.lineno
        if not node.body[0].lineno <= line <= end:
            continue
        test = node.test
        if (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id in optional
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.IsNot)
        ) or (isinstance(test, ast.Name) and test.id in optional):
            return ast.unparse(test)
    return None
