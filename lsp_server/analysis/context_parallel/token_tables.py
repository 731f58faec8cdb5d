"""Per-token tables forward builds inline and hands to every block: a rotary angle table from
`torch.arange` over the stream's length, positions joined with zeros for prefix tokens; and
values expanded to one row per token (`token_expansions`).

Whatever its name, a tensor forward builds from a length it measured on a split stream (`n =
x.shape[1]`, `arange(n)`, `cat` with more rows) and passes to the blocks has one row per token:
split at the first block, the blocks get this rank's tokens next to the whole table. It is split
where every block receives it, on the axis read from how it is built (`axis_inference`); a table
whose axis is not read refuses context parallelism, never split on a guess."""

from __future__ import annotations

import ast

from ..astutil import callee_name, self_attr, walk, walk_local
from ..model import Evidence
from ..parallel_input import ParallelBlockList, ParallelContext
from .axis_inference import name_axis
from .block_binding import passed_name
from .flow import ForwardFlow, data_names
from .key_masks import is_key_mask
from .result import HookPlan, SplitInput
from .row_ids import RowIds, row_id_params
from .token_expansions import Expansion, token_expansion


def split_token_tables(
    ctx: ParallelContext,
    flow: ForwardFlow,
    block: ParallelBlockList,
    bound: dict[str, ast.expr],
    plan: HookPlan,
    streams: set[str],
) -> tuple[list[Evidence], list[Evidence]]:
    """(evidence, refusals) for the block arguments built from a split stream's length."""
    if ctx.forward is None or block.call is None:
        return [], []
    line = block.call.lineno
    keys = (f"{block.attr}.0", f"{block.attr}.*")
    evidence: list[Evidence] = []
    refusals: list[Evidence] = []
    found = ctx.resolver.find_method(block.block, "forward")
    row_ids = row_id_params(found[0]) if found is not None else {}
    for param, expr in bound.items():
        var = passed_name(expr)
        if not var or var in streams or any(param in plan.splits.get(k, {}) for k in keys):
            continue
        if is_key_mask(ctx, param) or is_key_mask(ctx, var):
            continue  # masks: mask_planning
        if param in row_ids:
            ids = row_ids[param]
            _split_row_ids(plan, block.attr, param, var, ids, ctx.path, evidence, refusals)
            continue
        expansion = token_expansion(flow, var, streams)
        if expansion is not None:
            _split_expansion(plan, block.attr, param, var, expansion, ctx.path, evidence, refusals)
            continue
        measured = flow.shape_derived.get(var, set()) & streams
        if not measured or not inline_table(ctx, var):
            continue
        axis, how = name_axis(ctx.forward, ctx.transformer.node, var)
        stream = sorted(measured)[0]
        if axis is None:
            refusals.append(
                Evidence(
                    f"`{var}` (passed to every block as `{param}`) is built from the length of "
                    f"`{stream}`, so it holds one row per token, but its token axis is not read "
                    "from how it is built: context parallelism is not generated",
                    ctx.path,
                    line,
                )
            )
            continue
        plan.split(
            f"{block.attr}.*",
            param,
            SplitInput(axis, None, reason=f"per-token table ({how})", line=line),
        )
        evidence.append(
            Evidence(
                f"`{var}` is built from the length of `{stream}` ({how}): one row per token, "
                f"split on axis {axis} where every block receives it (as `{param}`)",
                ctx.path,
                line,
            )
        )
    return evidence, refusals


def tables_in_the_loop_body(
    ctx: ParallelContext, block: ParallelBlockList, streams: set[str]
) -> list[Evidence]:
    """A per-token table forward combines with the split stream in the loop body, outside the
    block call (`for block in self.blocks: x = x + pos; x = block(x, c)`): split at the first
    block, the stream holds this rank's tokens from then on while the table keeps every row,
    and no hook reaches a statement of forward. Refused with the statement."""
    if block.call is None:
        return []
    out: list[Evidence] = []
    for loop in block.loops:
        for stmt in loop.body:
            if not isinstance(stmt, ast.Assign | ast.AugAssign) or any(
                n is block.call for n in walk(stmt)
            ):
                continue
            for node in walk(stmt.value):
                if not isinstance(node, ast.BinOp):
                    continue
                sides = [data_names(node.left), data_names(node.right)]
                for mine, other in (sides, sides[::-1]):
                    tables = sorted(v for v in other if inline_table(ctx, v))
                    if mine & streams and tables:
                        out.append(
                            Evidence(
                                f"`{ast.unparse(stmt)[:80]}` in the loop over `{block.attr}` "
                                f"combines the stream with `{tables[0]}`, one row per token at "
                                "full length: split at the first block the stream holds this "
                                "rank's tokens from the second block on, and no hook reaches "
                                "a statement of forward; context parallelism is not generated",
                                ctx.path,
                                stmt.lineno,
                            )
                        )
                        return out
    return out


def _split_row_ids(
    plan: HookPlan,
    attr: str,
    param: str,
    var: str,
    ids: RowIds,
    path: str,
    evidence: list[Evidence],
    refusals: list[Evidence],
) -> None:
    """Ids that pick one table row per token inside the block: split with the tokens."""
    if not ids.by_index_select:
        refusals.append(
            Evidence(
                f"`{var}` (passed to every block as `{param}`) picks one row per token "
                f"(`{ids.text}`), but whether it is `(S,)` or `(B, S)` is not read: context "
                "parallelism is not generated",
                path,
                ids.line,
            )
        )
        return
    plan.split(
        f"{attr}.*",
        param,
        SplitInput(0, 1, reason=f"per-token row ids (`{ids.text}`)", line=ids.line),
    )
    evidence.append(
        Evidence(
            f"`{var}` picks one row per token in every block (`{ids.text}`): split on axis 0 "
            f"where every block receives it (as `{param}`)",
            path,
            ids.line,
        )
    )


def _split_expansion(
    plan: HookPlan,
    attr: str,
    param: str,
    var: str,
    expansion: Expansion,
    path: str,
    evidence: list[Evidence],
    refusals: list[Evidence],
) -> None:
    """A value forward expanded to one row per token: split with the tokens at every block."""
    if expansion.axis is None:
        refusals.append(
            Evidence(
                f"`{var}` (passed to every block as `{param}`) is expanded to one row per token "
                f"({expansion.how}), but the axis it expands is not read: context parallelism "
                "is not generated",
                path,
                expansion.line,
            )
        )
        return
    plan.split(
        f"{attr}.*",
        param,
        SplitInput(
            expansion.axis,
            None,
            reason=f"expanded to one row per token ({expansion.how})",
            line=expansion.line,
        ),
    )
    evidence.append(
        Evidence(
            f"`{var}` is expanded to one row per token ({expansion.how}): split on axis "
            f"{expansion.axis} where every block receives it (as `{param}`)",
            path,
            expansion.line,
        )
    )


_TENSOR_BUILDERS = (
    "arange",
    "cat",
    "concat",
    "stack",
    "zeros",
    "ones",
    "full",
    "outer",
    "linspace",
)


def inline_table(ctx: ParallelContext, var: str) -> bool:
    """Whether `var` is a tensor forward builds inline with torch builders (`arange`, `cat`,
    `outer`, ...) and element-wise math from lengths and constants: not from a module or method
    of `self` (those outputs are planned as position modules), nor from an input's values."""
    if ctx.forward is None:
        return False
    kinds = ctx.__dict__.get("_local_kinds")  # one pass over forward per context
    if not isinstance(kinds, _Kinds):
        kinds = ctx.__dict__["_local_kinds"] = _Kinds(ctx.forward)
    return kinds.kind(var) == "table"


class _Kinds:
    """What each local of `forward` is: "table" (built with torch builders from lengths and
    constants), "scalar" (lengths, constants) or "other" (made from a module, a method or an
    input's values). One pass over the assignments; each name classified once."""

    def __init__(self, forward: ast.FunctionDef) -> None:
        args = forward.args
        self.params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs} - {"self"}
        self.values: dict[str, list[ast.expr]] = {}
        for node in walk_local(forward):
            if not isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
                continue
            if node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for n in walk(target):
                    if isinstance(n, ast.Name):
                        self.values.setdefault(n.id, []).append(node.value)
        self.known: dict[str, str] = {}

    def kind(self, var: str) -> str:
        if var in self.known:
            return self.known[var]
        self.known[var] = "scalar"  # a cycle (`x = x + 1`) adds nothing
        values = self.values.get(var)
        if not values:
            self.known[var] = "other"
            return "other"
        built = False
        for value in values:
            if data_names(value) & self.params or _calls_self(value):
                self.known[var] = "other"
                return "other"
            built = built or any(
                (isinstance(n, ast.Call) and callee_name(n) in _TENSOR_BUILDERS)
                or _cut_to_a_length(n)
                for n in walk(value)
            )
            for name in sorted(data_names(value) - {var} - self.params):
                if name not in self.values:
                    continue  # a global or builtin (`torch`, `math`)
                sub = self.kind(name)
                if sub == "other":
                    self.known[var] = "other"
                    return "other"
                built = built or sub == "table"
        self.known[var] = "table" if built else "scalar"
        return self.known[var]


def _cut_to_a_length(node: ast.AST) -> bool:
    """`self.freqs_cis[: x.shape[1]]`, `self.pos[:, : x.shape[1]]`: rows of a table the model
    holds, cut to a length read from a tensor (LLaMA-style rotary tables, learned absolute
    positions): one row per token."""
    if not (isinstance(node, ast.Subscript) and self_attr(node.value)):
        return False
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return any(
        isinstance(part, ast.Slice)
        and part.upper is not None
        and any(
            (isinstance(n, ast.Attribute) and n.attr == "shape")
            or (isinstance(n, ast.Call) and callee_name(n) in ("size", "len"))
            for n in walk(part.upper)
        )
        for part in parts
    )


def _calls_self(value: ast.expr) -> bool:
    for node in walk(value):
        if isinstance(node, ast.Call):
            func = node.func
            while isinstance(func, ast.Attribute):
                func = func.value
            if isinstance(func, ast.Name) and func.id == "self":
                return True
    return False
