"""Reads sub-module sources for the context-parallel plan: position-embedding outputs and the
attention processors of a block (do they already run context-parallel, and for which keys?)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..astutil import call_name, last_part, names_read, self_attr, short_text, walk_local
from ..model import Evidence
from ..parallel_input import ParallelContext
from ..sources import ClassRef
from .flow import ModuleCall

_RESHAPES = ("view", "reshape", "expand", "repeat")
_ATTENTION_KERNELS = (
    "scaled_dot_product_attention",
    "flash_attn_func",
    "dispatch_attention_fn",
    "_dispatch_attention_fn",
    "memory_efficient_attention",
)


def position_output_dims(
    ctx: ParallelContext, calls: list[ModuleCall]
) -> dict[str, tuple[int, int | None, int]]:
    """attr -> (split_dim, expected_dims, outputs) read from the module's `forward` returns."""
    out: dict[str, tuple[int, int | None, int]] = {}
    for call in calls:
        if call.constructor is None:
            continue
        ref = ctx.resolver.resolve_class(ctx.source, call.constructor)
        found = ctx.resolver.find_method(ref, "forward") if ref.node is not None else None
        if found is None:
            continue
        func = found[0]
        ndim, outputs = _return_shape(func, found[1].node)
        if outputs == 0:
            continue
        dim = 0 if ndim == 2 else 1
        out[call.attr] = (dim, ndim, outputs)
    return out


def _return_shape(
    func: ast.FunctionDef, owner: ast.ClassDef | None = None, depth: int = 0
) -> tuple[int | None, int]:
    """(dims of the first returned tensor, number of returned values) of a position module."""
    shape = _Shapes(func, owner, depth)
    for node in walk_local(func):
        if isinstance(node, ast.Return) and node.value is not None:
            elts = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            return shape.ndim(elts[0], 0), len(elts)
    return None, 0


class _Shapes:
    """Follows a returned value back to its outermost reshape: through local assignments, lists
    filled with `append` and concatenated, and helper methods of the same class."""

    def __init__(self, func: ast.FunctionDef, owner: ast.ClassDef | None, depth: int) -> None:
        self.owner = owner
        self.depth = depth
        self.assigns: dict[str, ast.expr] = {}
        self.appended: dict[str, ast.expr] = {}
        nodes = sorted(
            (n for n in walk_local(func) if isinstance(n, ast.Assign | ast.Expr)),
            key=lambda n: n.lineno,
        )
        for node in nodes:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.assigns[target.id] = node.value
            elif (
                isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "append"
                and isinstance(node.value.func.value, ast.Name)
                and node.value.args
            ):
                self.appended.setdefault(node.value.func.value.id, node.value.args[0])

    def ndim(self, expr: ast.expr, depth: int) -> int | None:
        if depth > 10:
            return None
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            attr = expr.func.attr
            if attr in _RESHAPES and expr.args and attr != "repeat":
                if len(expr.args) == 1 and isinstance(expr.args[0], ast.Tuple):
                    return len(expr.args[0].elts)
                if not any(isinstance(a, ast.Starred) for a in expr.args):
                    return len(expr.args)
                return None
            if attr == "unsqueeze":
                inner = self.ndim(expr.func.value, depth + 1)
                return inner + 1 if inner is not None else None
            if attr in ("flatten", "squeeze", "stack"):
                return None
            if attr in ("cat", "concat") and expr.args:
                first = expr.args[0]
                if isinstance(first, ast.List | ast.Tuple) and first.elts:
                    return self.ndim(first.elts[0], depth + 1)
                if isinstance(first, ast.Name) and first.id in self.appended:
                    return self.ndim(self.appended[first.id], depth + 1)
                return None
            method = self_attr(expr.func)
            if method and self.owner is not None and self.depth < 2:
                helper = next(
                    (
                        f
                        for f in self.owner.body
                        if isinstance(f, ast.FunctionDef) and f.name == method
                    ),
                    None,
                )
                if helper is not None:
                    return _return_shape(helper, self.owner, self.depth + 1)[0]
            return self.ndim(expr.func.value, depth + 1)  # .float(), .to(...), .contiguous()
        if isinstance(expr, ast.Name) and expr.id in self.assigns:
            value = self.assigns[expr.id]
            if value is not expr:
                return self.ndim(value, depth + 1)
        return None


@dataclass
class AttentionFacts:
    cross_attention_cp: bool | None = None
    needs_processor_patch: list[Evidence] = field(default_factory=list)
    third_party_attention: list[Evidence] = field(default_factory=list)
    gqa: list[Evidence] = field(default_factory=list)
    masks: list[Evidence] = field(default_factory=list)


def attention_facts(ctx: ParallelContext, block: ClassRef) -> AttentionFacts:
    """Look at the attention modules a block builds and the processors they run."""
    facts = AttentionFacts()
    init = ctx.resolver.find_method(block, "__init__")
    if init is None:
        return facts
    func, owner = init
    source = owner.source or ctx.source
    for node in walk_local(func):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        attr = next((self_attr(t) for t in node.targets if self_attr(t)), None)
        if attr is None:
            continue
        cls = ctx.resolver.resolve_class(source, call_name(node.value))
        if cls.node is None:
            continue
        if not _is_attention(ctx, cls):
            if _calls_attention_kernel(cls):  # a plain nn.Module computing attention itself
                _read_processor(ctx, cls, attr, facts, method="forward")
                facts.third_party_attention.append(_third_party(attr, cls, source, node))
            continue
        processor = _processor_class(ctx, node.value, cls, source)
        if processor is None or processor.node is None:
            continue
        _read_processor(ctx, processor, attr, facts)
        if not ctx.resolver.derives_from(cls, "AttentionModuleMixin") and not any(
            a.name in ("Attention", "AttentionModuleMixin", "MochiAttention")
            for a in ctx.resolver.iter_mro(cls)
        ):
            facts.third_party_attention.append(
                Evidence(
                    f"`{attr}` is {cls.name}, not a diffusers Attention: cache-dit will not "
                    "hand it the parallel config; the planner must set "
                    "`processor._parallel_config`",
                    str(source.path),
                    node.lineno,
                )
            )
    return facts


def _calls_attention_kernel(cls: ClassRef) -> bool:
    forward = next(
        (
            s
            for s in cls.node.body
            if isinstance(s, ast.FunctionDef)  # type: ignore[union-attr]
            and s.name == "forward"
        ),
        None,
    )
    return forward is not None and any(
        isinstance(n, ast.Call) and last_part(call_name(n)) in _ATTENTION_KERNELS
        for n in walk_local(forward)
    )


def _third_party(attr: str, cls: ClassRef, source, node: ast.stmt) -> Evidence:
    return Evidence(
        f"`{attr}` is {cls.name}, not a diffusers Attention: cache-dit will not hand it the "
        "parallel config; the planner must set it and route attention through cache-dit's "
        "_dispatch_attention_fn",
        str(source.path),
        node.lineno,
    )


def _is_attention(ctx: ParallelContext, cls: ClassRef) -> bool:
    if "processor" in {
        a.arg
        for f in cls.node.body
        if isinstance(f, ast.FunctionDef)  # type: ignore[union-attr]
        and f.name == "__init__"
        for a in f.args.args
    }:
        return True
    return any(a.name in ("Attention", "AttentionModuleMixin") for a in ctx.resolver.iter_mro(cls))


def _processor_class(
    ctx: ParallelContext, call: ast.Call, cls: ClassRef, source
) -> ClassRef | None:
    for kw in call.keywords:
        if kw.arg == "processor" and isinstance(kw.value, ast.Call):
            return ctx.resolver.resolve_class(source, call_name(kw.value))
    for ancestor in ctx.resolver.iter_mro(cls):
        if ancestor.node is None or ancestor.source is None:
            continue
        for stmt in ancestor.node.body:
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_default_processor_cls" for t in stmt.targets
            ):
                return ctx.resolver.resolve_class(ancestor.source, ast.unparse(stmt.value))
        init = next(
            (
                s
                for s in ancestor.node.body
                if isinstance(s, ast.FunctionDef) and s.name == "__init__"
            ),
            None,
        )
        if init is not None:
            for node in walk_local(init):
                if isinstance(node, ast.IfExp) and isinstance(node.body, ast.Call):
                    name = call_name(node.body)
                    if "Processor" in name:
                        return ctx.resolver.resolve_class(ancestor.source, name)
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Call)
                    and any(isinstance(t, ast.Name) and t.id == "processor" for t in node.targets)
                ):
                    return ctx.resolver.resolve_class(ancestor.source, call_name(node.value))
    return None


def _read_processor(
    ctx: ParallelContext,
    processor: ClassRef,
    attr: str,
    facts: AttentionFacts,
    method: str = "__call__",
) -> None:
    assert processor.node is not None
    call_method = next(
        (s for s in processor.node.body if isinstance(s, ast.FunctionDef) and s.name == method),
        None,
    )
    if call_method is None or processor.source is None:
        return
    path = str(processor.source.path)
    dispatched = False
    for node in walk_local(call_method):
        if not isinstance(node, ast.Call):
            continue
        name = last_part(call_name(node))
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if "parallel_config" in keywords:
            dispatched = True
            value = keywords["parallel_config"]
            if isinstance(value, ast.IfExp) and "encoder_hidden_states" in ast.unparse(value.test):
                if facts.cross_attention_cp is None:
                    facts.cross_attention_cp = False
            elif self_attr(value) or isinstance(value, ast.Attribute):
                facts.cross_attention_cp = True
        if "enable_gqa" in keywords and not (
            isinstance(keywords["enable_gqa"], ast.Constant)
            and keywords["enable_gqa"].value is False
        ):
            facts.gqa.append(
                Evidence(
                    f"`{attr}` attention runs with enable_gqa: Ulysses needs K/V "
                    "repeated to all heads or a cp_gqa_strategy",
                    path,
                    node.lineno,
                )
            )
        if name == "scaled_dot_product_attention" and not dispatched:
            facts.needs_processor_patch.append(
                Evidence(
                    f"{processor.name} calls F.scaled_dot_product_attention directly: patch it to "
                    "cache-dit's _dispatch_attention_fn so attention runs the all-to-all",
                    path,
                    node.lineno,
                )
            )
        if name == "prepare_attention_mask" or (
            name in ("cat", "concat", "pad", "ones", "ones_like", "full")
            and any("mask" in n.lower() for n in names_read(node))
        ):
            facts.masks.append(
                Evidence(
                    f"{processor.name} builds or pads the attention mask from the lengths it sees "
                    "(`" + short_text(node) + "`); under CP keys are gathered to full length, so "
                    "patch it to build the mask for the gathered sequence",
                    path,
                    node.lineno,
                )
            )
    if facts.needs_processor_patch and facts.cross_attention_cp is None:
        facts.cross_attention_cp = True
