"""Token-local work a block (or a module it builds) does outside attention that a token split
would change: reductions over the tokens it sees, positions counted from its own length, causal
attention, convolutions and norms over the token axis, its own fixed tokens, regroups of the
stream. Each rule reads one `forward` and returns the line and what it found; `token_mixing`
walks the block's modules and decides refusal or caution."""

from __future__ import annotations

import ast

from ..astutil import (
    call_name,
    declared_params,
    int_literal,
    not_none_guards,
    param_defaults,
    self_attr,
    short_text,
    walk,
    walk_local,
)
from ..parallel_input import ParallelContext
from ..sources import ClassRef
from .token_reductions import LAYOUT, names


def first_param(func: ast.FunctionDef) -> str | None:
    params = declared_params(func)
    return params[0] if params else None


def local_positions(func: ast.FunctionDef) -> tuple[int, str] | None:
    """`torch.arange(n)` over a length read from axis 1 or -2 of a parameter (`n = q.shape[-2]`,
    `x.size(1)`): positions counted from the tokens this module sees. (line, message)"""
    params = set(declared_params(func))
    lengths = _token_lengths(func, params)
    for node in walk_local(func):
        if isinstance(node, ast.Call) and call_name(node).split(".")[-1] == "arange":
            sized = node.args[1:2] if len(node.args) > 1 else node.args[:1]
            if any(names(a) & lengths or token_length_read(a, params) for a in sized):
                return node.lineno, (
                    f"counts positions from the tokens it sees (`{short_text(node)}`): under a "
                    "token split every rank would count its own tokens from 0"
                )
    return None


def own_table_cut(func: ast.FunctionDef) -> tuple[int, str] | None:
    """`self.pos[:, : x.shape[1]]`, `self.freqs_cis[:n]` with `n` a token length of a parameter:
    rows of the module's own table (a learned position embedding, a precomputed rotary table)
    taken for the tokens it sees, from the first. Under a token split every rank would take the
    first rows, not those of its own tokens. (line, message)"""
    params = set(declared_params(func))
    lengths = _token_lengths(func, params)
    for node in walk_local(func):
        if not (isinstance(node, ast.Subscript) and _is_own(node.value)):
            continue
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for part in parts:
            if not isinstance(part, ast.Slice) or part.upper is None:
                continue
            if part.lower is not None and int_literal(part.lower) != 0:
                continue
            if names(part.upper) & lengths or token_length_read(part.upper, params):
                return node.lineno, (
                    f"takes rows of its own table for the tokens it sees, from the first "
                    f"(`{short_text(node)}`): under a token split every rank would take the "
                    "first rows, not those of its own tokens"
                )
    return None


def _is_own(value: ast.expr) -> bool:
    """`self.pos`, `self.rope.freqs`: a table the module (or one of its modules) holds."""
    while isinstance(value, ast.Attribute):
        if isinstance(value.value, ast.Name) and value.value.id == "self":
            return True
        value = value.value
    return False


def _token_lengths(func: ast.FunctionDef, params: set[str]) -> set[str]:
    """Names bound to a token length of a parameter (`n = x.shape[1]`, `b, n, d = x.shape`)."""
    lengths: set[str] = set()
    for node in sorted(
        (n for n in walk_local(func) if isinstance(n, ast.Assign)), key=lambda n: n.lineno
    ):
        if token_length_read(node.value, params) or names(node.value) & lengths:
            lengths |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for target in node.targets:
            if (
                isinstance(target, ast.Tuple)
                and len(target.elts) == 3
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "shape"
                and names(node.value) & params
                and isinstance(target.elts[1], ast.Name)
            ):
                lengths.add(target.elts[1].id)
    return lengths


def token_length_read(value: ast.expr, names_of: set[str], axes: tuple[int, ...] = (1, -2)) -> bool:
    """`x.shape[1]`, `q.shape[-2]`, `x.size(1)`, `x.size(-2)` of a value named in `names_of`
    (`axes`: where its tokens are, counted from the front and from the back)."""
    for node in walk(value):
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
        if (
            axis is not None
            and owner is not None
            and int_literal(axis) in axes
            and names(owner) & names_of
        ):
            return True
    return False


_CONVS = ("Conv1d", "Conv2d", "Conv3d")


def token_convolution(
    ctx: ParallelContext, cls: ClassRef, forward: ast.FunctionDef
) -> tuple[int, str] | None:
    """A convolution with a kernel wider than 1 that the module builds and calls in `forward`:
    it mixes neighbouring tokens (Mix-FFN, depthwise token convolutions)."""
    wide: dict[str, str] = {}
    # the bases' `__init__` first: a more derived one rebuilding an attribute replaces it
    for func, _ in reversed(ctx.resolver.init_methods(cls)):
        for node in walk_local(func):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            text = _wide_convolution(node.value)
            for target in node.targets:
                if (attr := self_attr(target)) is not None:
                    if text is None:
                        wide.pop(attr, None)
                    else:
                        wide[attr] = text
    for node in walk_local(forward):
        if isinstance(node, ast.Call) and (attr := self_attr(node.func)) in wide:
            return node.lineno, (
                f"convolves neighbouring tokens (`self.{attr}` = `{wide[attr]}`): under a "
                "token split the tokens at each rank's edges would miss their neighbours"
            )
    return None


def _wide_convolution(call: ast.Call) -> str | None:
    """The text of a convolution with a kernel wider than 1 (a 1x1 convolution is a per-token
    projection); None for anything else."""
    if call_name(call).split(".")[-1] not in _CONVS:
        return None
    kernel = call.args[2] if len(call.args) > 2 else None
    kernel = next((k.value for k in call.keywords if k.arg == "kernel_size"), kernel)
    sizes = kernel.elts if isinstance(kernel, ast.Tuple) else [kernel] if kernel else []
    if sizes and all(int_literal(k) == 1 for k in sizes):
        return None
    return short_text(call)


def causal_attention(
    func: ast.FunctionDef, aliases: frozenset[str] = frozenset()
) -> tuple[int, str, str | None] | None:
    """`scaled_dot_product_attention(..., is_causal=<not False>)` (also through a bare name the
    module binds to it, `aliases`): cache-dit 1.5.3's context-parallel attention stops on it
    ("Causal attention is not yet supported for templated attention"). (line, message, the
    flag's text when it is not a constant)."""
    for node in walk_local(func):
        if not (
            isinstance(node, ast.Call)
            and (
                call_name(node).split(".")[-1] == "scaled_dot_product_attention"
                or (isinstance(node.func, ast.Name) and node.func.id in aliases)
            )
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


def token_norm(
    ctx: ParallelContext, cls: ClassRef, forward: ast.FunctionDef
) -> tuple[int, str] | None:
    """A GroupNorm / InstanceNorm / BatchNorm the module builds and applies to its tokens laid
    out channels-first: its statistics run over every token."""
    inits = ctx.resolver.init_methods(cls)
    norms = {
        attr: call_name(node.value).split(".")[-1]
        for func, _ in reversed(inits)  # the most derived `__init__` last: its entries win
        for node in walk_local(func)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and call_name(node.value).split(".")[-1] in _TOKEN_NORMS
        for target in node.targets
        if (attr := self_attr(target)) is not None
    }
    stream = first_param(forward)
    if not norms or stream is None:
        return None
    for node in walk_local(forward):
        if (
            isinstance(node, ast.Call)
            and (attr := self_attr(node.func)) in norms
            and node.args
            and stream in names(node.args[0])
        ):
            return node.lineno, (
                f"normalises its tokens with a {norms[attr]} (`self.{attr}`), whose statistics "
                "run over every token: under a token split each rank would use its own"
            )
    return None


def own_tokens(func: ast.FunctionDef) -> tuple[int, str] | None:
    """`torch.cat([self.reg.expand(b, -1, -1), x], dim=1)`: tokens of the module's own (a
    parameter, a buffer, a new tensor) joined to the token stream: under a token split every
    rank would add them, and the attention would see one copy per rank."""
    stream = first_param(func)
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
        if own and any(stream in names(p) for p in parts if p not in own):
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


def token_relayout(func: ast.FunctionDef) -> tuple[int, str] | None:
    """A reshape of the token stream (or token-local work on it) that regroups its token axis:
    `x.reshape(b * self.frames, n // self.frames, d)`, `x.unflatten(1, (f, -1))`. A new shape that
    starts with the batch and then the token length (or -1), as head splits do, keeps the tokens.
    Under a token split the regrouped axis would mix each rank's slice into wrong groups."""
    stream = first_param(func)
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
            and stmt.value.value.id in tracked
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
        if names(stmt.value) & tracked and not _relayouts_of(stmt.value, tracked):
            tracked |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return None


def _relayouts_of(value: ast.expr, tracked: set[str]) -> bool:
    """A relayout call or a subscript applied to a tracked value (`c[:, None]` beside it is
    fine)."""
    for node in walk(value):
        if isinstance(node, ast.Subscript) and names(node.value) & tracked:
            return True
        if (
            isinstance(node, ast.Call)
            and call_name(node).split(".")[-1] in LAYOUT
            and any(names(a) & tracked for a in [node.func, *node.args])
        ):
            return True
    return False


def _regroup(
    value: ast.expr, tracked: set[str], batch: set[str], length: set[str]
) -> ast.Call | None:
    for node in walk(value):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value  # the stream, or token-local work on it (`(norm(x) * s)`)
        if not (names(owner) & tracked and not _relayouts_of(owner, tracked)):
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
        (isinstance(n, ast.Attribute) and n.attr == "shape" and names(n.value) & params)
        or (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "size"
            and names(n.func.value) & params
        )
        for n in walk(value)
    )


def _fixed_token_slice(
    value: ast.expr, tracked: set[str], measured: set[str]
) -> ast.Subscript | None:
    """`x[:, : self.ref_tokens]`, `x[:, 4:]`: the stream's token axis cut at positions that do not
    come from a length the block measured."""
    for node in walk(value):
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
            names(b) & measured
            or any(isinstance(n, ast.Attribute) and n.attr == "shape" for n in walk(b))
            for b in bounds
        ):
            return node
    return None


def optional_guard(func: ast.FunctionDef, line: int) -> str | None:
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
        if not_none_guards(test) & optional:  # `x is not None`, `x`, `x and y` ...
            return ast.unparse(test)
    return None
