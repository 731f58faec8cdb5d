"""Reductions over the tokens made in the functions a module hands its tokens to.

`x = x + pool_tokens(x)` with `def pool_tokens(t): return t.mean(dim=1, keepdim=True)`: the
function returns a reduction over the tokens it is handed (`token_reductions.token_reduction`,
read in the function with the handed parameter as its stream), and the call's result flows
back into the module's stream as an inline reduction would. Values are handed as they are
(names made from the stream by token-local work, no relayout), so the tokens stay on axis 1 of
the parameter. Followed a few levels down, each function and parameter once.
"""

from __future__ import annotations

import ast

from ..parallel_input import ParallelContext
from .called_functions import Caller, bound_arguments, callee, calls_in
from .called_windows import MAX_DEPTH, CallChain, Step
from .token_reductions import Reductions, plain_of, token_reduction


def called_reduction(
    ctx: ParallelContext, caller: Caller | None, stream: str | None
) -> tuple[int, str] | None:
    """The first call of `caller` whose function returns a reduction over the tokens of a value
    made from `stream`, flowing back into the stream: (the call's line, message)."""
    if caller is None or stream is None:
        return None
    reading = _Reductions(ctx)
    hit = token_reduction(caller.func.body, stream, also=reading.finder(caller, 0))
    found = reading.chains.get(id(hit)) if hit is not None else None
    return (found.steps[0][1].lineno, found.message(caller)) if found else None


class _Reductions:
    def __init__(self, ctx: ParallelContext) -> None:
        self.ctx = ctx
        self.chains: dict[int, CallChain] = {}  # a call's id -> the reduction it leads to
        # (function, parameter) -> the calls further down and the reduction; None: none
        self.results: dict[tuple[int, str], tuple[tuple[Step, ...], ast.Call] | None] = {}

    def finder(self, caller: Caller, depth: int) -> Reductions:
        def find(value: ast.expr, tracked: set[str]) -> ast.Call | None:
            for call in calls_in(value):
                if self._reduces(caller, call, tracked, depth):
                    return call
            return None

        return find

    def _reduces(self, caller: Caller, call: ast.Call, tracked: set[str], depth: int) -> bool:
        """`call` hands a tracked value to a function returning a reduction over its tokens."""
        if not any(
            plain_of(arg, tracked) for arg in [*call.args, *(k.value for k in call.keywords)]
        ):
            return False
        inner = callee(self.ctx, caller, call)
        if inner is None:
            return False
        for param, arg in bound_arguments(call, inner.func):
            found = self._result(inner, param, depth) if plain_of(arg, tracked) else None
            if found is not None:
                steps, hit = found
                self.chains[id(call)] = CallChain(((inner, call), *steps), hit, False)
                return True
        return False

    def _result(
        self, inner: Caller, param: str, depth: int
    ) -> tuple[tuple[Step, ...], ast.Call] | None:
        """The reduction `inner` returns over the tokens of `param` (read once)."""
        key = (id(inner.func), param)
        if key not in self.results:
            self.results[key] = None  # a recursive function reads as none
            deeper = self.finder(inner, depth + 1) if depth + 1 < MAX_DEPTH else None
            hit = token_reduction(inner.func.body, param, also=deeper)
            further = self.chains.get(id(hit)) if hit is not None else None
            if further is not None:
                self.results[key] = (further.steps, further.hit)
            elif hit is not None:
                self.results[key] = ((), hit)
        return self.results[key]
