"""Reading the loop over a block list for per-block steps (`block_steps`).

`read_loop` finds the one loop over `self.<list>` in the patched forward (a plain `for`, or
`enumerate` / `zip` of it; an indexed loop read as `enumerate`: `indexed_loops`) and what the
step needs: the index and block variables, the block call and what it assigns, the streams it is
given (a plain name, or the one carried stream an expression reads: `loop_streams`), the
loop-invariant values the body reads. What cannot be moved raises `StepError` with the reason: a
block call that is not found, streams that are neither, names carried from one block to the next
or read after the loop. Calls handing the index to an object's method (per-layer state) are
named (`Loop.state_calls`)."""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

from .indexed_loops import as_enumerate
from .list_aliases import ListAliases
from .loop_streams import assigned, loads, read_before_write, stream_inputs, written_back
from .step_body import StepError, direct_calls, inference_body, stateful_calls


@dataclass
class Loop:
    """The loop over one block list, as the step transformation needs it."""

    func: ast.FunctionDef  # the patched forward
    loop: ast.For
    index_var: str | None  # the block index (made up when zipped lists need one)
    block_var: str
    # the body without gradient-checkpointing branches, zipped lists' blocks read by index
    body: list[ast.stmt]
    call: ast.Call  # the block call
    targets: list[str]  # the names it assigns (the streams)
    inputs: list[str]  # the names passed for the block's stream parameters
    free: list[str]  # loop-invariant values the body reads (forward's parameters and locals)
    # the step's stream parameters: the block's own names (cache-dit matches forward patterns
    # by them)
    stream_names: list[str]
    # `enumerate(self.blocks, start=1)`: what the index counts from (None: 0)
    index_start: ast.expr | None = None
    # a stream handed to the block as an expression of it (`torch.gather(x, 1, idx)`, as
    # written): the step takes the stream whole and runs the routing itself
    routed: str | None = None
    # the step takes the block's first two streams the other way round (the denoised one first)
    reordered: bool = False
    # calls handing the index to an object's method (per-layer state, `kv.get_layer(i)`)
    state_calls: list[str] = field(default_factory=list)

    def expanded_call(self) -> ast.Call:
        """The block call with `*args` read through the tuple the body assigns to `args`."""
        return _expanded(self.call, self.body)


def read_loop(
    code: str, attr: str, stream_params: list[str], streams: int, reorder: bool = False
) -> Loop:
    """The loop over `self.<attr>` in `code` (a module-level `def`); `stream_params`: the
    block's leading parameter names, `streams`: how many of them are streams (1 or 2);
    `reorder`: the step takes the two streams the other way round (its first parameter the
    block's second stream)."""
    tree = ast.parse(code)
    func = tree.body[0]
    if not isinstance(func, ast.FunctionDef):
        raise StepError("the patched forward is not a function")
    func = as_enumerate(ListAliases(func).visit(func), attr, _fresh_name("block", func))
    loop = _find_loop(func, attr)
    index_var, block_var, partners = _loop_vars(loop, attr)
    start = _enumerate_start(loop, attr)
    if start is not None and partners:
        raise StepError(
            f"the loop over `self.{attr}` counts from {ast.unparse(start)} over zipped lists"
        )
    body = direct_calls(inference_body(loop.body), block_var)
    siblings, call_stmt, call = _block_call(body, block_var)
    if partners and index_var is None:
        index_var = _fresh_name("index", func)
    state = stateful_calls(body, index_var) if index_var else []
    # the blocks of the lists zipped with this one: block k of each, read in step k
    body = [_Partners(partners, index_var or "").visit(stmt) for stmt in body]
    targets = _targets(call_stmt)
    inputs, routed = stream_inputs(_expanded(call, body), stream_params, streams, body)
    targets = _taken_back(siblings, call_stmt, targets, inputs)
    if routed and not set(targets) <= set(inputs):
        targets = written_back(siblings, call_stmt, targets, inputs) or targets
    if not set(targets) <= set(inputs):
        raise StepError(
            f"the block call assigns {', '.join(targets)}, not the streams it is given "
            f"({', '.join(inputs)})"
        )
    loop_names = {index_var, block_var, "self", *partners}
    # the start is evaluated once, before the first block: a loop value like the body's
    read = body if start is None else [*body, ast.Expr(start)]
    free = _loop_invariants(func, loop, read, targets, inputs, loop_names)
    # the step's stream parameters carry the block's own names (cache-dit matches forward
    # patterns by them); the body still reads the transformer's variables
    stream_names = [stream_params[i] if i < len(stream_params) else v for i, v in enumerate(inputs)]
    if reorder:
        inputs, stream_names = _swapped(inputs, streams), _swapped(stream_names, streams)
    clash = sorted(set(stream_names) & set(free) - set(inputs))
    if clash:
        raise StepError(
            f"the block's stream parameter(s) {', '.join(clash)} clash with loop values"
        )
    return Loop(
        func,
        loop,
        index_var,
        block_var,
        body,
        call,
        targets,
        inputs,
        free,
        stream_names,
        start,
        routed,
        reorder,
        state,
    )


def _swapped(names: list[str], streams: int) -> list[str]:
    """The first two stream names the other way round (two streams, two distinct names)."""
    if streams != 2 or len(set(names[:2])) != 2:
        raise StepError("the block does not take two distinct streams to reorder")
    return [names[1], names[0], *names[2:]]


def _enumerate_start(loop: ast.For, attr: str) -> ast.expr | None:
    """The `start` of `enumerate(self.<attr>, start)` (positional or keyword), or None (0)."""
    it = loop.iter
    if _iterates(it, attr) or not isinstance(it, ast.Call):
        return None
    if len(it.args) > 1:
        start: ast.expr | None = it.args[1]
    else:
        start = next((k.value for k in it.keywords if k.arg == "start"), None)
    if isinstance(start, ast.Constant) and start.value == 0:
        return None
    return start


def _loop_invariants(
    func: ast.FunctionDef,
    loop: ast.For,
    body: list[ast.stmt],
    targets: list[str],
    inputs: list[str],
    loop_names: set[str | None],
) -> list[str]:
    """The values from before the loop that the body reads, once it is certain that the body
    carries no name from one block to the next and sets none that forward reads after it."""
    assigned_in_body = assigned(body)
    read_in_body = loads(body)
    carried = sorted(
        n
        for n in assigned_in_body & read_in_body
        if n not in targets and read_before_write(body, n)
    )
    if carried:
        raise StepError(f"the loop carries {', '.join(carried)} from one block to the next")
    after = loads(_statements_after(func, loop))
    kept = [n for n in _outer_containers_changed(body, assigned_in_body | loop_names) if n in after]
    if kept:
        raise StepError(
            f"the loop adds to {', '.join(kept)} once per block and forward reads it after the "
            "loop: blocks skipped by caching would add nothing"
        )
    leaked = sorted(
        n for n in (assigned_in_body - set(targets)) & after if _read_after(func, loop, n)
    )
    if leaked:
        raise StepError(f"forward reads {', '.join(leaked)} after the loop, set inside it")
    known = _forward_names(func) - loop_names
    return sorted((read_in_body & known) - set(inputs) - assigned_in_body)


_GROWERS = frozenset({"append", "extend", "insert", "add", "appendleft", "extendleft", "put"})


def _outer_containers_changed(body: list[ast.stmt], local: set[str | None]) -> list[str]:
    """Names from outside the loop that the body adds to in place (`feats.append(x)`)."""
    found: set[str] = set()
    for stmt in body:
        for node in ast.walk(stmt):
            grows = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if grows and node.func.attr in _GROWERS:  # type: ignore[attr-defined]
                target = node.func.value  # type: ignore[attr-defined]
                if isinstance(target, ast.Name) and target.id not in local:
                    found.add(target.id)
    return sorted(found)


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


def _block_call(body: list[ast.stmt], block_var: str) -> tuple[list[ast.stmt], ast.stmt, ast.Call]:
    """The statement assigning the block call (or a part of its output, `block(x)["x"]`, or a
    combination, `x + block(x)`: the step keeps the statement as it is), the statements it is
    one of, and the call. The statement may sit in a branch of the body (`else: x = block(x)`
    beside a branch handing the block to a replacement hook); calls inside functions the body
    defines (`def wrap(args): return block(...)`) are the hook's, not the loop's."""
    found = [
        (siblings, stmt, calls[0])
        for siblings in _statement_lists(body)
        for stmt in siblings
        if isinstance(stmt, ast.Assign)
        and len(
            calls := [
                n
                for n in ast.walk(stmt.value)
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name)
                and n.func.id == block_var
            ]
        )
        == 1
    ]
    if len(found) != 1:
        raise StepError(f"expected one `... = {block_var}(...)` statement in the loop body")
    return found[0]  # type: ignore[return-value]


def _statement_lists(body: list[ast.stmt]) -> list[list[ast.stmt]]:
    """`body` and the statement lists of the branches in it (`if`, `with`, `try`), not those
    of loops or of functions it defines."""
    out = [body]
    for stmt in body:
        if isinstance(stmt, ast.If):
            out += _statement_lists(stmt.body) + _statement_lists(stmt.orelse)
        elif isinstance(stmt, ast.With | ast.Try):
            out += _statement_lists(stmt.body)
    return out


def _taken_back(
    body: list[ast.stmt], call_stmt: ast.stmt, targets: list[str], inputs: list[str]
) -> list[str]:
    """`out = block(x, c)` then `x = out["hidden"]` (or `x = out`, `x = out.sample`): the
    streams the loop takes back out of the result are what the call assigns (the step runs
    both statements and returns `x`)."""
    if set(targets) <= set(inputs):
        return targets
    after = body[body.index(call_stmt) + 1 :]
    taken: list[str] = []
    for stmt in after:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id in inputs
            and isinstance(_output_of(stmt.value), ast.Name)
            and _output_of(stmt.value).id in targets  # type: ignore[attr-defined]
        ):
            taken.append(stmt.targets[0].id)
    return taken or targets


def _output_of(value: ast.expr) -> ast.expr:
    """`call["x"]` / `call.sample` -> `call`; anything else as it is."""
    if isinstance(value, ast.Subscript | ast.Attribute):
        return value.value
    return value


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


def _read_after(func: ast.FunctionDef, loop: ast.For, name: str) -> bool:
    """Whether forward reads the loop's value of `name` after the loop: not when the first
    statement after it that mentions `name` (nested ones included, in source order) binds it
    anew (`out = x.reshape(...)`, a name reused by the next loop's body before it reads it)."""
    end = loop.end_lineno or loop.lineno
    later = [s for s in func.body if s.lineno > end]
    holding = [s for s in func.body if s.lineno <= end < (s.end_lineno or s.lineno)]
    nested_after = [
        s for h in holding for s in ast.walk(h) if isinstance(s, ast.stmt) and s.lineno > end
    ]
    if any(name in loads([s]) | assigned([s]) for s in nested_after):
        return True  # mentioned beside the loop inside the statement holding it: keep it
    if not any(name in loads([s]) | assigned([s]) for s in later):
        return True  # never bound anew: keep it
    return read_before_write(later, name)


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
