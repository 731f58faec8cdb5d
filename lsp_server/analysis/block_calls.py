"""The calls of a list's blocks inside a loop that runs it (`collect_block_calls`): direct
calls (`block(x, c)`, `self.blocks[i](x, c)`, through a local alias), gradient-checkpointing
calls, and runners the block is handed to (`auto_grad_checkpoint(block, x, c)`)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from .astutil import callee_name, self_attr, target_names, walk_local

_CHECKPOINT_FUNCS = ("_gradient_checkpointing_func", "checkpoint", "create_custom_forward")


@dataclass
class BlockCall:
    """A call of a block inside a loop (or a gradient-checkpointing call, `checkpoint=True`)."""

    call: ast.Call
    args: list[ast.expr]
    keywords: dict[str, ast.expr]
    has_star: bool
    targets: list[str | None]
    stmt: ast.stmt
    checkpoint: bool

    def output_access(self, one_output: bool) -> str | None:
        """`x = block(x, c)["x"]` / `x = block(x, c).sample`: the part of the block's output
        the loop keeps, when it is not the output itself; None otherwise. `one_output`: the
        list's pattern returns one stream (Pattern_2 / Pattern_3), where cache-dit's wrapper
        hands back the stream itself, a tensor (a one-element tuple unwrapped), so `[0]` is a
        part too (a row of the batch); of a two-output pattern's call it is an element of the
        tuple the wrapper hands back, as the block returns it."""
        value = self.stmt.value if isinstance(self.stmt, ast.Assign | ast.AnnAssign) else None
        if value is self.call and _one_element_unpack(self.stmt):
            # `(x,) = block(x, c)`: the unpacking would split the wrapper's tensor along its
            # first axis
            return "[0]"
        if isinstance(value, ast.Attribute) and value.value is self.call:
            return f".{value.attr}"
        if (
            isinstance(value, ast.Subscript)
            and value.value is self.call
            and (one_output or not is_int_index(value.slice))
        ):
            return f"[{ast.unparse(value.slice)}]"
        return None

    def direct(self) -> ast.Call:
        """The call as the block sees it: `runner(block, x, c)` read as `block(x, c)`."""
        first = self.call.args[0] if self.call.args else None
        if self.checkpoint or first is None or self.args != self.call.args[1:]:
            return self.call
        node = ast.Call(func=first, args=list(self.args), keywords=list(self.call.keywords))
        return ast.copy_location(node, self.call)


def is_int_index(node: ast.expr) -> bool:
    """`0`, `1`: an element of a returned tuple (not a key or a slice)."""
    return isinstance(node, ast.Constant) and isinstance(node.value, int)


def _one_element_unpack(stmt: ast.stmt) -> bool:
    """`(x,) = ...` / `[x] = ...`: one name unpacked from a one-element sequence."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else []
    return (
        len(targets) == 1
        and isinstance(targets[0], ast.Tuple | ast.List)
        and len(targets[0].elts) == 1
        and isinstance(targets[0].elts[0], ast.Name)
    )


def _is_block_callee(
    func: ast.expr, block_var: str | None, aliases: set[str], attr: str, index_vars: set[str]
) -> bool:
    if isinstance(func, ast.Name):
        return func.id == block_var or func.id in aliases
    # self.blocks[i](...)
    return isinstance(func, ast.Subscript) and self_attr(func.value) == attr


def runs_its_argument(func: ast.FunctionDef, position: int) -> bool:
    """`func` calls its parameter at `position` (`def auto_grad_checkpoint(module, *args):
    ... return module(*args, **kwargs)`): a runner the loop hands its block to."""
    params = [a.arg for a in func.args.posonlyargs + func.args.args]
    if params and params[0] == "self":
        params = params[1:]
    if position >= len(params):
        return False
    name = params[position]
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
        for n in walk_local(func)
    )


def _runner_call(
    node: ast.Call,
    block_var: str | None,
    aliases: set[str],
    attr: str,
    index_vars: set[str],
    runners: Mapping[str, ast.FunctionDef],
) -> bool:
    """`auto_grad_checkpoint(block, x, c)` / `self._run(block, x, c)`: the block handed first
    to a function of the model's file or a method of the model that calls it (or, imported from
    elsewhere, a function named for checkpointing: its inference path calls the block)."""
    if not node.args or not _is_block_callee(node.args[0], block_var, aliases, attr, index_vars):
        return False
    name = callee_name(node)
    method = self_attr(node.func)
    func = runners.get(f"self.{method}" if method else name or "")
    if func is not None:
        return runs_its_argument(func, 0)
    return name is not None and "checkpoint" in name.lower() and method is None


def collect_block_calls(
    loop: ast.For | ast.While,
    attr: str,
    block_var: str | None,
    index_vars: set[str],
    runners: Mapping[str, ast.FunctionDef] | None = None,
) -> list[BlockCall]:
    """The calls of the list's blocks in `loop`; `runners`: the functions of the model's file
    (by name) and methods of the model (`self.<name>`) a block may be handed to."""
    aliases: set[str] = set()
    for node in walk_local(loop):
        # `layer_ = layer` or `block = self.blocks[i]`
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            value = node.value
            if isinstance(target, ast.Name) and (
                (isinstance(value, ast.Name) and value.id == block_var)
                or (isinstance(value, ast.Subscript) and self_attr(value.value) == attr)
            ):
                aliases.add(target.id)
    if block_var is None and aliases:
        block_var = next(iter(aliases))
    calls: list[BlockCall] = []
    stmts = _innermost_stmts(loop)
    for node in walk_local(loop):
        if not isinstance(node, ast.Call):
            continue
        stmt = stmts.get(id(node), loop)
        targets = _targets_of(stmt, node)
        if _is_block_callee(node.func, block_var, aliases, attr, index_vars):
            calls.append(_make_call(node, list(node.args), stmt, targets, checkpoint=False))
        elif callee_name(node) in _CHECKPOINT_FUNCS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Call) and first.args:
                first = first.args[0]  # create_custom_forward(block)
            if _is_block_callee(first, block_var, aliases, attr, index_vars):
                calls.append(_make_call(node, list(node.args[1:]), stmt, targets, checkpoint=True))
        elif _runner_call(node, block_var, aliases, attr, index_vars, runners or {}):
            calls.append(_make_call(node, list(node.args[1:]), stmt, targets, checkpoint=False))
    return calls


def _make_call(
    node: ast.Call,
    args: list[ast.expr],
    stmt: ast.stmt,
    targets: list[str | None],
    checkpoint: bool,
) -> BlockCall:
    keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
    has_star = any(k.arg is None for k in node.keywords) or any(
        isinstance(a, ast.Starred) for a in args
    )
    return BlockCall(node, args, keywords, has_star, targets, stmt, checkpoint)


def _innermost_stmts(root: ast.stmt) -> dict[int, ast.stmt]:
    """id(node) -> the innermost simple statement (not a compound one) under `root` holding it,
    for every node `walk_local(root)` reaches, in one pass."""
    out: dict[int, ast.stmt] = {}
    compound = ast.If | ast.For | ast.While | ast.With | ast.Try
    skipped = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef
    stack: list[tuple[ast.AST, ast.stmt]] = [(root, root)]
    while stack:
        node, current = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, skipped):
                continue
            inner = (
                child
                if isinstance(child, ast.stmt) and not isinstance(child, compound)
                else current
            )
            out[id(child)] = inner
            stack.append((child, inner))
    return out


def _targets_of(stmt: ast.stmt, call: ast.Call) -> list[str | None]:
    if isinstance(stmt, ast.Assign) and stmt.targets:
        return target_names(stmt.targets[0])
    if isinstance(stmt, ast.AnnAssign):
        return target_names(stmt.target)
    if isinstance(stmt, ast.AugAssign):
        return target_names(stmt.target)
    return []
