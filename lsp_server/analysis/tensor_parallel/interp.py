"""A small abstract interpreter over `ast` for module `__init__`s and `forward`s.

It executes statements over the values of `values.py`: `if` tests are decided where the values are
known (both branches are run and joined otherwise; while building a module, a branch that only a
different config would take is run in "shadow" mode so that the sub-modules it creates are known
as conditional), loops over `nn.ModuleList`/`nn.Sequential` run once per child, other loops once.
Calls are dispatched by `calls.py`. Nothing is imported or executed for real.
"""

from __future__ import annotations

import ast
from typing import Any

from .expressions import Expressions
from .frame import MAX_DEPTH, Frame, join_env
from .values import SHAPE, UNKNOWN, WIDTH, Alt, Obj, Ref, Scalar, Tensor, Tup, join, union


class Interp(Expressions):
    """Statement execution; `calls.Calls` (a subclass) adds call semantics."""

    def __init__(self) -> None:
        self.depth = 0
        self.conds: list[tuple[ast.expr, bool]] = []  # init-time conditions (test, negated)
        self.shadow = 0
        # a function defined inside a function sees its definer's variables (`self`, sizes)
        self.closures: dict[int, dict[str, Any]] = {}

    def attach(self, frame: Frame, attr: str, value: Any) -> None:  # pragma: no cover
        raise NotImplementedError

    def run_block(self, body: list[ast.stmt], frame: Frame) -> None:
        for stmt in body:
            if frame.dead:
                return
            self.run_stmt(stmt, frame)

    def run_stmt(self, stmt: ast.stmt, frame: Frame) -> None:
        if isinstance(stmt, ast.Expr):
            if not isinstance(stmt.value, ast.Constant):
                self.eval(stmt.value, frame)
        elif isinstance(stmt, ast.Assign):
            value = self.eval(stmt.value, frame)
            for target in stmt.targets:
                self.assign(target, value, frame)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self.assign(stmt.target, self.eval(stmt.value, frame), frame)
        elif isinstance(stmt, ast.AugAssign):
            current = self.eval(stmt.target, frame)
            value = self.binop(current, self.eval(stmt.value, frame), stmt.op, frame, stmt.lineno)
            self.assign(stmt.target, value, frame)
        elif isinstance(stmt, ast.If):
            self.run_if(stmt, frame)
        elif isinstance(stmt, ast.For | ast.AsyncFor):
            self.run_for(stmt, frame)
        elif isinstance(stmt, ast.While):
            self.run_optional(stmt.body, frame)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            for item in stmt.items:
                value = self.eval(item.context_expr, frame)
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, value, frame)
            self.run_block(stmt.body, frame)
        elif isinstance(stmt, ast.Try):
            self.run_block(stmt.body, frame)
            if not frame.dead:
                self.run_block(stmt.orelse, frame)
            self.run_block(stmt.finalbody, frame)
        elif isinstance(stmt, ast.Return):
            frame.returns.append(
                self.eval(stmt.value, frame) if stmt.value is not None else Scalar(None)
            )
            frame.dead = True
        elif isinstance(stmt, ast.Raise):
            frame.dead = True
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            frame.env.update(self.import_names(stmt, frame))
        elif isinstance(stmt, ast.FunctionDef):
            frame.env[stmt.name] = Ref("func", stmt.name, stmt, frame.source)
            self.closures[id(stmt)] = frame.env

    def import_names(self, stmt: ast.Import | ast.ImportFrom, frame: Frame) -> dict[str, Any]:
        return {}  # pragma: no cover - overridden

    def run_if(self, stmt: ast.If, frame: Frame) -> None:
        truth, var = self.truth(self.eval(stmt.test, frame))
        if truth is not None and not var:
            self.run_block(stmt.body if truth else stmt.orelse, frame)
            return
        if truth is not None and frame.building is not None:
            # A config default decides the branch; the other one exists for other checkpoints.
            self.run_block(stmt.body if truth else stmt.orelse, frame)
            other = stmt.orelse if truth else stmt.body
            if other:
                shadow = frame.fork()
                shadow.returns = []
                self.conds.append((stmt.test, truth))
                self.shadow += 1
                try:
                    self.run_block(other, shadow)
                finally:
                    self.shadow -= 1
                    self.conds.pop()
            return
        self.run_both(stmt.test, stmt.body, stmt.orelse, frame)

    def run_both(
        self, test: ast.expr, body: list[ast.stmt], orelse: list[ast.stmt], frame: Frame
    ) -> None:
        first, second = frame.fork(), frame.fork()
        building = frame.building is not None
        for branch, block, negated in ((first, body, False), (second, orelse, True)):
            if building:
                self.conds.append((test, negated))
            try:
                self.run_block(block, branch)
            finally:
                if building:
                    self.conds.pop()
        if first.dead and second.dead:
            frame.dead = True
        elif first.dead:
            frame.env = second.env
        elif second.dead:
            frame.env = first.env
        else:
            frame.env = join_env(first.env, second.env)

    def run_optional(self, body: list[ast.stmt], frame: Frame) -> None:
        """A block that may run zero or more times: run once and join with the skipped path."""
        branch = frame.fork()
        self.run_block(body, branch)
        if not branch.dead:
            frame.env = join_env(frame.env, branch.env)

    def run_for(self, stmt: ast.For | ast.AsyncFor, frame: Frame) -> None:
        items = self.iterate(self.eval(stmt.iter, frame))
        if items is None:
            branch = frame.fork()
            self.assign(stmt.target, self.element_of(self.eval(stmt.iter, frame)), branch)
            self.run_block(stmt.body, branch)
            if not branch.dead:
                frame.env = join_env(frame.env, branch.env)
            return
        for item in items[:32]:
            self.assign(stmt.target, item, frame)
            self.run_block(stmt.body, frame)
            if frame.dead:
                return

    def element_of(self, value: Any) -> Any:
        if isinstance(value, Tensor):
            return value
        if isinstance(value, Tup) and value.items:
            merged = value.items[0]
            for item in value.items[1:]:
                merged = join(merged, item)
            return merged
        return Scalar()

    def assign(self, target: ast.expr, value: Any, frame: Frame) -> None:
        if isinstance(target, ast.Name):
            frame.env[target.id] = value
        elif isinstance(target, ast.Tuple | ast.List):
            starred = [i for i, e in enumerate(target.elts) if isinstance(e, ast.Starred)]
            parts = self.unpack(value, len(target.elts))
            for i, (elt, part) in enumerate(zip(target.elts, parts, strict=True)):
                if starred and i == starred[0]:
                    self.assign(elt.value, Tup((part,)), frame)  # type: ignore[attr-defined]
                else:
                    self.assign(elt, part, frame)
        elif isinstance(target, ast.Attribute):
            base = self.eval(target.value, frame)
            if isinstance(target.value, ast.Name) and target.value.id == "self":
                if frame.building is not None and base is frame.building:
                    self.attach(frame, target.attr, value)
                elif isinstance(base, Obj):
                    base.attrs[target.attr] = value
            elif isinstance(base, Obj):
                base.attrs[target.attr] = value
        elif isinstance(target, ast.Subscript):
            if isinstance(target.value, ast.Name) and isinstance(value, Tensor):
                old = frame.env.get(target.value.id)
                frame.env[target.value.id] = join(old, value) if old is not None else value
        elif isinstance(target, ast.Starred):
            self.assign(target.value, value, frame)

    def unpack(self, value: Any, count: int) -> list[Any]:
        if isinstance(value, Tup):
            items = list(value.items)
            if len(items) == count:
                return items
            rest = union(items) if any(isinstance(i, Tensor) for i in items) else Scalar()
            return (items + [rest] * count)[:count] if len(items) < count else items[:count]
        if isinstance(value, Alt):
            columns = [self.unpack(o, count) for o in value.options]
            out = columns[0]
            for column in columns[1:]:
                out = [join(a, b) for a, b in zip(out, column, strict=True)]
            return out
        if isinstance(value, Tensor):
            return [value] * count
        items = self.iterate(value)
        if items is not None and len(items) == count:
            return items
        deps = value.deps if isinstance(value, Scalar) else frozenset()
        out = [Scalar(UNKNOWN, False, deps)] * count
        if isinstance(value, Scalar) and value.whole == SHAPE and count:
            out[-1] = Scalar(UNKNOWN, False, deps, whole=WIDTH)  # `b, n, d = x.shape`
        return out


__all__ = ["MAX_DEPTH", "Frame", "Interp"]
