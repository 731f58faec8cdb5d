"""Find transformer classes, their `nn.ModuleList` block lists and the loops that run them.

A block list is a `self.<attr>` ModuleList built from model-defined classes (comprehension, literal,
loop with `append`, conditional, a factory method of the class), declared in the class or a base,
that the model's `forward` (or a helper method it calls) iterates. One loop may iterate several
lists (`for i, (a, b) in enumerate(zip(self.l1, self.l2))`): each gets a `LoopSite` that names the
others (`zipped`), since their blocks run interleaved.

This module reads the declarations (`find_block_list_decls`) and block counts (`resolve_count`);
the loops that run the lists are found in `block_loops` (re-exported here).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace

from .astutil import callee_name, param_defaults, self_attr, walk, walk_local
from .block_loops import LOOP_SHAPES as LOOP_SHAPES
from .block_loops import BlockCall as BlockCall
from .block_loops import LoopBinding as LoopBinding
from .block_loops import LoopSite as LoopSite
from .block_loops import collect_block_calls as collect_block_calls
from .block_loops import find_loop_sites as find_loop_sites
from .block_loops import header_bindings
from .block_loops import loop_bindings as loop_bindings
from .list_aliases import local_aliases
from .list_elements import Element as Element
from .list_elements import ElementCollector, count_of, is_module_list_call
from .resolver import Resolver
from .sources import ClassRef, SourceFile


@dataclass
class BlockListDecl:
    attr: str
    line: int
    elements: list[Element]
    count_expr: str | None
    built_by: str  # comprehension | literal | append | conditional | factory | unknown
    # "Sequential": an nn.Sequential that forward iterates block by block (never calls it):
    # the integration makes it an nn.ModuleList of the same modules, which cache-dit needs;
    # "ModuleDict": a template for the ModuleLists an nn.ModuleDict holds (`keyed_lists`)
    container: str = "ModuleList"
    # a ModuleDict's lists by literal key (None: made by a comprehension, or not a ModuleDict)
    keys: dict[str, BlockListDecl] | None = None
    # "Nested": a ModuleList of ModuleLists; the count of its lists (`nested_lists`)
    outer: str | None = None
    # the file of the base class that declares the list (None: the class's own file): its element
    # classes are named as that file imports them
    source: SourceFile | None = None


def find_block_list_decls(cls: ClassRef, resolver: Resolver) -> list[BlockListDecl]:
    """ModuleList attributes assigned in the methods of `cls`.

    Ancestors are read only when `forward` iterates a `self.<attr>` that `cls` does not declare,
    so that a model's base classes (often large framework files) are parsed only when needed.
    """
    decls = _declared_in(cls) if cls.node is not None else {}
    forward = cls.node and next(
        (s for s in cls.node.body if isinstance(s, ast.FunctionDef) and s.name == "forward"), None
    )
    missing = _iterated_attrs(forward, cls.node) - set(decls) if forward else set()
    # a subclass that only changes a class attribute inherits forward and the lists: read its
    # bases when one of them is a class of the same file (no other file is parsed for it)
    inherits_all = forward is None and not decls and _has_local_base(cls)
    if missing or (forward is None and decls) or inherits_all:
        for ancestor in list(resolver.iter_mro(cls))[1:]:
            if ancestor.node is None:
                continue
            for attr, decl in _declared_in(ancestor).items():
                decls.setdefault(attr, replace(decl, source=ancestor.source))
    if any(d.container == "ModuleDict" for d in decls.values()):
        keyed_lists(decls, _iterated_attrs(forward, cls.node) if forward else set())
    return list(decls.values())


def _has_local_base(cls: ClassRef) -> bool:
    if cls.node is None or cls.source is None:
        return False
    local = {c.name for c in cls.source.classes()}
    return any(isinstance(b, ast.Name) and b.id in local for b in cls.node.bases)


def _iterated_attrs(
    func: ast.FunctionDef, cls: ast.ClassDef | None = None, depth: int = 0
) -> set[str]:
    """Lists iterated by `func` and by the class' own methods it calls (2 levels)."""
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)} if cls else {}
    out = set()
    aliases = local_aliases(func)
    for node in walk_local(func):
        if isinstance(node, ast.For | ast.While):
            out.update(b.attr for b in header_bindings(node, func, aliases)[0])
        elif isinstance(node, ast.Call) and depth < 2:
            name = self_attr(node.func)
            helper = methods.get(name) if name else None
            if helper is not None and helper is not func:
                out |= _iterated_attrs(helper, cls, depth + 1)
    return out


def _declared_in(cls: ClassRef) -> dict[str, BlockListDecl]:
    decls: dict[str, BlockListDecl] = {}
    assert cls.node is not None
    methods = {f.name: f for f in cls.node.body if isinstance(f, ast.FunctionDef)}
    for func in cls.node.body:
        if not isinstance(func, ast.FunctionDef):
            continue
        for node in walk_local(func):
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    attr = self_attr(target)
                    if attr is None or attr in decls or node.value is None:
                        continue
                    decl = _decl_from_value(attr, node.value, func, methods)
                    if decl is not None:
                        decls[attr] = decl
        # `self.blocks = nn.ModuleList()` then `self.blocks.append(Block(...))`
        for attr, decl in decls.items():
            if not decl.elements:
                _fill_appended(attr, decl, func)
    return {
        attr: decl
        for attr, decl in decls.items()
        if decl.container == "ModuleList" or not _called_whole(cls.node, attr)
    }


def _fill_appended(attr: str, decl: BlockListDecl, func: ast.FunctionDef) -> None:
    collector = ElementCollector(func)
    for node in walk_local(func):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("append", "extend")
            and self_attr(node.func.value) == attr
            and node.args
        ):
            if node.func.attr == "append":
                decl.elements += collector.from_element(node.args[0])
            else:
                decl.elements += collector.from_expr(node.args[0])
            decl.built_by = "append"
    for node in walk_local(func):
        if isinstance(node, ast.For) and any(
            isinstance(c, ast.Call)
            and isinstance(c.func, ast.Attribute)
            and self_attr(c.func.value) == attr
            for c in walk(node)
        ):
            decl.count_expr = decl.count_expr or count_of(
                [ast.comprehension(target=node.target, iter=node.iter, ifs=[])]
            )


def _decl_from_value(
    attr: str,
    value: ast.expr,
    func: ast.FunctionDef,
    methods: dict[str, ast.FunctionDef] | None = None,
) -> BlockListDecl | None:
    collector = ElementCollector(func, methods)
    helper = collector.helper(value)
    if helper is not None:
        # `self.blocks = self._build_blocks(n)`: a factory method that returns the ModuleList.
        if not any(
            isinstance(n, ast.Return) and n.value is not None and is_module_list_call(n.value)
            for n in walk_local(helper)
        ):
            return None
        elements = collector.from_helper(helper, 0)
        return BlockListDecl(attr, value.lineno, elements, collector.count_expr, "factory")
    if isinstance(value, ast.IfExp):
        branches = [b for b in (value.body, value.orelse) if is_module_list_call(b)]
        if not branches:
            return None
        elements: list[Element] = []
        count = None
        for branch in branches:
            sub = _decl_from_value(attr, branch, func, methods)
            if sub:
                elements += sub.elements
                count = count or sub.count_expr
        return BlockListDecl(attr, value.lineno, elements, count, "conditional")
    if isinstance(value, ast.Call) and callee_name(value) == "Sequential":
        return _sequential(attr, value, collector)
    if isinstance(value, ast.Call) and callee_name(value) == "ModuleDict":
        return _dict_of_lists(attr, value, func, methods)
    if not is_module_list_call(value):
        return None
    assert isinstance(value, ast.Call)
    nested = _nested_lists(attr, value, func, methods)
    if nested is not None:
        return nested
    elements = collector.from_expr(value.args[0]) if value.args else []
    return BlockListDecl(attr, value.lineno, elements, collector.count_expr, collector.built_by)


def _nested_lists(
    attr: str, value: ast.Call, func: ast.FunctionDef, methods: dict[str, ast.FunctionDef] | None
) -> BlockListDecl | None:
    """`nn.ModuleList([nn.ModuleList([Block(...) for _ in range(d)]) for _ in range(s)])`: a
    template (`container="Nested"`, its inner list's blocks and count; `outer` the count of
    lists) for the lists forward runs by a loop nested in a loop over it (`nested_lists`)."""
    arg = value.args[0] if value.args else None
    if not isinstance(arg, ast.ListComp | ast.GeneratorExp) or not is_module_list_call(arg.elt):
        return None
    inner = _decl_from_value(attr, arg.elt, func, methods)
    if inner is None or inner.container != "ModuleList" or not inner.elements:
        return None
    return replace(inner, line=value.lineno, container="Nested", outer=count_of(arg.generators))


def nested_lists(decl: BlockListDecl, count: int | None) -> list[BlockListDecl]:
    """One list per element of a nested template (`stages.0`, `stages.1`, ...), `count` of them
    (the outer count, resolved); none when it is not known."""
    if count is None:
        return []
    return [
        replace(decl, attr=f"{decl.attr}.{i}", container="ModuleList", outer=None)
        for i in range(count)
    ]


def _sequential(attr: str, value: ast.Call, collector: ElementCollector) -> BlockListDecl | None:
    """`nn.Sequential(*[Block(...) for _ in range(n)])` (or `*blocks`): a list of blocks if
    forward iterates it (checked by the loop sites) and nothing calls it as one module
    (`_called_whole`). Layers given one by one (`nn.Sequential(nn.Linear(...), nn.GELU())`, an
    MLP) are not read as a list."""
    if value.keywords or len(value.args) != 1 or not isinstance(value.args[0], ast.Starred):
        return None
    elements = collector.from_expr(value.args[0].value)
    if not elements:
        return None
    return BlockListDecl(
        attr, value.lineno, elements, collector.count_expr, collector.built_by, "Sequential"
    )


def _dict_of_lists(
    attr: str, value: ast.Call, func: ast.FunctionDef, methods: dict[str, ast.FunctionDef] | None
) -> BlockListDecl | None:
    """`nn.ModuleDict({name: nn.ModuleList([...]) for name in modes})` (or a dict literal of
    ModuleLists): one template for the lists it holds, `container="ModuleDict"`; each list forward
    iterates by a literal key (`self.<attr>["image"]`) becomes a list of its own
    (`keyed_lists`). Its keys: the literal ones, or None when a comprehension makes them."""
    arg = value.args[0] if value.args else None
    if isinstance(arg, ast.DictComp):
        keyed: list[tuple[str | None, ast.expr]] = [(None, arg.value)]
    elif isinstance(arg, ast.Dict):
        keyed = [
            (k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else "", v)
            for k, v in zip(arg.keys, arg.values, strict=True)
        ]
    else:
        return None
    held: dict[str, BlockListDecl] = {}
    elements: list[Element] = []
    count = None
    for key, expr in keyed:
        sub = _decl_from_value(attr, expr, func, methods)
        if sub is None or sub.container != "ModuleList":
            return None
        elements += sub.elements
        count = count or sub.count_expr  # the template's, for keys a comprehension makes
        if key is not None:
            held[key] = sub
    built_by = "literal" if held else "comprehension"
    return BlockListDecl(attr, value.lineno, elements, count, built_by, "ModuleDict", held or None)


def keyed_lists(decls: dict[str, BlockListDecl], iterated: set[str]) -> None:
    """Replace each ModuleDict template of `decls` by the lists forward iterates by key
    (`<attr>.<key>` in `iterated`), each a ModuleList of the template's blocks."""
    for attr, decl in list(decls.items()):
        if decl.container != "ModuleDict":
            continue
        del decls[attr]
        for path in sorted(iterated):
            owner, _, key = path.partition(".")
            if owner != attr or not key:
                continue
            if decl.keys is None:  # a comprehension over the keys: one template for all
                decls[path] = replace(decl, attr=path, container="ModuleList")
            elif key in decl.keys:
                decls[path] = replace(decl.keys[key], attr=path)


def _called_whole(cls: ast.ClassDef, attr: str) -> bool:
    """`self.<attr>(...)` anywhere in the class: the container runs as one module."""
    return any(isinstance(node, ast.Call) and self_attr(node.func) == attr for node in walk(cls))


# The declaration shapes recognised, for messages that say what was tried (the loop shapes:
# `LOOP_SHAPES`).
DECL_SHAPES = (
    "`self.<list> = nn.ModuleList(...)` built from a comprehension, a list literal (with `+` or "
    "`*` unpacking), `list(...)`, a local list filled by `append`/`extend`, a conditional "
    "expression, `nn.ModuleList()` then `self.<list>.append(...)`, or a factory method of the "
    "class (`self.<list> = self._build(n)` returning a ModuleList, elements `self._make_block(i)`),"
    " or an `nn.Sequential(*blocks)` that forward only iterates, an `nn.ModuleDict` of ModuleLists"
    ' run by literal key (`self.<dict>["image"]`), an nn.ModuleList of ModuleLists run by a loop'
    " nested in a loop over it (their count from the config or the constructor's defaults),"
    " in any method of the class (and of its bases for lists that `forward` or a helper it calls "
    "iterates but the class does not declare), holding model-defined module classes (torch "
    "layers are not blocks)"
)


def resolve_count(
    expr: str | None, init: ast.FunctionDef | None, config: dict[str, object] | None
) -> int | None:
    """Evaluate a block-count expression from config values or `__init__` defaults."""
    if expr is None:
        return None
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None
    defaults = param_defaults(init) if init is not None else {}

    def value_of(name: str) -> object | None:
        if config and name in config:
            return config[name]
        default = defaults.get(name)
        if default is not None:
            try:
                return ast.literal_eval(default)
            except (ValueError, SyntaxError):
                return None
        return None

    def ev(n: ast.AST) -> object | None:
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            return value_of(n.id)
        if isinstance(n, ast.Attribute):
            return value_of(n.attr)  # self.config.num_layers, config.depth
        if isinstance(n, ast.Call) and callee_name(n) == "len" and n.args:
            inner = ev(n.args[0])
            return len(inner) if isinstance(inner, list | tuple) else None
        if isinstance(n, ast.BinOp):
            left, right = ev(n.left), ev(n.right)
            if isinstance(left, int) and isinstance(right, int):
                if isinstance(n.op, ast.Add):
                    return left + right
                if isinstance(n.op, ast.Sub):
                    return left - right
                if isinstance(n.op, ast.Mult):
                    return left * right
                if isinstance(n.op, ast.FloorDiv) and right:
                    return left // right
        return None

    result = ev(node)
    return result if isinstance(result, int) and not isinstance(result, bool) else None
