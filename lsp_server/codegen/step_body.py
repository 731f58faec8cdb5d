"""The loop body as a per-block step runs it (`block_loop`): without the gradient-checkpointing
branches (never taken at inference), the block called directly where the loop hands it to a
runner; the calls that hand the index to an object's method (per-layer state) are named."""

from __future__ import annotations

import ast


class StepError(Exception):
    """The loop cannot be turned into per-block steps; the message says why."""


_TENSOR_MODULES = ("torch", "F", "nn", "np", "math", "einops")


def stateful_calls(body: list[ast.stmt], index_var: str) -> list[str]:
    """`kv_cache.get_layer(i)`: the calls handing the block index to an object's method, which
    selects per-layer state (a KV cache). They move into the step with the block's call: a
    cached step then skips that state's use as it skips the block's work, which is right for
    state written only on computed steps (a prefix KV cache filled on the first step, which
    cache-dit never caches) and an approximation like the block's residual otherwise. Indexing
    data (`bundles[:, ids[i]]`) or testing the index (`mask if i > 1 else None`) is not state."""
    found: list[str] = []
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
                found.append(ast.unparse(node))
    return found


def _mentions_checkpointing(test: ast.expr) -> bool:
    return "gradient_checkpointing" in ast.unparse(test) or "is_grad_enabled" in ast.unparse(test)


def inference_body(body: list[ast.stmt]) -> list[ast.stmt]:
    """The body without the gradient-checkpointing branches (never taken at inference)."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.If) and _mentions_checkpointing(stmt.test):
            out += inference_body(stmt.orelse)
        else:
            out.append(stmt)
    return out


class _RunnerToCall(ast.NodeTransformer):
    """`runner(block, *args)` -> `block(*args)`: the block handed to a function that calls it
    (`auto_grad_checkpoint(block, x, c)`; the analysis checked the runner), called directly."""

    def __init__(self, block_var: str) -> None:
        self.block_var = block_var

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        first = node.args[0] if node.args else None
        direct = isinstance(node.func, ast.Name) and node.func.id == self.block_var
        if not direct and isinstance(first, ast.Name) and first.id == self.block_var:
            return ast.copy_location(
                ast.Call(ast.Name(self.block_var, ast.Load()), node.args[1:], node.keywords), node
            )
        return node


def direct_calls(body: list[ast.stmt], block_var: str) -> list[ast.stmt]:
    """The body with the block called directly where it only calls it through a runner."""
    if any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == block_var
        for stmt in body
        for n in ast.walk(stmt)
    ):
        return body
    return [_RunnerToCall(block_var).visit(stmt) for stmt in body]
