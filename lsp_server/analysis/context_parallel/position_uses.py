"""The sequence axis of a position table read from where the blocks use it.

A table whose axes forward's code does not show (built by a loop over padded samples, a helper in
another package) still meets the queries somewhere: the block hands it to its attention, the
attention (or its processor, or a rotary function it calls) multiplies the queries by it. The
queries' layout is followed from the block's input (`(B, S, C)`) through the projections and the
layout ops (`view`, `unflatten`, `transpose`, `permute`, `reshape(*x.shape[:-1], -1, 2)`,
`view_as_complex`, einops `rearrange`); the table's through its unit axes (`unsqueeze(2)`,
`cos[:, None]`, `cos[None, None]`) and tuple elements (`cos, sin = freqs`). Broadcasting aligns
the two from the right: the table rank for which the table's last axis meets the features and the
queries' sequence axis meets a table axis (not a unit one) names that axis. Branches on constant
arguments (`use_real=False`, `sequence_dim=1`) are followed as the call takes them. Every use
read must agree; None when none is read.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..astutil import callee_name, declared_params, int_literal, self_attr, walk
from ..parallel_input import ParallelBlockList, ParallelContext
from ..sources import ClassRef, SourceFile
from .attention_modules import module_assigns, processor_of
from .constant_branches import UNKNOWN, constant, defaults, truth
from .query_layout import KEEP_LAYOUT, Layout, dim_arg, moved_layout, norm_dim, rearranged
from .table_broadcast import TableView, index_pattern, solve_axis

_MAX_DEPTH = 5


@dataclass
class _Found:
    axes: dict[int | None, set[int]] = field(default_factory=dict)  # element -> axes read
    how: list[str] = field(default_factory=list)


def used_axes(
    ctx: ParallelContext, block: ParallelBlockList, param: str
) -> tuple[tuple[int, ...], str] | None:
    """The sequence axis of the table `param` of the blocks of `block`, read from where the
    queries meet it: one axis, or one per element of a tuple the code unpacks; None when no use
    is read or the uses disagree."""
    found = ctx.resolver.find_method(block.block, "forward")
    if found is None:
        return None
    func, owner = found
    source = owner.source or ctx.source
    params = declared_params(func)
    if param not in params or not params:
        return None
    reader = _Reader(ctx)
    layouts = {params[0]: Layout(3, 1)}  # the stream the blocks receive: (B, S, C)
    # attributes of `self` resolve on the block's own class (a subclass may rebuild a module its
    # base's `forward` calls); names in the function, in the file that defines it
    reader.visit(_Scope(reader, func, block.block, source, {param: TableView()}, layouts, {}, 0))
    result = reader.found.axes
    if not result or any(len(axes) != 1 for axes in result.values()):
        return None
    how = "; ".join(dict.fromkeys(reader.found.how))
    if set(result) == {None}:
        return (next(iter(result[None])),), how
    if None in result:
        return None
    elements = sorted(result)
    if elements != list(range(len(elements))):
        return None
    return tuple(next(iter(result[e])) for e in elements), how


class _Reader:
    def __init__(self, ctx: ParallelContext) -> None:
        self.ctx = ctx
        self.found = _Found()
        self.seen: set[tuple[object, ...]] = set()

    def visit(self, scope: _Scope) -> None:
        """Read one function, once per set of tables and query layouts it is handed."""
        key = (id(scope.func), tuple(sorted(scope.tables)), tuple(sorted(scope.layouts.items())))
        if scope.depth > _MAX_DEPTH or key in self.seen:
            return
        self.seen.add(key)
        scope.run(scope.func.body)


class _Scope:
    """One function being read: names bound to table views and query layouts, in order."""

    def __init__(
        self,
        reader: _Reader,
        func: ast.FunctionDef,
        owner: ClassRef | None,
        source: SourceFile,
        tables: dict[str, TableView],
        layouts: dict[str, Layout],
        constants: dict[str, object],
        depth: int,
    ) -> None:
        self.reader = reader
        self.func = func
        self.owner = owner
        self.source = source
        self.tables = tables
        self.layouts = layouts
        self.constants = constants
        self.depth = depth
        self.local_functions: dict[str, ast.FunctionDef] = {}

    # statements ---------------------------------------------------------------------------
    def run(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If):
                taken = truth(stmt.test, self.constants)
                if taken is not False:
                    self.run(stmt.body)
                if taken is not True:
                    self.run(stmt.orelse)
                continue
            if isinstance(stmt, ast.For | ast.While | ast.With):
                self.run(stmt.body)
                continue
            if isinstance(stmt, ast.Try):
                self.run(stmt.body)
                continue
            if isinstance(stmt, ast.FunctionDef):  # a helper defined in the function
                self.local_functions[stmt.name] = stmt
                continue
            if isinstance(stmt, ast.ClassDef):
                continue
            self._scan(stmt)
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    self._bind(target, stmt.value)
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                self._bind(stmt.target, stmt.value)

    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            view = self.view(value)
            layout = self.layout(value) if view is None else None
            self.tables.pop(target.id, None)
            self.layouts.pop(target.id, None)
            if view is not None:
                self.tables[target.id] = view
            elif layout is not None:
                self.layouts[target.id] = layout
            return
        if not isinstance(target, ast.Tuple | ast.List):
            return
        names = [e.id if isinstance(e, ast.Name) else None for e in target.elts]
        view = self.view(value)
        split = self._split_layout(value)
        for name in names:
            if name:
                self.tables.pop(name, None)
                self.layouts.pop(name, None)
        if view is not None and view.element is None and not view.ops:  # `cos, sin = freqs`
            for index, name in enumerate(names):
                if name:
                    self.tables[name] = TableView(index)
            return
        if isinstance(value, ast.Tuple) and len(value.elts) == len(names):
            for name, elt in zip(names, value.elts, strict=True):
                if name:
                    self._bind(ast.Name(name, ast.Store()), elt)
            return
        if split is not None:
            for name in names:
                if name:
                    self.layouts[name] = split

    # uses -----------------------------------------------------------------------------------
    def _scan(self, stmt: ast.stmt) -> None:
        for node in walk(stmt):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                self._product(node.left, node.right)
                self._product(node.right, node.left)
            elif isinstance(node, ast.Call):
                self._call(node)

    def _product(self, table: ast.expr, other: ast.expr) -> None:
        view = self.view(table)
        layout = self.layout(other)
        if view is None or layout is None:
            return
        axis = solve_axis(view, layout)
        if axis is None:
            return
        found = self.reader.found
        found.axes.setdefault(view.element, set()).add(axis)
        where = self.owner.name if self.owner is not None else self.func.name
        found.how.append(
            f"read where `{where}` multiplies a {layout.rank}-D query by it "
            f"(`{ast.unparse(table)}`, line {table.lineno}): sequence axis {axis}"
        )

    def _call(self, call: ast.Call) -> None:
        args = [(i, a) for i, a in enumerate(call.args) if not isinstance(a, ast.Starred)]
        kwargs = {k.arg: k.value for k in call.keywords if k.arg}
        if not any(self.view(a) is not None for _, a in args) and not any(
            self.view(v) is not None for v in kwargs.values()
        ):
            return
        target = self._callee(call)
        if target is None:
            return
        func, owner, source, skip = target
        params = [a.arg for a in func.args.posonlyargs + func.args.args]
        params = params[skip:]
        own = defaults(func)
        tables: dict[str, TableView] = {}
        layouts: dict[str, Layout] = {}
        constants = dict(own)
        bound: list[tuple[str, ast.expr]] = [(params[i], a) for i, a in args if i < len(params)] + [
            (k, v) for k, v in kwargs.items()
        ]
        for name, expr in bound:
            constants.pop(name, None)  # the call's value, not the default
            view = self.view(expr)
            if view is not None:
                tables[name] = view
                continue
            layout = self.layout(expr)
            if layout is not None:
                layouts[name] = layout
            value = constant(expr)
            if value is not UNKNOWN:
                constants[name] = value
        if tables:
            callee = _Scope(
                self.reader, func, owner, source, tables, layouts, constants, self.depth + 1
            )
            self.reader.visit(callee)

    def _callee(
        self, call: ast.Call
    ) -> tuple[ast.FunctionDef, ClassRef | None, SourceFile, int] | None:
        """The function `call` runs and how many of its leading parameters the call does not
        fill: a module of the owner (its `forward`, or its processor's `__call__`), a function of
        the file or one it imports."""
        attr = self_attr(call.func)
        if attr is not None and self.owner is not None:
            built = _module_class(self.reader.ctx, self.owner, attr)
            if built is None:
                return None
            cls, constructor, where = built
            processor = processor_of(self.reader.ctx, constructor, cls, where)
            if processor is not None:
                found = self.reader.ctx.resolver.find_method(processor, "__call__")
                if found is not None and found[1].source is not None:
                    return found[0], processor, found[1].source, 2  # (self, attn, ...)
            found = self.reader.ctx.resolver.find_method(cls, "forward")
            if found is not None and found[1].source is not None:
                return found[0], cls, found[1].source, 1
            return None
        if isinstance(call.func, ast.Name):
            local = self.local_functions.get(call.func.id)
            if local is not None:
                return local, self.owner, self.source, 0
            located = self.reader.ctx.resolver.find_function(self.source, call.func.id)
            if located is not None:
                return located[0], None, located[1], 0
        return None

    # expressions ----------------------------------------------------------------------------
    def view(self, expr: ast.expr) -> TableView | None:
        """`expr` as a view of the table: a name bound to it, its element, unit axes added."""
        if isinstance(expr, ast.Name):
            return self.tables.get(expr.id)
        if isinstance(expr, ast.Subscript):
            inner = self.view(expr.value)
            if inner is None:
                return None
            index = int_literal(expr.slice)
            if index is not None:
                return TableView(index) if inner.element is None and not inner.ops else None
            pattern = index_pattern(expr.slice)
            return inner.then("index", pattern) if pattern is not None else None
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            inner = self.view(expr.func.value)
            if inner is None:
                return None
            name = expr.func.attr
            if name in KEEP_LAYOUT:
                return inner
            if name == "unsqueeze" and len(expr.args) == 1:
                dim = int_literal(expr.args[0])
                return inner.then("unsqueeze", dim) if dim is not None else None
        return None

    def layout(self, expr: ast.expr) -> Layout | None:
        """The layout of a query-like tensor `expr`, followed through layout ops."""
        if isinstance(expr, ast.Name):
            return self.layouts.get(expr.id)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add | ast.Sub | ast.Mult):
            return self.layout(expr.left) or self.layout(expr.right)
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            return self.layout(expr.operand)
        if not isinstance(expr, ast.Call):
            return None
        name = callee_name(expr)
        func = expr.func
        if (
            name in ("cat", "concat")
            and expr.args
            and isinstance(expr.args[0], ast.List | ast.Tuple)
        ):
            parts = [self.layout(e) for e in expr.args[0].elts]
            dim = dim_arg(expr, 1)
            first = parts[0] if parts else None
            if first is None or dim is None or any(p != first for p in parts):
                return None
            return first if norm_dim(dim, first.rank) != first.seq else None
        if name in ("view_as_complex", "view_as_real") and expr.args:
            inner = self.layout(expr.args[0])
            if inner is None:
                return None
            if name == "view_as_complex":
                return Layout(inner.rank - 1, inner.seq) if inner.seq < inner.rank - 1 else None
            return Layout(inner.rank + 1, inner.seq)
        if name == "rearrange" and len(expr.args) >= 2:
            inner = self.layout(expr.args[0])
            return rearranged(inner, expr.args[1]) if inner is not None else None
        if not isinstance(func, ast.Attribute):
            return None
        inner = self.layout(func.value)
        if inner is None:  # a module applied to a query (`attn.to_q(x)`, `self.norm(q)`)
            if isinstance(func.value, ast.Name | ast.Attribute) and expr.args:
                if isinstance(func.value, ast.Name) and func.value.id in self.tables:
                    return None
                return self.layout(expr.args[0])
            return None
        return moved_layout(inner, func.attr, expr)

    def _split_layout(self, value: ast.expr) -> Layout | None:
        """`q, k, v = qkv.chunk(3, dim=-1)`: each part keeps the layout."""
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
            return None
        inner = self.layout(value.func.value)
        method = value.func.attr
        if inner is None or method not in ("chunk", "split", "tensor_split", "unbind"):
            return None
        dim = dim_arg(value, 0 if method == "unbind" else 1)
        if dim is None:
            return None
        dim = norm_dim(dim, inner.rank)
        if dim == inner.seq:
            return None
        if method == "unbind":  # `q, k, v = qkv.unbind(2)`: that axis goes
            return Layout(inner.rank - 1, inner.seq - (dim < inner.seq))
        return inner


def _module_class(
    ctx: ParallelContext, owner: ClassRef, attr: str
) -> tuple[ClassRef, ast.Call, SourceFile] | None:
    """The class of `self.<attr>` built in the owner's `__init__`, its constructor call and the
    file the call is in."""
    init = ctx.resolver.find_method(owner, "__init__")
    if init is None:
        return None
    func, where = init
    source = where.source or ctx.source
    for node in module_assigns(func):
        if any(self_attr(t) == attr for t in node.targets):
            assert isinstance(node.value, ast.Call)
            cls = ctx.resolver.resolve_class(source, ast.unparse(node.value.func))
            return (cls, node.value, source) if cls.node is not None else None
    return None
