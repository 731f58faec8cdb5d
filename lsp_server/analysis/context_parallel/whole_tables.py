"""A table of the model combined whole with the token stream before the blocks.

`x = self.embed(x) + self.pos_embed`, with `self.pos_embed = nn.Parameter(torch.randn(1,
num_tokens, dim))` (ViT-style learned positions; also after the tokens were reordered by a
score, `x = torch.gather(x, 1, order) + self.pos`): one row per token of the whole sequence.
Under a root split every rank holds a slice of the tokens and meets the whole table: a size
error (8 tokens against 16 rows), or, where sizes happen to broadcast, every rank pairing its
tokens with the first rows. The split goes to the first block instead, after the table was
added to the whole stream.

A tensor the model holds counts as such a table when its build shows a token axis (a factory
`torch.randn(1, n, d)` / `zeros` / `ones` / `empty` / `rand` / `full` with two or more sizes,
the one against the tokens not a literal 1), or, its build not read, when its name is a
position word (`pos_embed`, a registered buffer from a function). A per-feature parameter
(`torch.zeros(d)`) or one broadcast over the tokens (`(1, 1, d)`) does not count.
"""

from __future__ import annotations

import ast

from ..astutil import call_name, int_literal, registered_buffer, self_attr, walk
from ..model import Evidence
from ..parallel_input import ParallelContext
from .flow import ForwardFlow, before_the_blocks, data_names
from .forward_statements import POSITION_WORDS, short_stmt

_FACTORIES = ("randn", "zeros", "ones", "empty", "rand", "full")
_KEEPS = ("to", "type_as", "float", "half", "bfloat16", "contiguous", "detach")
_COMBINES = ast.Add | ast.Sub | ast.Mult | ast.Div


def whole_tables(ctx: ParallelContext, flow: ForwardFlow, streams: set[str]) -> list[Evidence]:
    """The first statement before the blocks combining a per-token table of the model, whole,
    with a value made from the stream."""
    tables = _token_tables(ctx)
    if not tables:
        return []
    for stmt in before_the_blocks(flow):
        if not isinstance(stmt, ast.Assign | ast.AugAssign):
            continue
        pairs = [
            (node.left, node.right)
            for node in walk(stmt.value)
            if isinstance(node, ast.BinOp) and isinstance(node.op, _COMBINES)
        ]
        if isinstance(stmt, ast.AugAssign):
            pairs.append((stmt.target, stmt.value))
        for a, b in pairs:
            for table, other in ((a, b), (b, a)):
                attr = _whole(table)
                if attr in tables and data_names(other) & streams:
                    return [
                        Evidence(
                            f"`{short_stmt(stmt)}` combines `self.{attr}` (one row per token "
                            "of the whole sequence) with the token stream: under a root split "
                            "every rank's slice would meet the whole table (split at the first "
                            "block, after it is added)",
                            ctx.path,
                            stmt.lineno,
                        )
                    ]
    return []


def _whole(expr: ast.expr) -> str | None:
    """`self.<attr>`, also through conversions (`self.pos.to(x.dtype)`)."""
    while (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr in _KEEPS
    ):
        expr = expr.func.value
    return self_attr(expr)


def _token_tables(ctx: ParallelContext) -> set[str]:
    """The tensors the model's `__init__` (and its bases') build with a token axis."""
    out: set[str] = set()
    for init, _owner in ctx.resolver.init_methods(ctx.transformer):
        for node in walk(init):
            built = _tensor_built(node)
            if built is None:
                continue
            attr, value = built
            per_token = _per_token(value)
            named = any(w in attr.lower() for w in POSITION_WORDS)
            if per_token or (per_token is None and named):
                out.add(attr)
    return out


def _tensor_built(node: ast.AST) -> tuple[str, ast.expr | None] | None:
    """`self.t = nn.Parameter(value)` or `self.register_buffer("t", value)`: (t, value)."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        attr = self_attr(node.targets[0])
        value = node.value
        if attr and isinstance(value, ast.Call) and call_name(value).endswith("Parameter"):
            return attr, value.args[0] if value.args else None
        return None
    return registered_buffer(node)


def _per_token(value: ast.expr | None) -> bool | None:
    """Whether a tensor built by `value` has a token axis (two or more sizes, the second to
    last not a literal 1); None when the build is not read."""
    while isinstance(value, ast.BinOp):  # `torch.randn(1, n, d) * 0.02`
        value = value.left if isinstance(value.left, ast.Call) else value.right
    if not (isinstance(value, ast.Call) and call_name(value).split(".")[-1] in _FACTORIES):
        return None
    sizes = list(value.args)
    if len(sizes) == 1 and isinstance(sizes[0], ast.Tuple | ast.List):
        sizes = list(sizes[0].elts)
    if call_name(value).split(".")[-1] == "full" and len(value.args) == 2:
        sizes = list(sizes[0].elts) if isinstance(sizes[0], ast.Tuple | ast.List) else []
    if any(isinstance(s, ast.Starred) for s in sizes) or not sizes:
        return None
    return len(sizes) >= 2 and int_literal(sizes[-2]) != 1
