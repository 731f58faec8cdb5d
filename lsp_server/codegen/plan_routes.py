"""The plan's SDPA-route fields, from the analysis' `sdpaRoutes`: the classes the standalone
module routes through cache-dit's CP attention, the names bound to FlashAttention-2's kernel, and
the flags pinned so routed modules take their kernel branch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def route_fields(routes: list[Mapping[str, Any]]) -> dict[str, Any]:
    """`sdpaRoutes`, and `flashNames` / `kernelFlags` when a route needs them."""
    return {
        "sdpaRoutes": [{k: r[k] for k in ("class", "owner", "names")} for r in routes],
        **_flash_names(routes),
        **_kernel_flags(routes),
    }


def unrouted(patches: Any, routes: list[Mapping[str, Any]]) -> list[Any]:
    """The analysis' patches less the SDPA calls the generated module routes."""
    routed = {(r.get("path"), r.get("line")) for r in routes}
    return [
        p
        for p in patches or []
        if not (isinstance(p, Mapping) and (p.get("path"), p.get("line")) in routed)
    ]


def _kernel_flags(routes: list[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """`kernelFlags` (only when a route's class chooses its kernel by a run-time flag)."""
    flags = [
        {"class": r["class"], "attr": attr, "value": value}
        for r in routes
        for attr, value in r.get("kernelFlags") or []
    ]
    return {"kernelFlags": flags} if flags else {}


def _flash_names(routes: list[Mapping[str, Any]]) -> dict[str, list[str]]:
    """`flashNames` (only when a route rebinds FlashAttention-2's `flash_attn_func`)."""
    names = sorted({n for r in routes for n in r.get("flashNames") or []})
    return {"flashNames": names} if names else {}
