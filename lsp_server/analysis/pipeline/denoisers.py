"""Which pipeline components are the denoiser (structurally; no tables of model names).

In order: the hinted attribute and its numbered family (`transformer`, `transformer_2`); components
named like a denoiser (`transformer*`, `unet*`, `prior*`, `model`, `denoiser*`, ...) that the class
reads; the `self.x(...)` calls whose result flows into `scheduler.step(...)`; else any called
component that is not obviously something else (encoders, vae, scheduler, ...).
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from ..astutil import names_in, self_attr, walk

if TYPE_CHECKING:
    from .pipeline_class import ClassCtx

# regex sources: compiled (and cached by `re`) on first use, not at import
_DENOISER_NAME = r"(transformer|unet|prior|denoiser|model|dit|mmdit|backbone)(_?\w*)?"
_NOT_DENOISER = (
    r"encoder|vae|tokeni|controlnet|control_net|processor|scheduler|guider|embed|adapter|proj"
    r"|feature|safety|vocoder|upsampl|connector|watermark|captioner|extractor"
)
FORWARD = ("forward", "__call__")  # `x.forward(...)` / `x.__call__(...)` call `x`


def find_denoisers(ctx: ClassCtx, hint: str | None) -> tuple[set[str], str]:
    """Denoiser attribute names of the class, and how they were found (for evidence)."""
    used = ctx.read_attrs
    if hint:
        family = {
            a
            for a in used | ctx.components
            if a == hint or re.fullmatch(re.escape(hint) + r"_?\d+", a)
        }
        if family & used:
            return family, f"hinted denoiser `{hint}`"
    pool = ctx.components or ctx.called_attrs
    named = {
        a
        for a in pool
        if re.fullmatch(_DENOISER_NAME, a) and not re.search(_NOT_DENOISER, a) and a in used
    }
    if named:
        return named, "denoiser component(s) " + ", ".join(f"`{a}`" for a in sorted(named))
    flow = _flow_denoisers(ctx) - set(ctx.methods)
    if flow:
        return flow, "component(s) whose output feeds `scheduler.step`: " + ", ".join(
            f"`{a}`" for a in sorted(flow)
        )
    rest = {a for a in ctx.called_attrs if not re.search(_NOT_DENOISER, a)}
    rest &= ctx.components or rest
    return rest, "called component(s) " + ", ".join(f"`{a}`" for a in sorted(rest))


def _flow_sources(value: ast.AST) -> tuple[set[str], set[str]]:
    """Names a value is computed from, and the `self.x(...)` calls producing it directly.

    Arguments of those calls are not followed: a controlnet output fed to the transformer does not
    make the controlnet the producer of the prediction.
    """
    names: set[str] = set()
    calls: set[str] = set()
    top = value
    while isinstance(top, ast.IfExp):
        top = top.body
    if (attr := self_attr(top)) is not None:  # `model = self.transformer`: an alias
        calls.add(attr)
    stack: list[ast.AST] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            f = node.func
            attr = self_attr(f)
            if attr is None and isinstance(f, ast.Attribute) and f.attr in FORWARD:
                attr = self_attr(f.value)
            if attr is not None:
                calls.add(attr)
                continue
        if isinstance(node, ast.Name):
            names.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return names, calls


def _flow_denoisers(ctx: ClassCtx) -> set[str]:
    """`self.x(...)` calls in a loop whose result reaches the first argument of `*.step(...)`."""
    out: set[str] = set()
    for _, c in ctx.mro:
        for loop in walk(c):
            if not isinstance(loop, (ast.For, ast.While)):
                continue
            assigns: list[tuple[set[str], set[str], set[str]]] = []
            needed: set[str] = set()
            for node in walk(loop):
                if isinstance(node, ast.Assign):
                    targets: set[str] = set()
                    for t in node.targets:
                        targets |= names_in(t)
                    assigns.append((targets, *_flow_sources(node.value)))
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "step"
                    and node.args
                ):
                    needed |= names_in(node.args[0])
            if not needed:
                continue
            changed = True
            while changed:
                changed = False
                for targets, names, calls in assigns:
                    if targets & needed:
                        out |= calls
                        if names - needed:
                            needed |= names
                            changed = True
    return {a for a in out if not re.search(_NOT_DENOISER, a)}
