"""The generated code that routes attention calling SDPA itself through cache-dit's CP attention.

cache-dit's context parallelism runs inside its attention dispatch (`_dispatch_attention_fn`, the
route diffusers' `dispatch_attention_fn` takes too): the all-to-all of Ulysses, the key/value
rotation of ring. An attention processor or plain attention module that calls
`torch.nn.functional.scaled_dot_product_attention` itself (diffusers' `AttnProcessor2_0`, most
third-party DiTs) would attend over this rank's tokens only. cache-dit's own planners patch such
processors class by class; the generated module instead wraps SDPA once, process-wide, with a
function that calls the original unless an attention module of the transformer's split region
that runs such a class is active (a forward pre-hook enters, a forward hook leaves, also on an
exception): inside, the call goes through cache-dit's dispatch with the transformer's CP config
(layout `(batch, heads, tokens, dim)` transposed to cache-dit's `(batch, tokens, heads, dim)` and
back); the SDPA calls of cache-dit's own kernels inside that dispatch run unrouted. A module that
bound SDPA to a bare name (`from torch.nn.functional import scaled_dot_product_attention as sdpa`)
gets that name rebound to the wrapper too. Generated for the standalone target only (a checkout
planner refuses the CP part with the analysis' patch).
"""

from __future__ import annotations

from collections.abc import Sequence

from .layout import INDENT, docstring, quote
from .render_cp_region import in_region

ROUTE_FUNCTION = "_route_sdpa"


def sdpa_routes_code(
    routes: Sequence[tuple[str, str, tuple[str, ...]]],
    lists: Sequence[str],
    width: int,
    flash_names: Sequence[str] = (),
    kernel_flags: Sequence[tuple[str, str, bool]] = (),
) -> str:
    """`routes`: (class name, "processor" | "module", bare names) per class calling SDPA;
    `lists`: the block lists bounding the split region (empty: the whole transformer);
    `flash_names`: the bare names among them bound to FlashAttention-2's `flash_attn_func`
    (rebound to a wrapper taking its `(batch, tokens, heads, dim)` layout); `kernel_flags`:
    (class, attribute, value) set on each routed module so it takes its kernel branch (timm's
    `fused_attn`, set at run time, chooses between SDPA and a hand-computed attention)."""
    b = INDENT
    doc = (
        "Route the `scaled_dot_product_attention` calls of the classes in `_SDPA_ROUTES` "
        "through cache-dit's context-parallel attention while an attention module of this "
        "transformer's split region runs one of them (the processor it holds, or the module "
        "itself). SDPA is wrapped once per process; outside those modules the wrapper calls the "
        "original. Call after `cache_dit.enable_cache` (it reads the transformer's CP config)."
    )
    lines = [
        *_route_constants(routes, lists, flash_names, kernel_flags),
        "",
        "",
        f"def {ROUTE_FUNCTION}(transformer: torch.nn.Module) -> None:",
        *docstring(doc, indent=b, width=width),
        f"{b}import sys",
        "",
        f"{b}import torch.nn.functional as F",
        f"{b}from cache_dit.attention import _dispatch_attention_fn",
        "",
        f"{b}config = getattr(transformer, '_cp_config', None)",
        f"{b}if config is None:",
        f"{2 * b}return",
        *_wrapper_lines(),
        f"{b}def enter(module: Any, args: Any) -> None:",
        f"{2 * b}active.append(config)",
        "",
        f"{b}def leave(module: Any, args: Any, output: Any) -> None:",
        f"{2 * b}active.pop()",
        "",
        *(_flash_lines() if flash_names else []),
        f"{b}def defines(obj: Any, name: str) -> type | None:",
        f"{2 * b}return next((c for c in type(obj).__mro__ if c.__name__ == name), None)",
        "",
        *_install_lines(flash_names, kernel_flags, lists),
    ]
    return "\n".join(lines) + "\n"


def _route_constants(
    routes: Sequence[tuple[str, str, tuple[str, ...]]],
    lists: Sequence[str],
    flash_names: Sequence[str],
    kernel_flags: Sequence[tuple[str, str, bool]],
) -> list[str]:
    """`_SDPA_ROUTES`, `_SDPA_REGION`, and `_FLASH_NAMES` / `_KERNEL_FLAGS` when needed."""
    b = INDENT
    entries = [
        f"{b}({quote(cls)}, {quote(owner)}, ({''.join(quote(n) + ', ' for n in names)})),"
        for cls, owner, names in routes
    ]
    region = ", ".join(quote(n) for n in lists)
    return [
        "_SDPA_ROUTES: tuple[tuple[str, str, tuple[str, ...]], ...] = (",
        *entries,
        ")",
        f"_SDPA_REGION = ({region}{',' if lists else ''})  # block lists split; empty: all",
        *(
            [f"_FLASH_NAMES = ({''.join(quote(n) + ', ' for n in flash_names).rstrip()})"]
            if flash_names
            else []
        ),
        *(
            [
                "# flags pinned so the routed modules take their kernel branch",
                "_KERNEL_FLAGS: tuple[tuple[str, str, bool], ...] = (",
                *(f"{b}({quote(c)}, {quote(a)}, {v})," for c, a, v in kernel_flags),
                ")",
            ]
            if kernel_flags
            else []
        ),
    ]


def _install_lines(
    flash_names: Sequence[str],
    kernel_flags: Sequence[tuple[str, str, bool]],
    lists: Sequence[str],
) -> list[str]:
    """The loop of `_route_sdpa` that hooks every routed module of the split region."""
    b = INDENT
    return [
        f"{b}for name, module in transformer.named_modules():",
        f"{2 * b}if _SDPA_REGION and {in_region('_SDPA_REGION', list(lists), negate=True)}:",
        f"{3 * b}continue",
        f"{2 * b}for cls_name, owner, names in _SDPA_ROUTES:",
        f"{3 * b}runs = getattr(module, 'processor', None) if owner == 'processor' else module",
        f"{3 * b}cls = defines(runs, cls_name) if runs is not None else None",
        f"{3 * b}if cls is None or getattr(module, '_cdit_sdpa_routed', False):",
        f"{4 * b}continue",
        f"{3 * b}namespace = vars(sys.modules[cls.__module__])",
        f"{3 * b}for bare in names:",
        f"{4 * b}if namespace.get(bare) is original:",
        f"{5 * b}namespace[bare] = routed",
        *(
            [
                # flash-attn missing: a fallback module binds no such name (SDPA is routed)
                f"{4 * b}elif bare in _FLASH_NAMES and bare in namespace and not hasattr(",
                f"{5 * b}namespace[bare], '_cdit_active'",
                f"{4 * b}):",
                f"{5 * b}namespace[bare] = flash_route(namespace[bare])",
            ]
            if flash_names
            else []
        ),
        *(
            [
                f"{3 * b}for flag_class, attr, value in _KERNEL_FLAGS:",
                f"{4 * b}if flag_class == cls_name:",
                f"{5 * b}setattr(runs, attr, value)",
            ]
            if kernel_flags
            else []
        ),
        f"{3 * b}module.register_forward_pre_hook(enter)",
        f"{3 * b}module.register_forward_hook(leave, always_call=True)",
        f"{3 * b}module._cdit_sdpa_routed = True",
    ]


def _flash_lines() -> list[str]:
    """`flash_route(flash)`: a `flash_attn_func` that goes through cache-dit's dispatch while a
    routed module runs (its layout is the dispatch's: no transposes)."""
    b = INDENT
    return [
        f"{b}def flash_route(flash: Any) -> Any:",
        f"{2 * b}def routed_flash(",
        f"{3 * b}q: torch.Tensor,",
        f"{3 * b}k: torch.Tensor,",
        f"{3 * b}v: torch.Tensor,",
        f"{3 * b}dropout_p: float = 0.0,",
        f"{3 * b}softmax_scale: float | None = None,",
        f"{3 * b}causal: bool = False,",
        f"{2 * b}) -> torch.Tensor:",
        f"{3 * b}if not active or active[-1] is None:",
        f"{4 * b}return flash(",
        f"{5 * b}q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal",
        f"{4 * b})",
        f"{3 * b}cp_config = active[-1]",
        f"{3 * b}active.append(None)",
        f"{3 * b}try:",
        f"{4 * b}return _dispatch_attention_fn(",
        f"{5 * b}q,",
        f"{5 * b}k,",
        f"{5 * b}v,",
        f"{5 * b}None,",
        f"{5 * b}dropout_p=dropout_p,",
        f"{5 * b}is_causal=causal,",
        f"{5 * b}scale=softmax_scale,",
        f"{5 * b}cp_config=cp_config,",
        f"{4 * b})",
        f"{3 * b}finally:",
        f"{4 * b}active.pop()",
        "",
        f"{2 * b}routed_flash._cdit_active = active  # type: ignore[attr-defined]",
        f"{2 * b}return routed_flash",
        "",
    ]


def _wrapper_lines() -> list[str]:
    """The lines of `_route_sdpa` that wrap SDPA once per process (or find the wrapper)."""
    b = INDENT
    return [
        f"{b}routed = F.scaled_dot_product_attention",
        f"{b}if not hasattr(routed, '_cdit_active'):",
        f"{2 * b}original = routed",
        f"{2 * b}active: list[Any] = []",
        "",
        f"{2 * b}def routed(",
        f"{3 * b}query: torch.Tensor,",
        f"{3 * b}key: torch.Tensor,",
        f"{3 * b}value: torch.Tensor,",
        f"{3 * b}attn_mask: torch.Tensor | None = None,",
        f"{3 * b}dropout_p: float = 0.0,",
        f"{3 * b}is_causal: bool = False,",
        f"{3 * b}scale: float | None = None,",
        f"{3 * b}enable_gqa: bool = False,",
        f"{2 * b}) -> torch.Tensor:",
        f"{3 * b}kwargs = {{'dropout_p': dropout_p, 'is_causal': is_causal, 'scale': scale}}",
        f"{3 * b}if not active or active[-1] is None:",
        f"{4 * b}return original(",
        f"{5 * b}query, key, value, attn_mask, enable_gqa=enable_gqa, **kwargs",
        f"{4 * b})",
        f"{3 * b}if query.dim() != 4:",
        f"{4 * b}raise ValueError(",
        f'{5 * b}"context parallelism: scaled_dot_product_attention got "',
        f'{5 * b}f"{{query.dim()}}-D inputs; the routed attention takes (batch, heads, "',
        f'{5 * b}"tokens, dim)"',
        f"{4 * b})",
        f"{3 * b}cp_config = active[-1]",
        f"{3 * b}active.append(None)  # the SDPA calls of cache-dit's own kernels run as they are",
        f"{3 * b}try:",
        f"{4 * b}out = _dispatch_attention_fn(",
        f"{5 * b}query.transpose(1, 2),",
        f"{5 * b}key.transpose(1, 2),",
        f"{5 * b}value.transpose(1, 2),",
        f"{5 * b}attn_mask,",
        f"{5 * b}enable_gqa=enable_gqa,",
        f"{5 * b}cp_config=cp_config,",
        f"{5 * b}**kwargs,",
        f"{4 * b})",
        f"{3 * b}finally:",
        f"{4 * b}active.pop()",
        f"{3 * b}return out.transpose(1, 2)",
        "",
        f"{2 * b}routed._cdit_active = active  # type: ignore[attr-defined]",
        f"{2 * b}routed._cdit_original = original  # type: ignore[attr-defined]",
        f"{2 * b}F.scaled_dot_product_attention = routed",
        f"{b}active = routed._cdit_active",
        f"{b}original = routed._cdit_original",
        "",
    ]
