"""Small helpers over the standard `ast` tree shared by the analysis passes."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import wraps
from typing import TypeVar

# Names that are never model streams: modules and builtins that appear at the head of expressions.
_NOT_STREAMS = frozenset(
    {"self", "torch", "F", "nn", "np", "math", "einops", "None", "True", "False"}
)


# Walks repeat many times per analysis (every pass reads forward and its statements again).
# Inside `cached_walks()` (an analysis run: it never changes a tree; codegen rewrites trees it
# parsed itself, outside) they are kept, keyed by the node's identity (the node is held, so its id
# is not reused); the cache is bounded and emptied with the parse cache.
_WALKS: dict[int, tuple[ast.AST, tuple[ast.AST, ...]]] = {}
_FULL_WALKS: dict[int, tuple[ast.AST, tuple[ast.AST, ...]]] = {}
_CALL_NAMES: dict[int, tuple[ast.Call, str]] = {}  # `call_name`'s spellings, kept likewise
_WALKS_LIMIT = 40_000
_CACHING: ContextVar[bool] = ContextVar("cdit_cached_walks", default=False)
_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
# leaves are walked as fast as they are looked up
_LEAVES = (ast.Name, ast.Constant, ast.expr_context, ast.alias, ast.arg)


# Answers kept for one analysis run only (they read the file system, which may change between
# runs): `run_memo(name)`, a dict per name, dropped when the run's `cached_walks()` ends.
_RUN_MEMOS: ContextVar[dict[str, dict] | None] = ContextVar("cdit_run_memos", default=None)


@contextmanager
def cached_walks() -> Iterator[None]:
    """Keep the walks of `walk_local` and `walk` while the block runs (an analysis run), and
    the run's `run_memo` dicts."""
    token = _CACHING.set(True)
    memos = _RUN_MEMOS.set({})
    try:
        yield
    finally:
        _RUN_MEMOS.reset(memos)
        _CACHING.reset(token)


def run_memo(name: str) -> dict | None:
    """The dict `name` of the current analysis run; None outside one."""
    memos = _RUN_MEMOS.get()
    return None if memos is None else memos.setdefault(name, {})


def clear_walks() -> None:
    _WALKS.clear()
    _FULL_WALKS.clear()
    _CALL_NAMES.clear()
    for facts in _NODE_FACTS:
        facts.clear()


_N = TypeVar("_N", bound=ast.AST)
_T = TypeVar("_T")
_NODE_FACTS: list[dict] = []  # caches emptied with the walks (`per_node`, `keep_with_walks`)


def keep_with_walks(cache: dict) -> dict:
    """Register `cache` to be emptied with the walks (`clear_walks`); returns it."""
    _NODE_FACTS.append(cache)
    return cache


def per_node(compute: Callable[[_N], _T]) -> Callable[[_N], _T]:
    """`compute(node)` kept like a walk inside `cached_walks()` (keyed by the node's identity,
    the node held; bounded; emptied with the walks). Its value is shared by every caller: it
    must be one nobody changes (a frozenset, a tuple), or the caller copies it."""
    kept: dict[int, tuple[ast.AST, object]] = {}
    _NODE_FACTS.append(kept)

    @wraps(compute)
    def reader(node: _N) -> _T:
        if not _CACHING.get():
            return compute(node)
        hit = kept.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]  # type: ignore[return-value]
        value = compute(node)
        if len(kept) >= _WALKS_LIMIT:
            kept.clear()
        kept[id(node)] = (node, value)
        return value

    return reader


def walk_local(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk` that does not descend into nested functions, lambdas or classes (preorder, the
    last child first)."""
    return _kept(_WALKS, node, _walk_local, _walk_local)


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk`, kept inside `cached_walks()` like `walk_local`'s walks."""
    return _kept(_FULL_WALKS, node, ast.walk, _breadth_first)


def _kept(
    cache: dict[int, tuple[ast.AST, tuple[ast.AST, ...]]],
    node: ast.AST,
    walker: Callable[[ast.AST], Iterator[ast.AST]],
    eager: Callable[[ast.AST], Iterable[ast.AST]],
) -> Iterator[ast.AST]:
    """`walker`'s walk of `node`; inside `cached_walks()` the walk `eager` lists (the same
    nodes in the same order), kept."""
    if not _CACHING.get():
        return walker(node)
    if isinstance(node, _LEAVES):  # walked as fast as looked up: not kept
        return iter(eager(node))
    hit = cache.get(id(node))
    if hit is not None and hit[0] is node:
        return iter(hit[1])
    nodes = tuple(eager(node))
    if len(cache) >= _WALKS_LIMIT:
        cache.clear()
    cache[id(node)] = (node, nodes)
    return iter(nodes)


def _walk_local(node: ast.AST) -> Iterator[ast.AST]:
    # `ast.iter_child_nodes` inlined: the fields read directly (the same children, in order)
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for field in current._fields:
            value = getattr(current, field, None)
            if isinstance(value, ast.AST):
                if not isinstance(value, _NESTED):
                    stack.append(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST) and not isinstance(item, _NESTED):
                        stack.append(item)


def _breadth_first(node: ast.AST) -> list[ast.AST]:
    """`ast.walk`'s order (breadth first, children in field order), listed at once with the
    fields read directly instead of through `ast.iter_child_nodes`."""
    out = [node]
    index = 0
    while index < len(out):
        current = out[index]
        index += 1
        for field in current._fields:
            value = getattr(current, field, None)
            if isinstance(value, ast.AST):
                out.append(value)
            elif isinstance(value, list):
                out += [item for item in value if isinstance(item, ast.AST)]
    return out


def body_holding(nodes: Iterable[ast.AST], stmt: ast.stmt) -> list[ast.stmt] | None:
    """The statement list (a `body`, `orelse` or `finalbody`) among `nodes` (a walk of a
    function: `walk` or `walk_local`) that holds `stmt` directly."""
    for node in nodes:
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and any(s is stmt for s in body):
                return body
    return None


def first_use_after(method: ast.FunctionDef, name: str, line: int) -> ast.Name | None:
    """The first use of `name` in `method` after `line` (outside nested functions), reads before
    writes on one line (`i = i + 1` reads `i`); None when it is not used there."""
    uses = sorted(
        (
            n
            for n in walk_local(method)
            if isinstance(n, ast.Name) and n.id == name and n.lineno > line
        ),
        key=lambda n: (n.lineno, not isinstance(n.ctx, ast.Load), n.col_offset),
    )
    return uses[0] if uses else None


def names_read(node: ast.AST) -> set[str]:
    return {
        n.id for n in walk_local(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }


def names_assigned(stmt: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in walk_local(stmt):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
    return out


def target_names(target: ast.expr) -> list[str | None]:
    """Names of an assignment target, in order; `None` for parts that are not plain names."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        out: list[str | None] = []
        for elt in target.elts:
            out.append(elt.id if isinstance(elt, ast.Name) else None)
        return out
    return [None]


def self_attr(node: ast.AST) -> str | None:
    """`self.<attr>` -> attr."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    ):
        return node.attr
    return None


def call_name(node: ast.Call) -> str:
    """The callee as source text (`torch.nn.functional.silu`, `self.blocks[0].forward`).

    Chains of names, attributes and calls are spelled piece by piece (as `ast.unparse` spells
    them), so a long chain `f()()()...` costs linear time, not the square of its length. Inside
    `cached_walks()` each call's spelling is kept like a walk."""
    if not _CACHING.get():
        return _spell_call(node)
    hit = _CALL_NAMES.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    name = _spell_call(node)
    if len(_CALL_NAMES) >= _WALKS_LIMIT:
        _CALL_NAMES.clear()
    _CALL_NAMES[id(node)] = (node, name)
    return name


def _spell_call(node: ast.Call) -> str:
    parts: list[str] = []
    cur: ast.expr = node.func
    try:
        while True:
            if isinstance(cur, ast.Attribute):
                parts.append("." + cur.attr)
                cur = cur.value
            elif isinstance(cur, ast.Call):
                args = [ast.unparse(a) for a in cur.args]
                args += [ast.unparse(k) for k in cur.keywords]
                parts.append("(" + ", ".join(args) + ")")
                cur = cur.func
            elif isinstance(cur, ast.Name):
                parts.append(cur.id)
                break
            else:
                return ast.unparse(node.func)
        return "".join(reversed(parts))
    except (RecursionError, ValueError):
        return ""


def callee_name(node: ast.Call) -> str:
    """The last part of the callee's name (`silu` of `torch.nn.functional.silu(x)`), in constant
    time for names and attributes: `callee_name(node)`."""
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Call):
        return ""  # `make()(x)`: the callee has no name of its own
    return last_part(call_name(node))


def last_part(dotted: str) -> str:
    return dotted.rsplit(".", 1)[-1]


def positional_params(func: ast.FunctionDef) -> list[str]:
    """Parameters that can be bound positionally, without `self`."""
    params = [a.arg for a in func.args.posonlyargs + func.args.args]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    return params


def declared_params(func: ast.FunctionDef) -> list[str]:
    """Named parameters in declared order, without `self`: the positional ones, then the
    keyword-only ones (`def forward(self, *, x, cond)`); `*args` / `**kwargs` excluded. Zipping a
    call's positional arguments against it is safe: Python binds none to a keyword-only one."""
    return positional_params(func) + [a.arg for a in func.args.kwonlyargs]


def is_call_output(value: ast.expr, is_call: Callable[[ast.AST], bool]) -> bool:
    """`value` is a call's output as it is: the call, a part of it (`["x"]`, `.sample`, `[0]`),
    or, for a conditional, every branch holding the call (`ckpt(block, x) if training else
    block(x)`); not a combination (`x + block(x)`)."""
    if is_call(value):
        return True
    if isinstance(value, ast.Subscript | ast.Attribute):
        return is_call_output(value.value, is_call)
    if isinstance(value, ast.IfExp):
        held = [b for b in (value.body, value.orelse) if any(is_call(n) for n in walk(b))]
        return bool(held) and all(is_call_output(b, is_call) for b in held)
    return False


def param_defaults(func: ast.FunctionDef) -> dict[str, ast.expr]:
    args = func.args.posonlyargs + func.args.args
    defaults = dict(
        zip(
            [a.arg for a in args[len(args) - len(func.args.defaults) :]],
            func.args.defaults,
            strict=True,
        )
    )
    for arg, default in zip(func.args.kwonlyargs, func.args.kw_defaults, strict=True):
        if default is not None:
            defaults[arg.arg] = default
    return defaults


def is_none(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def mentions_gradient_checkpointing(test: ast.AST) -> bool:
    text = ast.unparse(test)
    return "gradient_checkpointing" in text or "is_grad_enabled" in text


def not_none_guards(test: ast.AST) -> set[str]:
    """Names `x` such that `test` can only be true when `x is not None` (conjunctive terms)."""
    out: set[str] = set()
    terms = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    for term in terms:
        if (
            isinstance(term, ast.Compare)
            and len(term.ops) == 1
            and isinstance(term.ops[0], ast.IsNot)
            and is_none(term.comparators[0])
        ):
            out |= {n for n in names_read(term.left)}
            attr = self_attr(term.left)
            if attr:
                out.add(f"self.{attr}")
        elif (
            isinstance(term, ast.Compare)
            and len(term.ops) == 1
            and isinstance(term.ops[0], ast.Eq | ast.In)
            and isinstance(term.left, ast.Name)
            and isinstance(term.comparators[0], ast.Constant | ast.Tuple | ast.List | ast.Set)
            and not is_none(term.comparators[0])
        ):
            out.add(term.left.id)  # `mode == "extract"` implies `mode is not None`
        elif isinstance(term, ast.Name):
            out.add(term.id)
    return out


def primary_source(expr: ast.AST) -> str | None:
    """The first variable an expression is computed from (`h + attn(x)` -> `h`, `f(h)` -> `h`)."""
    if isinstance(expr, ast.Name):
        return None if expr.id in _NOT_STREAMS else expr.id
    if isinstance(expr, ast.BinOp):
        return primary_source(expr.left) or primary_source(expr.right)
    if isinstance(expr, ast.Call):
        func = expr.func
        if (
            isinstance(func, ast.Attribute)
            and not self_attr(func)
            and not (isinstance(func.value, ast.Name) and func.value.id in _NOT_STREAMS)
        ):
            # h.to(dtype), h.clamp(...)
            found = primary_source(func.value)
            if found:
                return found
        for arg in expr.args:
            found = primary_source(arg)
            if found:
                return found
        return None
    if isinstance(expr, ast.Subscript):
        return primary_source(expr.value)
    if isinstance(expr, ast.Attribute):
        return primary_source(expr.value)
    if isinstance(expr, ast.IfExp):
        return primary_source(expr.body)
    if isinstance(expr, ast.Starred):
        return primary_source(expr.value)
    return None


def body_statements(func: ast.FunctionDef) -> Iterator[ast.stmt]:
    """All statements of a function in source order, including nested blocks (not nested defs)."""
    for node in walk_local(func):
        if isinstance(node, ast.stmt) and node is not func:
            yield node


def simple_name(node: ast.AST) -> str | None:
    """The last part of a name or attribute chain (`a.b.C` -> `C`, `C` -> `C`), else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def names_in(node: ast.AST) -> set[str]:
    """Every `Name` in `node`, read or written, nested scopes included (unlike `names_read`)."""
    return {n.id for n in walk(node) if isinstance(n, ast.Name)}


def short_text(node: ast.AST, limit: int = 70) -> str:
    """Source text of `node` on one line, cut to `limit` characters (to quote in evidence)."""
    try:
        s = ast.unparse(node)
    except Exception:
        return "<expr>"
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def int_literal(node: ast.AST | None) -> int | None:
    """`3` -> 3, `-1` -> -1; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int)
    ):
        return -node.operand.value
    return None


def registered_buffer(node: ast.AST) -> tuple[str, ast.expr] | None:
    """`self.register_buffer("name", value, ...)`: (name, value); None for anything else."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "register_buffer"
        and len(node.args) >= 2
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value, node.args[1]
    return None
