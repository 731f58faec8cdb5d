"""Per-block steps: index-dependent loop work moved into each block's own call.

Under caching cache-dit swaps a cached list for one module that calls every block with the
arguments of the first call (facts §1.4): loop-body work that depends on the block index (a
caption bundle chosen per layer, a per-layer KV cache, a mask from the second block on) would run
once, for block 0. The transformation makes the loop a clean call cache-dit can repeat:

    for i, block in enumerate(self.blocks):         for block in self.blocks:
        text = bundles[i] if i in ids else None  ->     x = block(x, bundles, ids, ...)
        x = block(x, ctx=text)

and each block's `forward` becomes a step (`_<list>_step`) that runs the original loop body with
its own index and calls the block's class `forward` (hooks installed on the block still run once,
around the step). `self` in the body is the transformer. The loop-invariant values the body reads
(forward's parameters and locals) are passed positionally after the streams.

A stream the loop routes to the block (`routed = block(torch.gather(x, 1, idx), c)`, written back
into `x`) is taken whole by the step, which runs the routing itself (`loop_streams`); a block that
takes the denoised stream second gets a step taking the two streams the other way round
(`reorder`). Either step refuses a CP split its routing or order would break (`stepped_cp_plan`).

What cannot be moved is refused with a reason (`StepError`): a loop that is not a plain `for` over
the list (or `enumerate` of it), a body whose block call is not found, stream arguments that are
not plain names, names the body carries from one block to the next, names it assigns and forward
reads after the loop. The index handed to an object's method (per-layer state such as a KV
cache, `kv.get_layer(i)`) moves into the step like any per-block work and is named in
`Steps.state_calls`: a cached step skips the state's use as it skips the block (right for state
written on computed steps only, such as a prefix KV cache filled on the first step). Reading
the loop is `block_loop`; this module writes the new loop and the step.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from .block_loop import Loop, StepError, read_loop
from .layout import docstring
from .style import PEP8_LINE_LENGTH

OWNER_ATTR = "_cdit_owner"
BLOCKS_ATTR = "_cdit_blocks"  # the real blocks of each cached list (the functor keeps them)
INDEX_ATTR = "_cdit_index"


@dataclass
class Steps:
    code: str  # the patched forward with the loop rewritten
    function: str  # module-level step function code
    name: str  # its name
    block_refs: list[str]  # cached lists the step reads (`len(self.blocks)`): kept real
    attr: str = ""  # the list whose blocks run the step
    streams: tuple[str, ...] = ()  # the step's (and the block's) stream parameters
    # block parameter -> the step parameter that carries its value (the loop passes the step's
    # other parameters by keyword, so hooks that name them find them)
    bindings: dict[str, str] = field(default_factory=dict)
    # the expression of a stream the step hands the block (`torch.gather(x, 1, idx)`), or None
    routed: str | None = None
    reordered: bool = False  # the step takes the block's two streams the other way round
    # calls of the loop handing the block index to an object's method (per-layer state)
    state_calls: list[str] = field(default_factory=list)


def step_name(attr: str) -> str:
    return f"_{attr}_step"


def transform(
    code: str,
    attr: str,
    stream_params: list[str],
    streams: int,
    lists: frozenset[str] = frozenset(),
    reorder: bool = False,
) -> Steps:
    """Rewrite the loop over `self.<attr>` in `code` (a module-level `def`); `stream_params`:
    the block's leading parameter names, `streams`: how many of them are streams (1 or 2);
    `reorder`: the step takes the two streams the other way round (the block takes the
    denoised stream second: cache-dit decides caching on the first)."""
    loop = read_loop(code, attr, stream_params, streams, reorder)
    name = step_name(attr)
    new_code = _with_plain_loop(code, loop, attr, name)
    refs = _BlockRefs(loop.block_var, lists | {attr})
    function = _step_function(loop, attr, name, refs)
    return Steps(
        new_code,
        function,
        name,
        sorted(refs.lists_read),
        attr=attr,
        streams=tuple(loop.stream_names),
        bindings=_bindings(loop.expanded_call(), stream_params, set(loop.free)),
        routed=loop.routed,
        reordered=loop.reordered,
        state_calls=loop.state_calls,
    )


def _with_plain_loop(code: str, loop: Loop, attr: str, name: str) -> str:
    """`code` with the loop replaced by a plain call of each block (streams positionally, the
    loop-invariant values by keyword), under a `# CDIT:` comment."""
    new_loop = ast.For(
        target=ast.Name(loop.block_var, ast.Store()),
        iter=ast.Attribute(ast.Name("self", ast.Load()), attr, ast.Load()),
        body=[
            ast.Assign(
                targets=[_tuple_or_name(loop.targets, ast.Store())],
                value=ast.Call(
                    ast.Name(loop.block_var, ast.Load()),
                    [ast.Name(p, ast.Load()) for p in loop.inputs],
                    [ast.keyword(p, ast.Name(p, ast.Load())) for p in loop.free],
                ),
            )
        ],
        orelse=[],
    )
    ast.fix_missing_locations(new_loop)
    indent = " " * loop.loop.col_offset
    loop_text = "\n".join(
        indent + line if line else line for line in ast.unparse(new_loop).splitlines()
    )
    comment = f"{indent}# CDIT: per-block work runs inside each block's step ({name})"
    lines = code.splitlines()
    start = loop.loop.lineno
    end = loop.loop.end_lineno or start
    return "\n".join([*lines[: start - 1], comment, loop_text, *lines[end:]]) + "\n"


def _step_function(loop: Loop, attr: str, name: str, refs: _BlockRefs) -> str:
    """The module-level step: the loop body with this block's owner, index and streams."""
    ret = ast.Return(_tuple_or_name(loop.targets, ast.Load()))
    ends = _IterationEnds(ret)
    step_body = [ends.visit(refs.visit(stmt)) for stmt in loop.body]
    fn = ast.FunctionDef(
        name=name,
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg("step"), *(ast.arg(p) for p in [*loop.stream_names, *loop.free])],
            kwonlyargs=[],
            kw_defaults=[],
            defaults=[],
        ),
        body=[*_step_header(loop), *step_body, ret],
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    ast.fix_missing_locations(fn)
    doc = docstring(
        f"One block of `{attr}` with the loop's per-block work.\n\nInstalled as the block's "
        "forward by the PatchFunctor: cache-dit calls every block with the same arguments.",
        indent="    ",
        width=PEP8_LINE_LENGTH,
    )
    text = ast.unparse(fn).splitlines()
    head = next(i for i, line in enumerate(text) if line.rstrip().endswith(":"))
    return "\n".join([*text[: head + 1], *doc, *text[head + 1 :]]) + "\n"


def _step_header(loop: Loop) -> list[ast.stmt]:
    """`self` (the transformer) and the index from the block's `__dict__`; the body's own names
    for the streams where the step's parameters carry the block's names."""
    header: list[ast.stmt] = [
        ast.Assign([ast.Name("self", ast.Store())], _dict_get("step", OWNER_ATTR)),
    ]
    if loop.index_var:
        index = _dict_get("step", INDEX_ATTR)
        if loop.index_start is not None:  # `enumerate(self.blocks, start=1)`
            index = ast.BinOp(index, ast.Add(), loop.index_start)
        header.append(ast.Assign([ast.Name(loop.index_var, ast.Store())], index))
    for param, var in zip(loop.stream_names, loop.inputs, strict=True):
        if param != var:
            header.append(ast.Assign([ast.Name(var, ast.Store())], ast.Name(param, ast.Load())))
    return header


def _bindings(call: ast.Call, params: list[str], free: set[str]) -> dict[str, str]:
    """Block parameter -> step parameter, for the block call's arguments that are the step's
    parameters passed as they are (`block(x, rope=freqs)`: `rope` -> `freqs`)."""
    out: dict[str, str] = {}
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Name) and arg.id in free and i < len(params):
            out[params[i]] = arg.id
    for kw in call.keywords:
        if kw.arg and isinstance(kw.value, ast.Name) and kw.value.id in free:
            out[kw.arg] = kw.value.id
    return out


def stepped_cp_plan(plan: dict[str, Any], steps: list[Steps]) -> tuple[dict[str, Any], str | None]:
    """The hook plan for blocks whose forward is a step: hooks on a block find their inputs by
    name among the call's keywords (or by position in the block class's signature), so the
    inputs a plan names on a stepped list's blocks are renamed to the step parameters that
    carry them. (plan, None), or (plan, why) when an input is computed inside the step, where no
    hook on the block can reach it, when a step routes a stream (a split anywhere would route
    each rank's tokens alone), or when a hook names a stream a step takes in another order."""
    routing = next((s for s in steps if s.routed), None)
    if routing is not None and plan:
        return plan, (
            f"the per-block steps of `{routing.attr}` hand each block `{routing.routed}`, "
            "computed from the whole stream inside the step (a token routing): with the "
            "sequence split, each rank would compute it from its own tokens alone"
        )
    by_attr = {s.attr: s for s in steps}
    out: dict[str, Any] = {}
    for key, entry in plan.items():
        head, _, rest = key.partition(".")
        step = by_attr.get(head)
        if step is None or "." in rest or not isinstance(entry, dict) or "gather_dim" in entry:
            out[key] = entry
            continue
        renamed: dict[str, Any] = {}
        for param, spec in entry.items():
            why = _unsplittable(step, head, key, param)
            if why:
                return plan, why
            if param in step.streams:
                renamed[param] = spec
            elif param in step.bindings:
                renamed[step.bindings[param]] = spec
            else:
                return plan, (
                    f"the per-block steps of `{head}` compute the blocks' `{param}` inside "
                    f"the step, where a hook on the block (`{key}`) cannot split it"
                )
        out[key] = renamed
    return out, None


def _unsplittable(step: Steps, head: str, key: str, param: str) -> str | None:
    """Why a hook on a stepped block cannot split its stream `param`: the step takes the
    streams in another order than the block's class signature, by which hooks find positional
    inputs."""
    if param in step.streams and step.reordered:
        return (
            f"the per-block steps of `{head}` take the streams in another order than the "
            f"block's signature, by which a hook on the block (`{key}`) finds `{param}`"
        )
    return None


# -- writing the step ---------------------------------------------------------------------------


def _dict_get(obj: str, key: str) -> ast.expr:
    return ast.Subscript(
        ast.Attribute(ast.Name(obj, ast.Load()), "__dict__", ast.Load()),
        ast.Constant(key),
        ast.Load(),
    )


def _tuple_or_name(names: list[str], ctx: ast.expr_context) -> ast.expr:
    if len(names) == 1:
        return ast.Name(names[0], ctx)
    return ast.Tuple([ast.Name(n, ctx) for n in names], ctx)


class _IterationEnds(ast.NodeTransformer):
    """`continue` of the block loop -> `return <streams>` (the block skipped: the step hands
    the streams on as they are); a `break` of it cannot be a step (the blocks after it would
    still run in cache-dit's wrapper). Loops nested in the body keep theirs."""

    def __init__(self, ret: ast.Return) -> None:
        self.ret = ret

    def visit_Continue(self, node: ast.Continue) -> ast.AST:
        return ast.copy_location(ast.Return(self.ret.value), node)

    def visit_Break(self, node: ast.Break) -> ast.AST:
        raise StepError("the loop body stops the loop (`break`)")

    def _nested(self, node: ast.AST) -> ast.AST:
        return node

    visit_For = visit_AsyncFor = visit_While = _nested
    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _nested


class _BlockRefs(ast.NodeTransformer):
    """`block(...)` -> `type(step).forward(step, ...)` (the class's forward, not the step again);
    other reads of the loop's block variable -> `step`; `self.<cached list>` -> the real blocks
    (during a cached forward the attribute holds cache-dit's one-element wrapper)."""

    def __init__(self, block_var: str, lists: frozenset[str]) -> None:
        self.block_var = block_var
        self.lists = lists
        self.lists_read: set[str] = set()

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if (
            isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and node.attr in self.lists
            and isinstance(node.ctx, ast.Load)
        ):
            self.lists_read.add(node.attr)
            return ast.Subscript(
                ast.Attribute(ast.Name("self", ast.Load()), BLOCKS_ATTR, ast.Load()),
                ast.Constant(node.attr),
                ast.Load(),
            )
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        calls_block = isinstance(node.func, ast.Name) and node.func.id == self.block_var
        self.generic_visit(node)
        if calls_block:
            forward = ast.Attribute(
                ast.Call(ast.Name("type", ast.Load()), [ast.Name("step", ast.Load())], []),
                "forward",
                ast.Load(),
            )
            return ast.Call(forward, [ast.Name("step", ast.Load()), *node.args], node.keywords)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.block_var and isinstance(node.ctx, ast.Load):
            return ast.Name("step", ast.Load())
        return node


__all__ = [
    "INDEX_ATTR",
    "OWNER_ATTR",
    "StepError",
    "Steps",
    "step_name",
    "stepped_cp_plan",
    "transform",
]
