"""Block parameters that act like a rotary embedding: they reach the attention's queries and keys
but not its values.

Read where a block runs attention itself (`scaled_dot_product_attention` in its `forward`, or in
a function of the same file it calls: `attention(q, k, v, pe=pe)`, which applies `pe` to `q` and
`k`). That is what a position table does whatever it is called, so the module that computes it
is a position module even when its name says nothing (`self.pe_embedder(ids)`).
"""

from __future__ import annotations

import ast

from ..astutil import names_read, walk, walk_local
from ..parallel_input import ParallelBlockList, ParallelContext
from .attention_facts import calls_sdpa, sdpa_names


def rotary_block_params(ctx: ParallelContext, block: ParallelBlockList) -> set[str]:
    """Parameters of the block's `forward` that reach the queries and keys of one of its own
    SDPA calls and not the values (empty when the block does not call SDPA itself)."""
    found = ctx.resolver.find_method(block.block, "forward")
    if found is None:
        return set()
    func, owner = found
    source = owner.source or ctx.source
    if source is None:
        return set()
    aliases = sdpa_names(source.import_statements())
    params = _params(func)
    origins = _origins(func)
    found: set[str] = set()
    for node in walk_local(func):
        if not isinstance(node, ast.Call):
            continue
        if calls_sdpa(node, aliases):
            qkv = _qkv(node)
            if qkv is None:
                return set()
            found |= _rotary(*(origins(arg, params) for arg in qkv))
            continue
        helper = source.top_level.get(node.func.id) if isinstance(node.func, ast.Name) else None
        if isinstance(helper, ast.FunctionDef):
            inner = _helper_rotary(helper, aliases)
            if inner is None:
                continue
            bound = _bind(helper, node)
            parts = [
                set().union(*(origins(bound[p], params) for p in group if p in bound))
                for group in inner
            ]
            found |= _rotary(*parts)
    return found


def _helper_rotary(
    helper: ast.FunctionDef, aliases: set[str]
) -> tuple[set[str], set[str], set[str]] | None:
    """The helper's parameters reaching SDPA's query, key and value; None without SDPA."""
    params = _params(helper)
    origins = _origins(helper)
    for node in walk_local(helper):
        if isinstance(node, ast.Call) and calls_sdpa(node, aliases):
            qkv = _qkv(node)
            if qkv is None:
                return None
            q, k, v = (origins(arg, params) for arg in qkv)
            return q, k, v
    return None


def _rotary(query: set[str], key: set[str], value: set[str]) -> set[str]:
    """Rotary tables rotate both the queries and the keys of one attention, never the values
    (a cross-attention's queries come from the stream, its keys and values from the context:
    what reaches only the queries there is the stream's modulation, not a position table)."""
    return (query & key) - value


def _params(func: ast.FunctionDef) -> set[str]:
    args = func.args.posonlyargs + func.args.args + func.args.kwonlyargs
    return {a.arg for a in args if a.arg not in ("self", "cls")}


def _qkv(call: ast.Call) -> tuple[ast.expr, ast.expr, ast.expr] | None:
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    names = ("query", "key", "value")
    found = [
        call.args[i] if i < len(call.args) else keywords.get(name) for i, name in enumerate(names)
    ]
    if any(f is None for f in found):
        return None
    q, k, v = found
    assert q is not None and k is not None and v is not None
    return q, k, v


def _bind(helper: ast.FunctionDef, call: ast.Call) -> dict[str, ast.expr]:
    """The helper's parameters -> the argument expressions of `call`."""
    names = [a.arg for a in helper.args.posonlyargs + helper.args.args]
    bound = dict(zip(names, call.args, strict=False))
    bound.update({k.arg: k.value for k in call.keywords if k.arg})
    return bound


def _origins(func: ast.FunctionDef):
    """`origins(expr, params)`: the parameters `expr` (read at its own line) derives from, each
    name through its latest assignment above the line that reads it (`img = img + attn(...)`
    after the attention does not feed the attention's inputs); tuple unpacking reads the whole
    right-hand side."""
    assigned: dict[str, list[tuple[int, set[str]]]] = {}
    for node in walk_local(func):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
            read = names_read(node.value)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in walk(target):
                    if isinstance(name, ast.Name):
                        extra = {name.id} if isinstance(node, ast.AugAssign) else set()
                        assigned.setdefault(name.id, []).append((node.lineno, read | extra))

    def origins(expr: ast.expr, params: set[str]) -> set[str]:
        found: set[str] = set()
        seen: set[tuple[str, int]] = set()
        todo = [
            (name, expr.lineno if hasattr(expr, "lineno") else 10**9) for name in names_read(expr)
        ]
        while todo:
            name, line = todo.pop()
            if (name, line) in seen:
                continue
            seen.add((name, line))
            earlier = [a for a in assigned.get(name, ()) if a[0] < line]
            if earlier:
                at, read = max(earlier, key=lambda a: a[0])
                todo += [(n, at) for n in read]
            elif name in params:
                found.add(name)
        return found

    return origins
