"""Infer `BlockAdapter.has_separate_cfg` from a pipeline's source (statically; never imported/run).

`has_separate_cfg` must be True exactly when the pipeline's default path calls the transformer
twice per denoising step (conditional and unconditional as separate calls), and False when it calls
it once (no CFG, guidance-distilled, or batched CFG: latents doubled, one call, prediction chunked).

How it decides, structurally (no tables of model or class names):

1. Pipeline classes are the classes defining `__call__` (directly or via a base class in the same
   file). Their denoiser is found from `__init__` / `register_modules` component names
   (`transformer*`, `unet*`, `prior*`, `model`, `denoiser*`, ...), else from the call whose result
   flows into `scheduler.step(...)`.
2. `__call__` is interpreted abstractly, statement by statement, with three-valued values:
   parameter defaults are known, except that an optional input defaulting to None is "unset"
   (`x is None` on it is unknown: users often pass it); `self._x = ...` assignments and
   single-`return` properties are evaluated; anything else is unknown. Helper methods and module
   functions of the same file are followed with their arguments bound, so aliases such as
   `current_model = self.transformer if ... else self.transformer_2` and helper loops are seen.
3. In the denoising loop (over timesteps / sigmas / a progress bar) denoiser calls are counted per
   iteration: a branch whose guard is False on the default path is skipped, a branch whose guard is
   unknown may run, if/else alternatives are alternatives, and a call inside an inner loop (guider
   batches) counts as several calls.
4. Two or more calls per step -> True, unless the first call already batches cond + uncond (its
   input doubled by `torch.cat([x] * 2)` / `x.repeat(2, ...)`); one call -> False; no denoising
   loop -> None.
5. A composite pipeline whose `__call__` has no denoising loop but runs sub-pipelines
   (`self.x = SomePipeline(...)`) takes its answer from them.

Where each step lives: `pipeline_class` and `denoisers` (1), `values` and `guards` (2), `calls`
and `denoise_loop` (3), `batched_cfg` and `decision` (4), `composite` (5).
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Mapping

from ..model import AnalysisError, Evidence, SeparateCfg
from ..sources import SourceFile, read_source
from .calls import Loop
from .composite import delegate
from .decision import Verdict, decide_loop
from .denoise_loop import LoopWalker
from .denoisers import find_denoisers
from .pipeline_class import ClassCtx, Loader, own_or_local_methods
from .values import fmt

__all__ = ["infer_separate_cfg"]


def analyze_class(loader: Loader, ctx: ClassCtx, hint: str | None, depth: int) -> Verdict:
    """The verdict for one pipeline class: from its denoising loop(s), else its sub-pipelines."""
    denoisers, note = find_denoisers(ctx, hint)
    where = Evidence(
        f"{ctx.name}: {note or 'no denoiser component found'}", str(ctx.mod.path), ctx.cls.lineno
    )
    loops: list[Loop] = []
    if denoisers:
        for relaxed in (False, True):
            walker = LoopWalker(ctx, denoisers, relaxed)
            walker.run_call()
            loops = [lp for lp in walker.loops if lp.max_calls > 0 or lp.sites]
            if loops:
                break
    if loops:
        verdicts = [decide_loop(lp, note, ctx.call_args is not None) for lp in loops]
        chosen = next((v for v in verdicts if v.value is True), None) or next(
            (v for v in verdicts if v.value is not None), verdicts[0]
        )
        chosen.evidence.append(where)
        return chosen
    sub = delegate(loader, ctx, hint, depth, analyze_class)
    if sub is not None:
        return sub
    call = ctx.methods["__call__"]
    reason = (
        f"{ctx.name}.__call__ has no denoising loop calling {note}"
        if denoisers
        else f"{ctx.name}: no denoiser component (transformer/unet/prior/...) is called"
    )
    return Verdict(None, 0.0, [Evidence(reason, str(call.mod.path), call.fn.lineno)])


def infer_separate_cfg(
    path: pathlib.Path,
    source: str | None = None,
    transformer_attr_hint: str | None = None,
    call_args: Mapping[str, object] | None = None,
) -> SeparateCfg:
    """Decide `has_separate_cfg` for the pipeline class(es) in `path` (or in `source`, if given).

    `transformer_attr_hint` names the pipeline attribute holding the transformer being integrated
    (e.g. "transformer"); without it the denoiser is found by component names and data flow.
    `call_args`: how the pipeline is called (name -> constant, or `GIVEN` for an input passed
    whose value is not a constant); every other input then keeps its default. Without them the
    decision is for the default path, an optional input defaulting to None possibly passed.
    Returns value None (with evidence saying why) when no denoising loop is recognized, or when the
    file cannot be read or parsed; never raises for bad input.
    """
    spath = str(path)
    try:
        sf = _read(pathlib.Path(path), source)
    except AnalysisError as exc:
        return SeparateCfg(None, (_unreadable(exc, spath),), 0.0)
    loader = Loader()
    mod = loader.add(sf)
    verdicts: list[tuple[str, Verdict]] = []
    for cross_file in (False, True):
        for cls in mod.classes.values():
            if cross_file and "__call__" in own_or_local_methods(mod, cls):
                continue  # found without reading other files: analyzed in the first pass
            ctx = ClassCtx(loader, mod, cls, cross_file=cross_file, call_args=call_args)
            if ctx.has_call():
                verdicts.append((cls.name, analyze_class(loader, ctx, transformer_attr_hint, 0)))
        if any(v.value is not None for _, v in verdicts):
            break
    if not verdicts:
        return SeparateCfg(
            None,
            (Evidence("no pipeline class (a class defining `__call__`) in this file", spath, 1),),
            0.0,
        )
    known = sorted((v for v in verdicts if v[1].value is not None), key=lambda v: len(v[0]))
    name, best = known[0] if known else verdicts[0]
    evidence = list(best.evidence)
    others = [(n, v.value) for n, v in known[1:] if v.value is not best.value]
    if others:
        evidence.append(
            Evidence(
                f"chose {name}; other pipeline classes in this file differ: "
                + ", ".join(f"{n}={val}" for n, val in others),
                spath,
                mod.classes[name].lineno,
            )
        )
    if call_args is not None:
        evidence.insert(0, _told(call_args, spath, mod.classes[name].lineno))
    return SeparateCfg(
        best.value,
        tuple(evidence),
        best.confidence if best.value is not None else 0.0,
        tuple(sorted(call_args)) if call_args is not None else None,
    )


def _told(call_args: Mapping[str, object], spath: str, line: int) -> Evidence:
    shown = ", ".join(f"{k}={fmt(v)}" for k, v in sorted(call_args.items())) or "none"
    return Evidence(
        f"decided for the call arguments given ({shown}); inputs not given keep their defaults",
        spath,
        line,
    )


def _read(path: pathlib.Path, text: str | None) -> SourceFile:
    """The parsed pipeline file, reusing the analysis's parse when `text` is what is on disk.

    The analyzer passes the text of a pipeline file it has already read with `read_source`: the
    cached parse is used then instead of parsing the same text again.
    """
    if text is None:
        return read_source(path)
    try:
        on_disk = read_source(path)
    except AnalysisError:
        on_disk = None  # an unsaved buffer: the text alone is analyzed
    if on_disk is not None and on_disk.text == text:
        return on_disk
    return read_source(path, text)


def _unreadable(exc: AnalysisError, spath: str) -> Evidence:
    """Evidence for a pipeline file that cannot be analyzed, at the syntax error's line if any."""
    if exc.code in ("syntax-error", "unparsable"):
        m = re.match(re.escape(spath) + r":(\d+):", exc.message)
        line = int(m.group(1)) if m else 1
        return Evidence(f"cannot parse pipeline file: {exc.message}", spath, max(line, 1))
    return Evidence(f"cannot read pipeline file: {exc.message}", spath, 1)
