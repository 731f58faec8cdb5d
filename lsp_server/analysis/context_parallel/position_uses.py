"""The sequence axis of a position table read from where the blocks use it.

A table whose axes forward's code does not show (built by a loop over padded samples, a helper in
another package) still meets the queries somewhere: the block hands it to its attention, the
attention (or its processor, or a rotary function it calls) multiplies the queries by it. The
queries' layout is followed from the block's input (`(B, S, C)`) through the projections and the
layout ops (`value_layouts`: `view`, `unflatten`, `transpose`, `permute`, `reshape(*x.shape[:-1],
-1, 2)`, `view_as_complex`, einops `rearrange`, subscripts such as `qkv[0]`), and through the
plain functions called on the queries (defined in the function, of the file, imported, or
methods of the owner: `_rotate_half(q)`, `self._swap_halves(q)`) whose every returned value is
shown to have the layout they were handed; the table's through its unit axes (`unsqueeze(2)`,
`cos[:, None]`), the axes integer indices take away (`freqs[..., 0]`) and tuple elements (`cos,
sin = freqs`). Broadcasting aligns the two from the right: the table rank for which the table's
last remaining axis meets the features and the queries' sequence axis meets a table axis (not a
unit one) names that axis. Branches on constant arguments (`use_real=False`, `sequence_dim=1`)
are followed as the call takes them. Every use read must agree; None when none is read.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import NamedTuple

from ..astutil import declared_params, int_literal, self_attr, walk
from ..parallel_input import ParallelBlockList, ParallelContext
from ..sources import ClassRef, SourceFile
from .attention_modules import module_assigns, processor_of
from .constant_branches import UNKNOWN, constant, defaults, truth
from .index_syntax import index_pattern
from .query_layout import KEEP_LAYOUT, Layout
from .table_broadcast import TableView, solve_axis
from .value_layouts import NOT_A_FUNCTION, ValueLayouts

_MAX_DEPTH = 5


class _Target(NamedTuple):
    """A function a call runs, the class it is read on, its file, the leading parameters the
    call does not fill, and, for a processor's `__call__`, the attention module it serves."""

    func: ast.FunctionDef
    owner: ClassRef | None
    source: SourceFile
    skip: int
    served: ClassRef | None = None


@dataclass
class _Found:
    axes: dict[int | None, set[int]] = field(default_factory=dict)  # element -> axes read
    how: list[str] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)  # the ranks of the queries the table meets


class UsedAxes(NamedTuple):
    """A table's sequence axis read where the queries meet it: one per element of a tuple the
    code unpacks (one for a plain table), how it was read, and the ranks of the queries it
    multiplies (4 and up: queries split into heads, as inside attention)."""

    axes: tuple[int, ...]
    how: str
    query_ranks: frozenset[int]


def used_axes(ctx: ParallelContext, block: ParallelBlockList, param: str) -> UsedAxes | None:
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
    ranks = frozenset(reader.found.ranks)
    if set(result) == {None}:
        return UsedAxes((next(iter(result[None])),), how, ranks)
    if None in result:
        return None
    elements = sorted(result)
    if elements != list(range(len(elements))):
        return None
    return UsedAxes(tuple(next(iter(result[e])) for e in elements), how, ranks)


class _Reader:
    def __init__(self, ctx: ParallelContext) -> None:
        self.ctx = ctx
        self.found = _Found()
        self.seen: set[tuple[object, ...]] = set()
        # the layout each plain function returns, per layouts and constants it is handed
        self.returned: dict[tuple[object, ...], Layout | None] = {}

    def visit(self, scope: _Scope) -> None:
        """Read one function, once per set of tables and query layouts it is handed."""
        key = (id(scope.func), tuple(sorted(scope.tables)), tuple(sorted(scope.layouts.items())))
        if scope.depth > _MAX_DEPTH or key in self.seen:
            return
        self.seen.add(key)
        scope.run(scope.func.body)


class _Scope(ValueLayouts):
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
        served: ClassRef | None = None,
    ) -> None:
        super().__init__(layouts)
        self.reader = reader
        self.func = func
        self.owner = owner
        self.source = source
        self.tables = tables
        self.constants = constants
        self.depth = depth
        # the classes whose members the receivers name: `self` (the owner) and, in a
        # processor's `__call__(self, attn, ...)`, the attention module it serves (`attn.turn(q)`
        # runs a method of the module's class), as `called_functions.Caller.receivers`
        self.receivers = {"self": owner} if owner is not None else {}
        params = declared_params(func)
        if served is not None and params:
            self.receivers[params[0]] = served
        self.local_functions: dict[str, ast.FunctionDef] = {}
        self.returns: list[Layout | None] = []  # the layout of each value returned

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
            if isinstance(stmt, ast.Return) and stmt.value is not None:
                self.returns.append(self.layout(stmt.value))
            elif isinstance(stmt, ast.Assign):
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
        split = self.split_layout(value)
        # `q, k = norm_q(q), norm_k(k)`: every value is read before any name is rebound
        elements = (
            [(self.view(e), self.layout(e)) for e in value.elts]
            if isinstance(value, ast.Tuple) and len(value.elts) == len(names)
            else None
        )
        per_element = self._element_views(value, len(names))
        for name in names:
            if name:
                self.tables.pop(name, None)
                self.layouts.pop(name, None)
        if view is not None and view.element is None and not view.ops:  # `cos, sin = freqs`
            for index, name in enumerate(names):
                if name:
                    self.tables[name] = TableView(index)
            return
        if elements is not None:
            for name, (element_view, element_layout) in zip(names, elements, strict=True):
                if name and element_view is not None:
                    self.tables[name] = element_view
                elif name and element_layout is not None:
                    self.layouts[name] = element_layout
            return
        if per_element is not None:  # `cos, sin = (t[None, :, None] for t in freqs)`
            for name, element_view in zip(names, per_element, strict=True):
                if name and element_view is not None:
                    self.tables[name] = element_view
            return
        if split is not None:
            for name in names:
                if name:
                    self.layouts[name] = split

    def _element_views(self, value: ast.expr, count: int) -> list[TableView | None] | None:
        """A generator or list over the elements of a tuple table, unpacked into `count` names:
        the view of each element after the comprehension's expression."""
        if not (
            isinstance(value, ast.GeneratorExp | ast.ListComp)
            and len(value.generators) == 1
            and not value.generators[0].ifs
            and isinstance(value.generators[0].target, ast.Name)
        ):
            return None
        walked = self.view(value.generators[0].iter)
        if walked is None or walked.element is not None or walked.ops:
            return None
        name = value.generators[0].target.id
        saved = self.tables.get(name)
        views: list[TableView | None] = []
        for index in range(count):
            self.tables[name] = TableView(index)
            views.append(self.view(value.elt))
        if saved is None:
            self.tables.pop(name)
        else:
            self.tables[name] = saved
        return views

    def _closure_tables(self, call: ast.Call) -> dict[str, TableView]:
        """The table views a function defined in this one reads from it (`turn(q)` reading
        `cos` and `sin` of the function that defines it), by name."""
        if not isinstance(call.func, ast.Name) or call.func.id not in self.local_functions:
            return {}
        local = self.local_functions[call.func.id]
        own = set(declared_params(local))
        read = {n.id for n in walk(local) if isinstance(n, ast.Name)}
        return {n: v for n, v in self.tables.items() if n in read and n not in own}

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
        found.ranks.add(layout.rank)
        where = self.owner.name if self.owner is not None else self.func.name
        found.how.append(
            f"read where `{where}` multiplies a {layout.rank}-D query by it "
            f"(`{ast.unparse(table)}`, line {table.lineno}): sequence axis {axis}"
        )

    def _call(self, call: ast.Call) -> None:
        """A call handed the table: read the function it runs with the table's views, the
        queries' layouts and the constants it is handed."""
        handed = [a for a in call.args if not isinstance(a, ast.Starred)]
        handed += [k.value for k in call.keywords if k.arg]
        closure = self._closure_tables(call)
        if not closure and not any(self.view(a) is not None for a in handed):
            return
        target = self._callee(call)
        if target is None:
            return
        func, owner, source, skip, served = target
        tables, layouts, constants = self._arguments(call, func, skip)
        tables = {**closure, **tables}
        if tables:
            callee = _Scope(
                self.reader, func, owner, source, tables, layouts, constants, self.depth + 1, served
            )
            self.reader.visit(callee)

    def _arguments(
        self, call: ast.Call, func: ast.FunctionDef, skip: int
    ) -> tuple[dict[str, TableView], dict[str, Layout], dict[str, object]]:
        """The parameters of `func` the call binds to table views and query layouts, and its
        constants (the call's, else the defaults)."""
        params = [a.arg for a in func.args.posonlyargs + func.args.args][skip:]
        bound = [
            (params[i], a)
            for i, a in enumerate(call.args)
            if i < len(params) and not isinstance(a, ast.Starred)
        ]
        bound += [(k.arg, k.value) for k in call.keywords if k.arg]
        tables: dict[str, TableView] = {}
        layouts: dict[str, Layout] = {}
        constants = defaults(func)
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
        return tables, layouts, constants

    def _member(self, func: ast.expr) -> tuple[str, ClassRef] | None:
        """`self.<attr>` (of the owner) or `<attn>.<attr>` (of the module a processor serves):
        the attribute and the class it is looked up on."""
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            cls = self.receivers.get(func.value.id)
            return (func.attr, cls) if cls is not None else None
        return None

    def _callee(self, call: ast.Call) -> _Target | None:
        """The function `call` runs and how many of its leading parameters the call does not
        fill: a module of the owner or of the module a processor serves (its `forward`, or its
        processor's `__call__`), a method of either, a function of the file or one it
        imports."""
        member = self._member(call.func)
        if member is None:
            return self._function(call)
        attr, cls_of = member
        built = _module_class(self.reader.ctx, cls_of, attr)
        if built is None:
            return self._function(call)
        cls, constructor, where = built
        processor = processor_of(self.reader.ctx, constructor, cls, where)
        if processor is not None:
            found = self.reader.ctx.resolver.find_method(processor, "__call__")
            if found is not None and found[1].source is not None:
                return _Target(found[0], processor, found[1].source, 2, cls)  # (self, attn, ...)
        found = self.reader.ctx.resolver.find_method(cls, "forward")
        if found is not None and found[1].source is not None:
            return _Target(found[0], cls, found[1].source, 1)
        return None

    def _function(self, call: ast.Call) -> _Target | None:
        """A plain function `call` runs: defined in this function, a method of the owner
        (`self._swap_halves(q)`) or of the module a processor serves (`attn.turn(q)`), a
        function of the file or one it imports."""
        resolver = self.reader.ctx.resolver
        if isinstance(call.func, ast.Name):
            local = self.local_functions.get(call.func.id)
            if local is not None:
                return _Target(local, self.owner, self.source, 0)
            located = resolver.find_function(self.source, call.func.id)
            return _Target(located[0], None, located[1], 0) if located is not None else None
        inherited = self._inherited(call.func)
        if inherited is not None:
            return inherited
        member = self._member(call.func)
        if member is None:
            return None
        attr, cls_of = member
        found = resolver.find_method(cls_of, attr)
        if found is None or found[1].source is None or not isinstance(found[0], ast.FunctionDef):
            return None
        return _Target(found[0], cls_of, found[1].source, 1)

    def _inherited(self, func: ast.expr) -> _Target | None:
        """`super().<method>(...)`: the method of the first base of the owner defining it (a
        block subclass whose `forward` wraps its base's)."""
        if not (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name)
            and func.value.func.id == "super"
            and self.owner is not None
        ):
            return None
        for base in list(self.reader.ctx.resolver.iter_mro(self.owner))[1:]:
            if base.node is None or base.source is None:
                continue
            for stmt in base.node.body:
                if isinstance(stmt, ast.FunctionDef) and stmt.name == func.attr:
                    return _Target(stmt, self.owner, base.source, 1)
        return None

    def called(self, call: ast.Call) -> object:
        """The layout a plain function returns when handed queries of one layout: theirs when
        every value it returns is shown to have it (a rotation built by `chunk`/`unbind`, `cat`/
        `stack`, negation, `flip` and reshapes back), else None; NOT_A_FUNCTION when `call`
        runs none (a module's `forward` keeps the queries' layout, as before)."""
        target = self._function(call)
        if target is None:
            return NOT_A_FUNCTION
        func, owner, source, skip, _ = target
        _, layouts, constants = self._arguments(call, func, skip)
        handed = set(layouts.values())
        if len(handed) != 1:
            return None
        key = (id(func), tuple(sorted(layouts.items())), repr(sorted(constants.items())))
        memo = self.reader.returned
        if key not in memo:
            memo[key] = None  # while it is read: a recursive call shows nothing
            if self.depth < _MAX_DEPTH:
                scope = _Scope(
                    self.reader, func, owner, source, {}, dict(layouts), constants, self.depth + 1
                )
                scope.run(func.body)
                memo[key] = handed.pop() if set(scope.returns) == handed else None
        return memo[key]

    def is_table(self, name: str) -> bool:
        return name in self.tables

    # expressions ----------------------------------------------------------------------------
    def view(self, expr: ast.expr) -> TableView | None:
        """`expr` as a view of the table: a name bound to it, its element, unit axes added,
        subscripts (`t[..., 0]`: an axis taken away)."""
        if isinstance(expr, ast.Name):
            return self.tables.get(expr.id)
        if isinstance(expr, ast.Subscript):
            inner = self.view(expr.value)
            if inner is None:
                return None
            index = int_literal(expr.slice)
            if index is not None and inner.element is None and not inner.ops:
                return TableView(index)  # an element of the tuple (`freqs[0]`)
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


def _module_class(
    ctx: ParallelContext, owner: ClassRef, attr: str
) -> tuple[ClassRef, ast.Call, SourceFile] | None:
    """The class of `self.<attr>` built in the owner's `__init__`, its constructor call and the
    file the call is in."""
    for func, where in ctx.resolver.init_methods(owner):  # the most derived that builds it
        source = where.source or ctx.source
        for node in module_assigns(func):
            if any(self_attr(t) == attr for t in node.targets):
                assert isinstance(node.value, ast.Call)
                cls = ctx.resolver.resolve_class(source, ast.unparse(node.value.func))
                return (cls, node.value, source) if cls.node is not None else None
    return None
