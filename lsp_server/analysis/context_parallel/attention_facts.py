"""What the plan learns from a block's attention modules, and the reading primitives shared by the
processor and module readers (SDPA calls, hand-written attention products, stream joins)."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..astutil import (
    callee_name,
    names_read,
    walk_local,
)
from ..model import Evidence
from ..sources import ClassRef
from .result import SdpaRoute

ATTENTION_KERNELS = (
    "scaled_dot_product_attention",
    "flash_attn_func",
    "dispatch_attention_fn",
    "_dispatch_attention_fn",
    "memory_efficient_attention",
    "flex_attention",
)
# attention kernels nothing routes through a context-parallel backend (by name or prefix):
# FlashAttention's other entry points, xformers, SageAttention, PyTorch's FlexAttention and its
# private SDPA kernels, Ascend's fused attention, torch's functional multi-head attention
_UNROUTED_PREFIXES = ("flash_attn", "memory_efficient_attention", "sageattn", "flex_attention")
_UNROUTED = frozenset(
    {
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "npu_fusion_attention",
        "multi_head_attention_forward",
    }
)


@dataclass(frozen=True)
class CrossCall:
    """An SDPA call of the plain module `module` (the block's `self.<attr>`) whose keys come
    from its forward's parameter `key_param`, the queries from `query_params`."""

    attr: str
    module: ClassRef
    method: ast.FunctionDef
    sdpa: ast.Call
    key_param: str
    query_params: tuple[str, ...]
    local: Evidence


@dataclass
class AttentionFacts:
    cross_attention_cp: bool | None = None
    needs_processor_patch: list[Evidence] = field(default_factory=list)
    third_party_attention: list[Evidence] = field(default_factory=list)
    gqa: list[Evidence] = field(default_factory=list)
    masks: list[Evidence] = field(default_factory=list)
    # the joint key sequence the processor builds (`key = torch.cat([key, encoder_key], dim=1)`):
    # which stream comes first, "hidden" or "encoder", and where it was read
    joint_order: tuple[str, str] | None = None
    joint_order_at: Evidence | None = None
    # every join of the two streams seen (processors and the block's own forward); the order is
    # kept only when they all agree
    joins: list[tuple[tuple[str, str], Evidence]] = field(default_factory=list)
    # processors that compute attention themselves (linear attention: matmuls of keys and
    # values) with no attention kernel a context-parallel backend could run
    own_attention: list[Evidence] = field(default_factory=list)
    # modules of the block built from classes whose source could not be read, and whether any
    # of them is named as an attention (`attn`, `SelfAttention`)
    unread_modules: list[Evidence] = field(default_factory=list)
    unread_attention: bool = False
    # an attention of the block was read (a processor, an SDPA or kernel call)
    attention_seen: bool = False
    # the classes whose own method calls SDPA (one entry per class)
    sdpa_routes: list[SdpaRoute] = field(default_factory=list)
    # plain attention modules whose keys come from another input than the queries
    local_cross: list[Evidence] = field(default_factory=list)
    # ... the same, as facts: what the block hands those inputs is judged where it calls them
    cross_calls: list[CrossCall] = field(default_factory=list)


def sdpa_names(imports: Iterable[ast.stmt]) -> set[str]:
    """Bare names a module's `imports` (`SourceFile.import_statements()`) bind to an attention
    kernel the generated module can route: SDPA (`from torch.nn.functional import
    scaled_dot_product_attention [as sdpa]`) and FlashAttention-2's `flash_attn_func`
    (`flash_names`)."""
    imports = list(imports)
    return {
        alias.asname or alias.name
        for node in imports
        if isinstance(node, ast.ImportFrom) and node.module == "torch.nn.functional"
        for alias in node.names
        if alias.name == "scaled_dot_product_attention"
    } | flash_names(imports)


# the keywords of flash_attn_func the routed call can honour (others refuse CP)
FLASH_KEYWORDS = ("dropout_p", "softmax_scale", "causal")


def flash_names(imports: Iterable[ast.stmt]) -> set[str]:
    """Bare names a module's `imports` (also inside `try:`) bind to FlashAttention-2's
    `flash_attn_func` (`from flash_attn import flash_attn_func [as f]`): `(B, L, H, D)` in and
    out, the layout of cache-dit's attention dispatch."""
    return {
        a.asname or a.name
        for node in imports
        if isinstance(node, ast.ImportFrom) and node.module in _FLASH_MODULES
        for a in node.names
        if a.name == "flash_attn_func"
    }


_FLASH_MODULES = ("flash_attn", "flash_attn.flash_attn_interface")


def routable_flash(call: ast.Call, names: set[str]) -> bool:
    """A `flash_attn_func(q, k, v[, dropout_p, softmax_scale, causal])` call through a bare name
    the routing can rebind, with no other option (window, ALiBi, softcap, probabilities)."""
    return (
        isinstance(call.func, ast.Name)
        and call.func.id in names
        and len(call.args) <= 6
        and all(k.arg in ("q", "k", "v", *FLASH_KEYWORDS) for k in call.keywords)
    )


def unrouted_kernel(
    func: ast.FunctionDef, imports: Iterable[ast.stmt] | None = None
) -> ast.Call | None:
    """A call in `func` of an attention kernel that is neither SDPA nor cache-dit's dispatch
    (`flash_attn_varlen_func`, xformers' `memory_efficient_attention`, `sageattn`,
    `flex_attention`, a
    `flash_attn_func` with options the route cannot honour or not bound to a bare name by
    the module's `imports`): nothing routes it through a context-parallel backend."""
    imports = list(imports) if imports is not None else None
    routable = flash_names(imports) if imports is not None else set()
    renamed = _unrouted_aliases(imports or [])
    for node in walk_local(func):
        if isinstance(node, ast.Call):
            name = callee_name(node)
            if routable_flash(node, routable):
                continue
            if name.startswith(_UNROUTED_PREFIXES) or name in _UNROUTED or name in renamed:
                return node
    return None


def _unrouted_aliases(imports: Iterable[ast.stmt]) -> set[str]:
    """Bare names the imports bind to an unrouted kernel under another name (`from
    torch.nn.attention.flex_attention import flex_attention as fa`)."""
    return {
        alias.asname
        for node in imports
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname and (alias.name.startswith(_UNROUTED_PREFIXES) or alias.name in _UNROUTED)
    }


def calls_sdpa(call: ast.Call, aliases: set[str]) -> bool:
    if isinstance(call.func, ast.Name):
        return call.func.id in aliases or call.func.id == "scaled_dot_product_attention"
    return callee_name(call) == "scaled_dot_product_attention"


def own_attention_product(func: ast.FunctionDef) -> ast.AST | None:
    """A product of the keys with the values or queries (`torch.matmul(value, key)`,
    `q @ k.transpose(...)`, `einsum(..., k, v)`): attention computed by hand."""

    def keyish(node: ast.AST) -> bool:
        return any(n in ("key", "k", "keys") or n.endswith("_key") for n in names_read(node))

    for node in walk_local(func):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.MatMult)
            and (keyish(node.left) or keyish(node.right))
        ):
            return node
        if (
            isinstance(node, ast.Call)
            and callee_name(node)
            in (
                "matmul",
                "bmm",
                "einsum",
                "baddbmm",
            )
            and any(keyish(a) for a in node.args)
        ):
            return node
    return None


_ENCODER_WORDS = ("encoder", "text", "txt", "context", "ctx", "cond", "prompt", "caption", "added")


def stream_joins(func: ast.FunctionDef) -> list[tuple[tuple[str, str], int]]:
    """Joins of the two token streams along the sequence: `key = torch.cat([key, encoder_key],
    dim=1)` (keys, `dim=-3` too), `x = torch.cat([txt, img], dim=1)` (streams, `dim=-2` too); each
    part is "encoder" when its name says so (`encoder_key`, `txt`, `added_k`), else "hidden". Only
    joins of one of each; masks are not streams."""
    out: list[tuple[tuple[str, str], int]] = []
    for node in walk_local(func):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if not targets:
            continue
        call = node.value
        if callee_name(call) not in ("cat", "concat") or not call.args:
            continue
        parts = call.args[0]
        if not isinstance(parts, ast.List | ast.Tuple) or len(parts.elts) != 2:
            continue
        names = [names_read(e) for e in parts.elts]
        if any(any("mask" in n.lower() for n in group) for group in names) or not all(names):
            continue
        dims = [k.value for k in call.keywords if k.arg == "dim"] + list(call.args[1:2])
        if not (dims and isinstance(dims[0], ast.Constant | ast.UnaryOp)):
            continue
        try:
            dim = ast.literal_eval(dims[0])
        except ValueError:
            continue
        keyish = any(t == "key" or t.endswith("_key") or t in ("k", "keys") for t in targets)
        if dim != 1 and dim != (-3 if keyish else -2):
            continue
        kinds = tuple(
            "encoder" if any(w in n.lower() for n in group for w in _ENCODER_WORDS) else "hidden"
            for group in names
        )
        if sorted(kinds) == ["encoder", "hidden"]:
            out.append(((kinds[0], kinds[1]), node.lineno))
    return out
