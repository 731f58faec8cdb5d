"""Which classes of a file are transformers: classes whose `forward` runs an `nn.ModuleList` of
model-defined blocks (`ListFinder.transformers`), each with the facts of those lists
(`ListFacts`); and, when none is found, what was found instead (the `AnalysisError` message)."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .astutil import call_name, callee_name, self_attr, walk, walk_local
from .block_lists import (
    DECL_SHAPES,
    BlockListDecl,
    find_block_list_decls,
    nested_lists,
    resolve_count,
)
from .block_loops import LOOP_SHAPES, LoopSite, find_loop_sites
from .counter_loops import unread_while
from .model import AnalysisError
from .registered_blocks import registered_one_by_one
from .resolver import Resolver
from .sources import ClassRef, SourceFile


@dataclass
class ListFacts:
    """A block list a transformer's forward runs: its declaration, the loops that run it (in run
    order), its element classes and its block count (when the config or defaults give it)."""

    decl: BlockListDecl
    sites: list[LoopSite]
    elements: list[ClassRef]
    count: int | None


class ListFinder:
    """Finds the transformer classes of `source` and their block lists."""

    def __init__(
        self, source: SourceFile, resolver: Resolver, config: dict[str, Any] | None
    ) -> None:
        self.source = source
        self.resolver = resolver
        self.config = config
        self.path = str(source.path)

    def transformers(self, class_name: str | None) -> list[tuple[ClassRef, list[ListFacts]]]:
        """`class_name` (or every class of the file that is a model, not a component of
        another), with its block lists. Raises `AnalysisError` when there is none."""
        classes = {c.name: c for c in self.source.classes()}
        if class_name is not None and class_name not in classes:
            available = ", ".join(sorted(classes)) or "none"
            raise AnalysisError(
                "unknown-class",
                f"{self.path}: class {class_name} is not defined there (classes: {available})",
            )
        candidates: dict[str, tuple[ClassRef, list[ListFacts]]] = {}
        wanted = [class_name] if class_name else list(classes)
        for name in wanted:
            ref = ClassRef(name, name, classes[name], self.source)
            lists = self.block_lists(ref)
            if lists:
                candidates[name] = (ref, lists)
        if class_name is None and len(candidates) > 1:
            # A class that another class of the file builds (a block, an MoE layer holding
            # `experts`) is a component, not the model.
            built = _constructed_in_other_classes(classes.values())
            components = {k for k in candidates if k in built}
            if components != set(candidates):
                candidates = {k: v for k, v in candidates.items() if k not in components}
        if not candidates:
            raise self._no_transformer(classes, wanted, class_name)
        return list(candidates.values())

    def _no_transformer(
        self, classes: dict[str, ast.ClassDef], wanted: list[str], class_name: str | None
    ) -> AnalysisError:
        """The error for a file (or class) without a block list that forward runs."""
        tried = f"Tried lists: {DECL_SHAPES}. Tried loops: {LOOP_SHAPES}."
        if class_name:
            why = self.why_no_lists(
                ClassRef(class_name, class_name, classes[class_name], self.source)
            )
            return AnalysisError(
                "no-block-lists",
                f"{self.path}: {class_name} has no nn.ModuleList of blocks that forward runs "
                f"({why}). {tried}",
            )
        found = [
            f"{name}: {why}"
            for name in wanted
            if (why := self.why_no_lists(ClassRef(name, name, classes[name], self.source)))
            and (not why.startswith("no `self.") or "; " in why)  # a bare "none" says nothing
        ]
        seen = f" ({'; '.join(found[:4])})" if found else ""
        return AnalysisError(
            "no-transformer",
            f"{self.path}: no transformer found (no class runs an nn.ModuleList of blocks "
            f"in forward){seen}. {tried}",
        )

    def block_lists(self, cls: ClassRef) -> list[ListFacts]:
        """The lists of model-defined blocks that `cls`'s forward runs, in run order."""
        decls = find_block_list_decls(cls, self.resolver)
        init = self.resolver.find_method(cls, "__init__")
        decls = [
            one
            for decl in decls
            for one in (
                nested_lists(
                    decl, resolve_count(decl.outer, init[0] if init else None, self.config)
                )
                if decl.container == "Nested"
                else [decl]
            )
        ]
        model_decls = {}
        for decl in decls:
            elements = [
                self.element_class(e.class_name, e.inner, decl.source) for e in decl.elements
            ]
            elements = [e for e in elements if e is not None]
            if elements:
                model_decls[decl.attr] = (decl, elements)
        if not model_decls:
            return []
        _, sites, _ = find_loop_sites(cls, self.resolver, set(model_decls))
        out = []
        for attr, (decl, elements) in model_decls.items():
            attr_sites = [s for s in sites if s.attr == attr and s.calls]
            if not attr_sites:
                continue
            count = resolve_count(decl.count_expr, init[0] if init else None, self.config)
            out.append(ListFacts(decl, attr_sites, elements, count))
        out.sort(key=lambda f: min(s.order for s in f.sites))
        return out

    def why_no_lists(self, cls: ClassRef) -> str:
        """What was found in `cls` instead of a block list that forward runs."""
        decls = find_block_list_decls(cls, self.resolver)
        if not decls:
            found = (
                self._nested_runner(cls)
                or self._other_containers(cls)
                or self._registered_one_by_one(cls)
            )
            if found:
                return "no `self.<attr> = nn.ModuleList(...)` in it or its bases; " + found
            return "no `self.<attr> = nn.ModuleList(...)` in it or its bases"
        parts: list[str] = []
        model_attrs: set[str] = set()
        for decl in decls:
            classes = [e.class_name for e in decl.elements]
            if any(self.element_class(e.class_name, e.inner, decl.source) for e in decl.elements):
                model_attrs.add(decl.attr)
            elif classes:
                parts.append(
                    f"`{decl.attr}` (line {decl.line}) holds {', '.join(sorted(set(classes)))}, "
                    "not a model-defined block class"
                )
            else:
                parts.append(
                    f"`{decl.attr}` (line {decl.line}): its elements are not built in a "
                    "recognised shape"
                )
        forward, sites, visited = find_loop_sites(cls, self.resolver, model_attrs)
        for attr in sorted(model_attrs):
            attr_sites = [s for s in sites if s.attr == attr]
            if forward is None:
                parts.append(f"`{attr}`: the class has no `forward`")
            elif not attr_sites:
                handed = _handed_to(forward, attr)
                parts.append(
                    f"`{attr}` is not iterated by a loop of a recognised shape"
                    + (
                        f"; forward hands it to `{handed[0]}(...)` (line {handed[1]}), which "
                        "is not read for its loop: run the loop in `forward` or in a method of "
                        "the model"
                        if handed
                        else ""
                    )
                    + (f"; {found}" if (found := unread_while(visited, attr)) else "")
                )
            else:
                parts.append(
                    f"`{attr}` is iterated (line {attr_sites[0].loop.lineno}) but no call of "
                    "its blocks was found in the loop"
                )
        return "; ".join(parts)

    def _other_containers(self, cls: ClassRef) -> str:
        """`self.blocks = nn.Sequential(*[Block(...) ...])` / `nn.ModuleDict({...: Block(...)})`
        holding classes of the model's file: name the container (cache-dit caches an
        nn.ModuleList that forward runs in a loop)."""
        init = self.resolver.find_method(cls, "__init__")
        if init is None or cls.source is None:
            return ""
        local = {c.name for c in cls.source.classes()}
        for node in walk_local(init[0]):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            kind = callee_name(node.value)
            attr = next((a for t in node.targets if (a := self_attr(t))), None)
            if attr is None or kind not in ("Sequential", "ModuleDict"):
                continue
            held = sorted(
                {
                    n.func.id
                    for n in walk(node.value)
                    if isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Name)
                    and n.func.id in local
                }
            )
            if held:
                return (
                    f"`self.{attr}` (line {node.lineno}) is an nn.{kind} of {', '.join(held)}: "
                    "cache-dit caches an nn.ModuleList that forward runs block by block in a "
                    f"loop (`for block in self.{attr}: x = block(x, ...)`)"
                )
        return ""

    def _registered_one_by_one(self, cls: ClassRef) -> str:
        """`setattr(self, f"block_{i}", Block(...))` run with `getattr(self, f"block_{i}")`:
        name both (`registered_blocks`)."""
        init = self.resolver.find_method(cls, "__init__")
        if init is None or cls.source is None:
            return ""
        _, _, runs = find_loop_sites(cls, self.resolver, set())
        local = {c.name for c in cls.source.classes()}
        return registered_one_by_one(init[0], runs, local)

    def _nested_runner(self, cls: ClassRef) -> str:
        """`self.backbone(x, c)` in forward, where `self.backbone = Backbone(...)` runs the
        block lists: say so (the integration is generated for the inner class; its `enable()`
        finds that module inside the wrapper)."""
        found = self.resolver.find_method(cls, "forward")
        init = self.resolver.find_method(cls, "__init__")
        if found is None or init is None or cls.source is None:
            return ""
        built = {
            attr: node.value
            for node in walk_local(init[0])
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
            for t in node.targets
            if (attr := self_attr(t))
        }
        for node in walk_local(found[0]):
            attr = self_attr(node.func) if isinstance(node, ast.Call) else None
            if attr not in built:
                continue
            inner = self.resolver.resolve_class(cls.source, call_name(built[attr]))
            if inner.node is None:
                continue
            lists = self.block_lists(inner)
            if lists:
                names = ", ".join(f"`{f.decl.attr}`" for f in lists)
                return (
                    f"its forward runs `self.{attr}` ({inner.name}), whose forward runs the "
                    f"block list {names}: analyze {inner.name} (the module generated for it "
                    f"finds `self.{attr}` inside the pipeline's {cls.name})"
                )
        return ""

    def element_class(
        self, name: str, inner: list[str], source: SourceFile | None = None
    ) -> ClassRef | None:
        """The model-defined module class a list element is built from (None: a torch layer or a
        function); `source`: the file that declares the list (a base class's), else this one."""
        source = source or self.source
        ref = self.resolver.resolve_class(source, name)
        if ref.node is None:
            if ref.qualname.startswith(("torch.", "nn.")):
                return None
            # A function wrapping a module (`zero_module(nn.Linear(...))`) or an unknown class.
            if inner:
                return self.element_class(inner[0], [], source)
            top = source.top_level.get(name)
            if isinstance(top, ast.FunctionDef):
                return None
            return ref
        if self.resolver.find_method(ref, "forward") is None and not self.resolver.is_subclass_of(
            ref, ("Module", "ModelMixin")
        ):
            return None
        if inner:
            ref = ClassRef(ref.name, ref.qualname, ref.node, ref.source)
        return ref


def _handed_to(forward: ast.FunctionDef | None, attr: str) -> tuple[str, int] | None:
    """`run_blocks(self.<attr>, x)` in forward: the callee's text and the line (`len(...)`
    reads the list's length, it runs nothing)."""
    for node in walk_local(forward) if forward is not None else ():
        if (
            isinstance(node, ast.Call)
            and callee_name(node) != "len"
            and any(self_attr(a) == attr for a in [*node.args, *(k.value for k in node.keywords)])
        ):
            return callee_name(node) or ast.unparse(node.func), node.lineno
    return None


def _constructed_in_other_classes(classes: Iterable[ast.ClassDef]) -> set[str]:
    """Names of classes called (instantiated) inside the body of a different class."""
    out: set[str] = set()
    for cls in classes:
        for node in walk(cls):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id != cls.name
            ):
                out.add(node.func.id)
    return out
