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

What cannot be moved is refused with a reason (`StepError`): a loop that is not a plain `for` over
the list (or `enumerate` of it), a body whose block call is not found, stream arguments that are
not plain names, names the body carries from one block to the next, names it assigns and forward
reads after the loop, the index handed to an object's method (per-layer state such as a KV cache).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from typing import Any

from .layout import docstring
from .style import PEP8_LINE_LENGTH

OWNER_ATTR = "_cdit_owner"
BLOCKS_ATTR = "_cdit_blocks"  # the real blocks of each cached list (the functor keeps them)
INDEX_ATTR = "_cdit_index"


class StepError(Exception):
    """The loop cannot be turned into per-block steps; the message says why."""


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


def step_name(attr: str) -> str:
    return f"_{attr}_step"


def transform(
    code: str,
    attr: str,
    stream_params: list[str],
    streams: int,
    lists: frozenset[str] = frozenset(),
) -> Steps:
    """Rewrite the loop over `self.<attr>` in `code` (a module-level `def`); `stream_params`:
    the block's leading parameter names, `streams`: how many of them are streams (1 or 2)."""
    tree = ast.parse(code)
    func = tree.body[0]
    if not isinstance(func, ast.FunctionDef):
        raise StepError("the patched forward is not a function")
    loop = _find_loop(func, attr)
    index_var, block_var, partners = _loop_vars(loop, attr)
    body = _inference_body(loop.body)
    call_stmt, call = _block_call(body, block_var)
    if partners and index_var is None:
        index_var = _fresh_name("index", func)
    if index_var:
        _refuse_stateful(body, index_var)
    # the blocks of the lists zipped with this one: block k of each, read in step k
    body = [_Partners(partners, index_var or "").visit(stmt) for stmt in body]
    targets = _targets(call_stmt)
    inputs = _stream_inputs(_expanded(call, body), stream_params, streams)
    if not set(targets) <= set(inputs):
        raise StepError(
            f"the block call assigns {', '.join(targets)}, not the streams it is given "
            f"({', '.join(inputs)})"
        )
    assigned_in_body = _assigned(body)
    read_in_body = _loads(body)
    carried = sorted(
        n
        for n in assigned_in_body & read_in_body
        if n not in targets and _read_before_write(body, n)
    )
    if carried:
        raise StepError(f"the loop carries {', '.join(carried)} from one block to the next")
    after = _loads(_statements_after(func, loop))
    leaked = sorted((assigned_in_body - set(targets)) & after)
    if leaked:
        raise StepError(f"forward reads {', '.join(leaked)} after the loop, set inside it")
    known = _forward_names(func) - {index_var, block_var, "self", *partners}
    free = sorted((read_in_body & known) - set(inputs) - assigned_in_body)

    name = step_name(attr)
    # the step's stream parameters carry the block's own names (cache-dit matches forward
    # patterns by them); the body still reads the transformer's variables
    stream_names = [stream_params[i] if i < len(stream_params) else v for i, v in enumerate(inputs)]
    clash = sorted(set(stream_names) & set(free) - set(inputs))
    if clash:
        raise StepError(
            f"the block's stream parameter(s) {', '.join(clash)} clash with loop values"
        )
    new_loop = ast.For(
        target=ast.Name(block_var, ast.Store()),
        iter=ast.Attribute(ast.Name("self", ast.Load()), attr, ast.Load()),
        body=[
            ast.Assign(
                targets=[_tuple_or_name(targets, ast.Store())],
                value=ast.Call(
                    ast.Name(block_var, ast.Load()),
                    [ast.Name(p, ast.Load()) for p in inputs],
                    [ast.keyword(p, ast.Name(p, ast.Load())) for p in free],
                ),
            )
        ],
        orelse=[],
    )
    ast.fix_missing_locations(new_loop)
    indent = " " * loop.col_offset
    loop_text = "\n".join(
        indent + line if line else line for line in ast.unparse(new_loop).splitlines()
    )
    comment = f"{indent}# CDIT: per-block work runs inside each block's step ({name})"
    lines = code.splitlines()
    end = loop.end_lineno or loop.lineno
    new_code = "\n".join([*lines[: loop.lineno - 1], comment, loop_text, *lines[end:]]) + "\n"

    refs = _BlockRefs(block_var, lists | {attr})
    step_body = [refs.visit(stmt) for stmt in body]
    header = [
        ast.Assign([ast.Name("self", ast.Store())], _dict_get("step", OWNER_ATTR)),
    ]
    if index_var:
        header.append(ast.Assign([ast.Name(index_var, ast.Store())], _dict_get("step", INDEX_ATTR)))
    for param, var in zip(stream_names, inputs, strict=True):
        if param != var:
            header.append(ast.Assign([ast.Name(var, ast.Store())], ast.Name(param, ast.Load())))
    ret = ast.Return(_tuple_or_name(targets, ast.Load()))
    fn = ast.FunctionDef(
        name=name,
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg("step"), *(ast.arg(p) for p in [*stream_names, *free])],
            kwonlyargs=[],
            kw_defaults=[],
            defaults=[],
        ),
        body=[*header, *step_body, ret],
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
    function = "\n".join([*text[: head + 1], *doc, *text[head + 1 :]]) + "\n"
    return Steps(
        new_code,
        function,
        name,
        sorted(refs.lists_read),
        attr=attr,
        streams=tuple(stream_names),
        bindings=_bindings(_expanded(call, body), stream_params, set(free)),
    )


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
    hook on the block can reach it."""
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


# -- reading the loop ---------------------------------------------------------------------------


def _is_list(node: ast.expr, attr: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _zipped_lists(node: ast.expr) -> list[str] | None:
    """The attributes of `zip(self.a, self.b, ...)` when every argument is a `self.<list>`."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return None
    if node.func.id != "zip" or not node.args or node.keywords:
        return None
    attrs = [
        a.attr
        for a in node.args
        if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == "self"
    ]
    return attrs if len(attrs) == len(node.args) else None


def _iterates(node: ast.expr, attr: str) -> bool:
    """`self.<attr>`, or `zip(self.<attr>, self.<other>...)` (this list first)."""
    zipped = _zipped_lists(node)
    return _is_list(node, attr) or (zipped is not None and zipped[0] == attr)


def _find_loop(func: ast.FunctionDef, attr: str) -> ast.For:
    loops = [
        n
        for n in ast.walk(func)
        if isinstance(n, ast.For)
        and (
            _iterates(n.iter, attr)
            or (
                isinstance(n.iter, ast.Call)
                and isinstance(n.iter.func, ast.Name)
                and n.iter.func.id == "enumerate"
                and n.iter.args
                and _iterates(n.iter.args[0], attr)
            )
        )
    ]
    if len(loops) != 1:
        raise StepError(
            f"expected one loop over `self.{attr}` (or enumerate / zip of it), found {len(loops)}"
        )
    return loops[0]


def _loop_vars(loop: ast.For, attr: str) -> tuple[str | None, str, dict[str, str]]:
    """(index variable, block variable, {partner block variable: its list}) of the loop."""
    target = loop.target
    enumerated = not _iterates(loop.iter, attr)
    source = loop.iter.args[0] if enumerated else loop.iter  # type: ignore[attr-defined]
    index: str | None = None
    if enumerated:
        if not (
            isinstance(target, ast.Tuple)
            and len(target.elts) == 2
            and isinstance(target.elts[0], ast.Name)
        ):
            raise StepError(
                f"the loop over `self.{attr}` binds `{ast.unparse(target)}`, not (index, block)"
            )
        index, target = target.elts[0].id, target.elts[1]
    zipped = _zipped_lists(source)
    if zipped is None:
        if isinstance(target, ast.Name):
            return index, target.id, {}
    elif (
        isinstance(target, ast.Tuple)
        and len(target.elts) == len(zipped)
        and all(isinstance(e, ast.Name) for e in target.elts)
    ):
        names = [e.id for e in target.elts]  # type: ignore[attr-defined]
        return index, names[0], dict(zip(names[1:], zipped[1:], strict=True))
    raise StepError(
        f"the loop over `self.{attr}` binds `{ast.unparse(loop.target)}`, not its blocks by name"
    )


def _fresh_name(base: str, func: ast.FunctionDef) -> str:
    taken = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(func) if isinstance(a, ast.arg)
    }
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name


_TENSOR_MODULES = ("torch", "F", "nn", "np", "math", "einops")


def _refuse_stateful(body: list[ast.stmt], index_var: str) -> None:
    """`kv_cache.get_layer(i)`: the index handed to an object's method selects per-layer state
    (a KV cache written on one step, read on the next) that a cached step would skip. Indexing
    data (`bundles[:, ids[i]]`) or testing the index (`mask if i > 1 else None`) is fine."""
    for stmt in body:
        for node in ast.walk(stmt):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id in _TENSOR_MODULES:
                continue
            used = [*node.args, *(k.value for k in node.keywords)]
            if any(
                isinstance(n, ast.Name) and n.id == index_var for a in used for n in ast.walk(a)
            ):
                raise StepError(
                    f"`{ast.unparse(node)}` hands the block index to an object's method "
                    "(per-layer state such as a KV cache, which a cached step would not update)"
                )


def _mentions_checkpointing(test: ast.expr) -> bool:
    return "gradient_checkpointing" in ast.unparse(test) or "is_grad_enabled" in ast.unparse(test)


def _inference_body(body: list[ast.stmt]) -> list[ast.stmt]:
    """The body without the gradient-checkpointing branches (never taken at inference)."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.If) and _mentions_checkpointing(stmt.test):
            out += _inference_body(stmt.orelse)
        else:
            out.append(stmt)
    return out


def _block_call(body: list[ast.stmt], block_var: str) -> tuple[ast.stmt, ast.Call]:
    found = [
        (stmt, stmt.value)
        for stmt in body
        if isinstance(stmt, ast.Assign)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Name)
        and stmt.value.func.id == block_var
    ]
    if len(found) != 1:
        raise StepError(f"expected one `... = {block_var}(...)` statement in the loop body")
    return found[0]  # type: ignore[return-value]


def _targets(stmt: ast.stmt) -> list[str]:
    assert isinstance(stmt, ast.Assign)
    target = stmt.targets[0]
    elts = target.elts if isinstance(target, ast.Tuple) else [target]
    if not all(isinstance(e, ast.Name) for e in elts):
        raise StepError(f"the block call assigns `{ast.unparse(target)}`, not plain names")
    return [e.id for e in elts]  # type: ignore[attr-defined]


def _expanded(call: ast.Call, body: list[ast.stmt]) -> ast.Call:
    """`block(*block_args)` read through the tuple literal the body assigns to `block_args`."""
    tuples = {
        stmt.targets[0].id: stmt.value.elts
        for stmt in body
        if isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and isinstance(stmt.value, ast.Tuple | ast.List)
    }
    args: list[ast.expr] = []
    for arg in call.args:
        if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name):
            args += tuples.get(arg.value.id, [arg])
        else:
            args.append(arg)
    return ast.Call(call.func, args, call.keywords)


def _stream_inputs(call: ast.Call, params: list[str], streams: int) -> list[str]:
    """The names passed for the block's leading (stream) parameters."""
    by_keyword = {kw.arg: kw.value for kw in call.keywords if kw.arg}
    out: list[str] = []
    for i in range(streams):
        value: ast.expr | None = None
        if i < len(call.args) and not isinstance(call.args[i], ast.Starred):
            value = call.args[i]
        elif i < len(params):
            value = by_keyword.get(params[i])
        if not isinstance(value, ast.Name):
            raise StepError("the streams passed to the block are not plain names")
        out.append(value.id)
    return out


def _names(nodes: list[ast.stmt] | list[ast.AST], ctx: type[ast.expr_context]) -> set[str]:
    return {
        n.id
        for node in nodes
        for n in ast.walk(node)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)
    }


def _assigned(body: list[ast.stmt]) -> set[str]:
    return _names(body, ast.Store)


def _loads(body: list[ast.stmt]) -> set[str]:
    return _names(body, ast.Load)


def _read_before_write(body: list[ast.stmt], name: str) -> bool:
    """Whether the first statement (in source order, nested ones included) that mentions `name`
    reads it (the value of the previous block's iteration) rather than binding it."""
    for part in _in_order(body):
        if name in _names([part], ast.Load):
            return True
        if name in _names([part], ast.Store):
            return False
    return False


def _in_order(body: list[ast.stmt]) -> list[ast.AST]:
    """Simple statements and the headers of compound ones (tests, iterables), in source order."""
    out: list[ast.AST] = []
    for stmt in body:
        if isinstance(stmt, ast.If | ast.While):
            out.append(stmt.test)
            out += _in_order(stmt.body) + _in_order(stmt.orelse)
        elif isinstance(stmt, ast.For):
            out += [stmt.iter, stmt.target]
            out += _in_order(stmt.body) + _in_order(stmt.orelse)
        elif isinstance(stmt, ast.With):
            out += [item.context_expr for item in stmt.items]
            out += _in_order(stmt.body)
        elif isinstance(stmt, ast.Try):
            out += _in_order(stmt.body)
            for handler in stmt.handlers:
                out += _in_order(handler.body)
            out += _in_order(stmt.orelse) + _in_order(stmt.finalbody)
        else:
            out.append(stmt)
    return out


def _statements_after(func: ast.FunctionDef, loop: ast.For) -> list[ast.stmt]:
    end = loop.end_lineno or loop.lineno
    return [s for s in ast.walk(func) if isinstance(s, ast.stmt) and s.lineno > end]


def _forward_names(func: ast.FunctionDef) -> set[str]:
    """forward's parameters and every name it binds (anything else is a global or builtin)."""
    args = func.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    if args.vararg:
        names.add(args.vararg.arg)
    if args.kwarg:
        names.add(args.kwarg.arg)
    names |= {
        n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    return names - set(dir(builtins))


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


class _Partners(ast.NodeTransformer):
    """Reads of a zipped list's block variable -> `self.<list>[index]` (in the step, `self` is
    the transformer and the zipped lists are not cached, so they hold the real blocks)."""

    def __init__(self, partners: dict[str, str], index_var: str) -> None:
        self.partners = partners
        self.index_var = index_var

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.partners and isinstance(node.ctx, ast.Load):
            return ast.Subscript(
                ast.Attribute(ast.Name("self", ast.Load()), self.partners[node.id], ast.Load()),
                ast.Name(self.index_var, ast.Load()),
                ast.Load(),
            )
        return node


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
