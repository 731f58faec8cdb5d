"""The diagnostics of a transformer's analysis: PatchFunctor reasons (CDIT101/102/103), block
lists whose ForwardPattern is missing or uncertain or which are too short (CDIT001-004), and
the installed cache-dit registry's notes and warnings (CDIT201/202)."""

from __future__ import annotations

from .analysis_result import BlockListResult
from .model import Diagnostic, RegistryFacts
from .patch_functor import Reason


def transformer_diagnostics(
    path: str,
    results: list[BlockListResult],
    reasons: list[Reason],
    is_diffusers: bool,
    registry: RegistryFacts | None,
) -> list[Diagnostic]:
    """Diagnostics for the transformer in `path` with the cached lists `results`."""
    out = _reason_diagnostics(path, reasons)
    for b in results:
        out += _block_list_diagnostics(path, b, is_diffusers)
    if not is_diffusers and any(r.active for r in reasons):
        out.append(
            Diagnostic(
                "info",
                "CDIT103",
                "not a diffusers model: cache-dit skips PatchFunctors for it unless "
                "CACHE_DIT_PATCH_FUNCTOR_DISABLE_DIFFUSERS_CHECK=1; the generated functor "
                "applies itself (it overrides `is_from_diffusers`)",
                path,
                reasons[0].line,
            )
        )
    if registry is not None:
        for note in registry.notes:
            out.append(Diagnostic("info", "CDIT201", note, path, 1))
        for warning in registry.warnings:
            out.append(Diagnostic("warning", "CDIT202", warning, path, 1))
    return out


def _reason_diagnostics(path: str, reasons: list[Reason]) -> list[Diagnostic]:
    """A warning for each active PatchFunctor reason, an info for each inactive one."""
    out: list[Diagnostic] = []
    for r in reasons:
        if not r.active:
            out.append(
                Diagnostic(
                    "info",
                    "CDIT102",
                    f"inactive unless {r.active_when}: {r.message}",
                    path,
                    r.line,
                )
            )
            continue
        out.append(
            Diagnostic("warning", "CDIT101", f"PatchFunctor needed: {r.message}", path, r.line)
        )
    return out


def _block_list_diagnostics(path: str, b: BlockListResult, is_diffusers: bool) -> list[Diagnostic]:
    """What is missing or doubtful about one cached block list."""
    out: list[Diagnostic] = []
    if b.forward_pattern is None:
        out.append(
            Diagnostic(
                "warning",
                "CDIT001",
                f"no ForwardPattern fits `{b.attr}`: {b.evidence[-1].message}",
                path,
                b.evidence[0].line,
            )
        )
    elif b.confidence < 0.6:
        out.append(
            Diagnostic(
                "info",
                "CDIT002",
                f"ForwardPattern of `{b.attr}` is uncertain "
                f"({b.forward_pattern}, confidence {b.confidence:.2f})",
                path,
                b.evidence[0].line,
            )
        )
    if b.check_forward_pattern is False and is_diffusers:
        out.append(
            Diagnostic(
                "info",
                "CDIT003",
                f"{b.block_class}.forward does not use cache-dit's stream "
                "names; set check_forward_pattern=False",
                path,
                b.evidence[0].line,
            )
        )
    if b.count is not None and b.count < 2:
        out.append(
            Diagnostic(
                "warning",
                "CDIT004",
                f"`{b.attr}` has {b.count} block(s): DBCache needs "
                "Fn_compute_blocks <= the list length and a middle to skip",
                path,
                b.evidence[0].line,
            )
        )
    return out
