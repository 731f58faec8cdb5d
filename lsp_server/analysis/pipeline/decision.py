"""The decision for one denoising loop: `has_separate_cfg` from its calls per step.

Two or more denoiser calls per step -> True, unless the first call already batches cond + uncond
(its input doubled by `torch.cat([x] * 2)` / `x.repeat(2, ...)`); one call -> False; no call ->
None. Evidence cites the loop, each call with the guard it runs under, the calls skipped on the
default path with the guard that skips them, and where the guards' values come from.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..astutil import short_text
from ..model import Evidence
from .batched_cfg import doubling, find_doubling, output_split
from .calls import CAP, Loop, Site
from .values import Def


@dataclass
class Verdict:
    value: bool | None
    confidence: float
    evidence: list[Evidence]


def _site_text(site: Site) -> str:
    text = short_text(site.call.func) + "(...)"
    if site.context:
        text += f" in cache_context({site.context!r})"
    return text


def _guard_text(site: Site, by: str) -> str:
    if not site.guards:
        return " unconditionally"
    g = site.guards[-1]
    how = f"True {by}" if g.status == "true" else "may be True: unknown statically"
    return f" when `{g.text()}` ({how})"


def decide_loop(loop: Loop, denoiser_note: str, told: bool = False) -> Verdict:
    """The verdict of one loop; `told`: the reading followed the call arguments given (not the
    default path), which the evidence says."""
    head = loop.node.test if isinstance(loop.node, ast.While) else loop.node.iter
    first = loop.sites[0] if loop.sites else None
    doubled = find_doubling(d for _, defs in first.arg_defs for d in defs) if first else None
    batched_ev = _batched_evidence(first, doubled)
    decided = _decide(loop, doubled is not None, bool(batched_ev), told)
    if decided is None:
        return Verdict(
            None,
            0.0,
            [
                Evidence(
                    f"loop `for ... in {short_text(head)}` makes no call to {denoiser_note}",
                    loop.path,
                    loop.node.lineno,
                )
            ],
        )
    value, conf, summary = decided
    ev = [
        Evidence(
            f"{summary} (loop over `{short_text(head)}` in {loop.where})",
            loop.path,
            loop.node.lineno,
        )
    ]
    ev += _call_evidence(loop, told)
    ev.extend(loop.inner[:3])
    ev.extend(batched_ev)
    ev.extend(loop.guard_notes[:6])
    return Verdict(value, conf, ev)


def _batched_evidence(first: Site | None, doubled: Def | None) -> list[Evidence]:
    """Where the first denoiser call batches cond + uncond: its doubled input (`doubled`, from
    `find_doubling`) and the split of its prediction into halves."""
    split = output_split(first) if first else None
    batched_ev: list[Evidence] = []
    if doubled is not None:
        shown = short_text(doubling(doubled.value) or doubled.value)
        batched_ev.append(
            Evidence(
                f"denoiser input batched for CFG: `{shown}`",
                doubled.path,
                doubled.line,
            )
        )
    if split is not None and first is not None:
        batched_ev.append(
            Evidence(
                f"prediction split into uncond/cond halves: `{short_text(split)}`",
                first.path,
                split.lineno,
            )
        )
    return batched_ev


def _words(told: bool) -> tuple[str, str]:
    """(the path followed, a guard's value on it) as evidence says them."""
    return (
        ("for the call given", "for the call given")
        if told
        else (
            "on the default path",
            "by default",
        )
    )


def _decide(loop: Loop, doubled: bool, batched: bool, told: bool) -> tuple[bool, float, str] | None:
    """(has_separate_cfg, confidence, summary) from the calls per step; None: no call."""
    n = loop.max_calls
    uncertain = any(g.status == "maybe" for s in loop.sites for g in s.guards)
    if n >= 2 and not doubled:
        conf = 0.7 if uncertain else 0.9
        if loop.inner:
            conf = min(conf, 0.75)
        summary = (
            f"{'2+' if n > 2 else 2} denoiser calls per denoising step (e.g. cond and uncond as "
            "separate calls) -> has_separate_cfg=True"
        )
        return True, conf, summary
    if n >= 2:
        summary = (
            "batched CFG: cond and uncond share one denoiser call; "
            f"{n if n < CAP else 'several'} calls per step in total (extra guidance passes) "
            "-> has_separate_cfg=False"
        )
        return False, 0.6, summary
    if n == 1:
        conf = 0.9 if batched else (0.8 if loop.skipped else 0.85)
        if batched:
            summary = "one denoiser call per step with batched CFG -> has_separate_cfg=False"
        elif loop.skipped:
            path_words, by = _words(told)
            summary = (
                f"one denoiser call per step {path_words} (the other call's guard is "
                f"False {by}) -> has_separate_cfg=False"
            )
        else:
            summary = "one denoiser call per step, no CFG branch -> has_separate_cfg=False"
        return False, conf, summary
    return None


def _call_evidence(loop: Loop, told: bool) -> list[Evidence]:
    """The denoiser calls of a step with their guards, and those the path followed skips."""
    path_words, by = _words(told)
    ev: list[Evidence] = []
    for i, site in enumerate(loop.sites[:4], 1):
        ev.append(
            Evidence(
                f"denoiser call #{i}: {_site_text(site)}{_guard_text(site, by)}",
                site.path,
                site.call.lineno,
            )
        )
    for site in loop.skipped[:3]:
        ev.append(
            Evidence(
                f"denoiser call {_site_text(site)} skipped {path_words}: "
                f"`{site.skipped_by.text() if site.skipped_by else '?'}` is False",
                site.path,
                site.call.lineno,
            )
        )
    return ev
