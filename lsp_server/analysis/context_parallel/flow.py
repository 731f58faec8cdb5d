"""What the transformer's `forward` does with its sequences before, between and after the blocks.

The facts here decide where a context-parallel plan can split and gather: whether the hidden input
is already a token sequence (a root split keeps positions consistent) or a latent that `forward`
patchifies, which position embeddings are computed by sub-modules from sizes (their output must be
split), whether a length read from a split tensor feeds them (position drift under a root split),
per-token timesteps, attention masks, and the last token-local module before the output needs the
full sequence (the gather point).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..astutil import (
    call_name,
    callee_name,
    names_read,
    param_defaults,
    per_node,
    self_attr,
    walk_local,
)
from ..init_attributes import init_attributes
from ..parallel_input import ParallelContext
from ..sources import SourceFile
from .unpacked_returns import unpacked_arguments

# Calls that leave a tensor token-local (per-token work) or only read metadata.
_SHAPE_READS = ("shape", "size", "ndim", "dim", "numel")
_SEQUENCE_GLOBAL = (
    "reshape",
    "view",
    "unflatten",
    "permute",
    "transpose",
    "unfold",
    "split",
    "chunk",
    "flip",
    "roll",
    "unbind",
    "index_select",  # rows picked by sequence-wide indices
    "gather",
    "take_along_dim",
    "masked_select",
)


_BUILTINS = (
    "float",
    "int",
    "getattr",
    "hasattr",
    "len",
    "isinstance",
    "type",
    "list",
    "tuple",
    "bool",
    "str",
    "print",
    "max",
    "min",
    "range",
    "enumerate",
    "zip",
)


@dataclass
class ModuleCall:
    """`x = self.<attr>(...)` (or `self.<attr>[key](...)`) in forward."""

    attr: str
    line: int
    args: list[ast.expr]
    keywords: dict[str, ast.expr]
    targets: list[str]
    constructor: str | None  # class name called in __init__ for `self.<attr> = Class(...)`
    # the file of the `__init__` that calls it (a base class's, in another file, names its
    # classes as that file imports them)
    constructor_source: SourceFile | None = None

    def arg_names(self) -> set[str]:
        out: set[str] = set()
        for a in [*self.args, *self.keywords.values()]:
            out |= names_read(a)
        return out


@dataclass
class ForwardFlow:
    params: list[str]
    optional: set[str]
    hidden: str | None
    first_loop_line: int
    last_loop_end: int
    statements: list[ast.stmt]  # forward body statements in source order (nested included)
    module_calls: list[ModuleCall] = field(default_factory=list)
    method_calls: dict[str, int] = field(default_factory=dict)  # self.<method>(...) -> line
    constructors: dict[str, str] = field(default_factory=dict)  # attr -> constructor name
    constructor_sources: dict[str, SourceFile] = field(default_factory=dict)  # attr -> its file
    derived: dict[str, set[str]] = field(default_factory=dict)  # var -> params it comes from
    shape_derived: dict[str, set[str]] = field(default_factory=dict)  # var -> tensors measured


def before_the_blocks(flow: ForwardFlow) -> Iterator[ast.stmt]:
    """Forward's statements before the first block loop, in source order."""
    for stmt in flow.statements:
        if stmt.lineno >= flow.first_loop_line:
            return
        yield stmt


def read_flow(ctx: ParallelContext) -> ForwardFlow | None:
    forward = ctx.forward
    if forward is None:
        return None
    params = [a.arg for a in forward.args.posonlyargs + forward.args.args][1:]
    params += [a.arg for a in forward.args.kwonlyargs]
    optional = {k for k, v in param_defaults(forward).items() if _is_none(v)}
    loops = [loop for b in ctx.block_lists for loop in b.loops]
    main_loops = [loop for b in ctx.cached_lists[:1] for loop in b.loops] or loops
    first = min((loop.lineno for loop in main_loops), default=10**9)
    last_end = max((getattr(loop, "end_lineno", loop.lineno) for loop in loops), default=0)
    statements = sorted(
        (n for n in walk_local(forward) if isinstance(n, ast.stmt) and n is not forward),
        key=lambda n: (n.lineno, n.col_offset),
    )
    flow = ForwardFlow(params, optional, params[0] if params else None, first, last_end, statements)
    flow.constructors, flow.constructor_sources = _constructors(ctx)
    _collect_calls(flow, forward)
    _dataflow(flow, lambda stmt: unpacked_arguments(ctx, stmt))
    return flow


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _constructors(ctx: ParallelContext) -> tuple[dict[str, str], dict[str, SourceFile]]:
    """`self.x = nn.Linear(...)` -> {"x": "nn.Linear"}; `self.x = nn.ModuleDict(...)` too, and
    modules attached with `setattr(self, f"{prefix}_x", Module(...))` in a loop over literals;
    and the file each is written in. Read in every `__init__` of the class and its bases, the
    most derived first (a variant that calls `super().__init__(...)` and rebuilds only its
    blocks keeps its base's `self.head`)."""
    names: dict[str, str] = {}
    files: dict[str, SourceFile] = {}
    inits = [(ctx.init, ctx.source)] if ctx.init is not None else []
    for ancestor in ctx.resolver.iter_mro(ctx.transformer):
        node, source = ancestor.node, ancestor.source or ctx.source
        if node is None:
            continue
        inits += [
            (stmt, source)
            for stmt in node.body
            if isinstance(stmt, ast.FunctionDef)
            and stmt.name == "__init__"
            and all(stmt is not seen for seen, _ in inits)
        ]
    for init, source in inits:
        for bound in init_attributes(init):
            if isinstance(bound.value, ast.Call) and bound.attr not in names:
                names[bound.attr] = call_name(bound.value)
                files[bound.attr] = source
    return names, files


def _collect_calls(flow: ForwardFlow, forward: ast.FunctionDef) -> None:
    for stmt in flow.statements:
        if isinstance(stmt, ast.If | ast.For | ast.While | ast.With | ast.Try):
            continue
        targets = [t for t in _assigned_names(stmt)]
        for node in walk_local(stmt):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            attr = self_attr(func)
            if attr is None and isinstance(func, ast.Subscript):
                attr = self_attr(func.value)  # self.all_final_layer[key](...)
            if attr is None:
                continue
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            if attr in flow.constructors:
                flow.module_calls.append(
                    ModuleCall(
                        attr,
                        node.lineno,
                        list(node.args),
                        keywords,
                        targets,
                        flow.constructors[attr],
                        flow.constructor_sources.get(attr),
                    )
                )
            else:
                flow.method_calls.setdefault(attr, node.lineno)


def _assigned_names(stmt: ast.stmt) -> list[str]:
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
        targets = [stmt.target]
    out: list[str] = []

    def bind(t: ast.expr) -> None:
        if isinstance(t, ast.Name):
            out.append(t.id)
        elif isinstance(t, ast.Tuple | ast.List):
            for e in t.elts:
                bind(e)
        elif isinstance(t, ast.Starred):
            bind(t.value)

    for t in targets:
        bind(t)
    return out


def _updated_in_place(stmt: ast.stmt) -> list[str]:
    """Names a statement changes in place (`m[:, a:b] = 1`, `x.data = ...`): not rebound."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else []
    out: list[str] = []
    for t in targets:
        base = t
        while isinstance(base, ast.Subscript | ast.Attribute):
            base = base.value
        if base is not t and isinstance(base, ast.Name):
            out.append(base.id)
    return out


def _dataflow(
    flow: ForwardFlow,
    unpacked: Callable[[ast.stmt], dict[str, list[ast.expr]] | None] = lambda stmt: None,
) -> None:
    """Which forward parameters each local comes from, and which locals are lengths/shapes.
    `unpacked`: for `a, b = self.<method>(...)`, the arguments each name is made of."""
    derived = {p: {p} for p in flow.params}
    for stmt in flow.statements:
        if stmt.lineno >= flow.first_loop_line:
            break  # what the blocks see is decided before the first block loop
        if not isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            continue
        value = stmt.value
        if value is None:
            continue
        sources: set[str] = set()
        for name in data_names(value):
            sources |= derived.get(name, set())
        direct = _shape_source(value, flow)
        # lengths combined arithmetically stay lengths (`n = n_img + n_txt`)
        measured = {direct} if direct else set()
        for n in names_read(value):
            measured |= flow.shape_derived.get(n, set())
        batch_only = _batch_read(stmt)
        elements = unpacked(stmt)
        for name in _updated_in_place(stmt):
            derived.setdefault(name, set()).update(sources)
        for name in _assigned_names(stmt):
            if name in batch_only:
                flow.shape_derived.pop(name, None)
                derived[name] = set(sources)
                continue
            if isinstance(stmt, ast.AugAssign):
                derived.setdefault(name, set()).update(sources)
            elif elements is not None and name in elements:
                derived[name] = {
                    p for arg in elements[name] for n in data_names(arg) for p in derived.get(n, ())
                }
            else:
                derived[name] = set(sources)
            if measured:
                flow.shape_derived[name] = set(measured)
            elif name in flow.shape_derived and not isinstance(stmt, ast.AugAssign):
                del flow.shape_derived[name]
    flow.derived = derived


def _batch_read(stmt: ast.stmt) -> set[str]:
    """Names that only receive a batch size (`b = x.shape[0]`, `b, s, d = x.shape`'s `b`)."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return set()
    target, value = stmt.targets[0], stmt.value
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Attribute) and value.attr == "shape":
        first = target.elts[0] if target.elts else None
        return {first.id} if isinstance(first, ast.Name) else set()
    if isinstance(target, ast.Name):
        if (
            isinstance(value, ast.Subscript)
            and isinstance(value.value, ast.Attribute)
            and value.value.attr == "shape"
            and isinstance(value.slice, ast.Constant)
            and value.slice.value == 0
        ):
            return {target.id}
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "size"
            and value.args
            and isinstance(value.args[0], ast.Constant)
            and value.args[0].value == 0
        ):
            return {target.id}
    return set()


def _shape_source(value: ast.expr, flow: ForwardFlow) -> str | None:
    """The tensor whose shape/length an expression reads (`x.shape[1]`, `len(x)`, `f(x)`)."""
    for node in walk_local(value):
        if isinstance(node, ast.Attribute) and node.attr in _SHAPE_READS:
            base = node.value
            if isinstance(base, ast.Name):
                return base.id
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Name) and node.func.id not in (
                "int",
                "float",
                "list",
                "tuple",
                "max",
                "min",
                "isinstance",
                "getattr",
            ):
                # a plain function of a tensor returning a length (`seq_len_from_mask(x, m)`)
                return first.id if node.func.id == "len" else _fn_tensor_arg(node)
    return None


def _fn_tensor_arg(call: ast.Call) -> str | None:
    first = call.args[0]
    return first.id if isinstance(first, ast.Name) else None


def data_names(expr: ast.AST) -> set[str]:
    """Names whose values an expression uses, not counting metadata reads (`x.dtype`, `x.shape`)
    (a fresh set: callers grow it)."""
    return set(_data_names(expr))


@per_node
def _data_names(expr: ast.AST) -> frozenset[str]:
    meta: set[int] = set()
    for node in walk_local(expr):
        if isinstance(node, ast.Attribute) and node.attr in (*_SHAPE_READS, "dtype", "device"):
            meta.add(id(node.value))
    return frozenset(
        n.id
        for n in walk_local(expr)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in meta
    )


def length_sources(flow: ForwardFlow, expr: ast.AST) -> set[str]:
    """Tensors whose lengths an expression reads, directly (`x.shape[1]`) or through locals."""
    out: set[str] = set()
    for node in walk_local(expr):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _SHAPE_READS
            and isinstance(node.value, ast.Name)
        ):
            out.add(node.value.id)
        elif isinstance(node, ast.Name) and node.id in flow.shape_derived:
            out |= flow.shape_derived[node.id]
    return out


def is_sequence_global(
    expr: ast.AST, tracked: set[str] | None = None, local_lengths: bool = False
) -> str | None:
    """An op on a tracked stream that needs the whole sequence: a reshape with sizes, a cat or a
    slice (unless `local_lengths`: under a root split every length forward reads is the local one,
    so slicing and concatenating rank-local pieces stays consistent), or a plain function."""

    def on_stream(node: ast.AST) -> bool:
        return tracked is None or bool(names_read(node) & tracked)

    for node in walk_local(expr):
        if isinstance(node, ast.Call):
            name = callee_name(node)
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and name in _SEQUENCE_GLOBAL
                and on_stream(func.value)
            ):
                if local_lengths and name in ("split", "chunk"):
                    continue
                return name
            if (
                name in ("cat", "concat", "stack")
                and isinstance(func, ast.Attribute)
                and any(on_stream(a) for a in node.args)
            ):
                if not local_lengths:
                    return name
                continue
            if (
                isinstance(func, ast.Name)
                and name not in _BUILTINS
                and (any(on_stream(a) for a in node.args))
            ):
                return name  # unpatchify(...), fractal_unflatten(...)
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Tuple)
            and on_stream(node.value)
            and not local_lengths
        ):
            return "slice"
    return None
