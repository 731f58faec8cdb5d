"""Attention outside the split region runs locally.

cache-dit hands its parallel config to every attention processor of the transformer. When the
plan splits at the first block of a list and gathers after its last block, the blocks of other
lists (refiners before the split, single-stream or decoder loops after the gather) see the whole
sequence on every rank: with the config their attention would all-to-all whole sequences (twice
the keys). The generated `enable()` clears the config of the processors outside the split lists,
unless a processor is shared with a block inside them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .layout import INDENT, docstring, quote
from .plan_model import ContextParallelPlan

LOCAL_FUNCTION = "_local_attention_outside"
_LIST_KEY = re.compile(r"^(?P<list>[A-Za-z_]\w*)\.(?:\d+|\*|<last>|<first>)$")


def split_region_lists(plan: Mapping[str, Any]) -> tuple[str, ...]:
    """The block lists the sequence is split over, when the split and the gathers are all at
    blocks of lists (`<list>.0`, `<list>.*`, `<list>.<last>`); empty when the split region is
    the whole model or not bounded by lists (a root split, a gather at an output head, a split
    module output)."""
    lists: list[str] = []
    gathers = 0
    for key, entry in plan.items():
        match = _LIST_KEY.match(key)
        if match is None:
            return ()
        if isinstance(entry, Mapping) and "gather_dim" in entry:
            gathers += 1
        lists.append(match.group("list"))
    return tuple(dict.fromkeys(lists)) if gathers else ()


def attention_region(cp: ContextParallelPlan) -> tuple[str, ...]:
    """The block lists whose attention runs across ranks: those attending over a split input
    axis (`axisSplit`), else the lists bounding the split region."""
    if cp.axis_split is not None:
        return cp.axis_split.routed
    return split_region_lists(cp.plan)


REGION_HELPER = r'''
def _in_region(name: str, region: tuple[str, ...]) -> bool:
    """Whether module `name` is inside an entry of `region`: a block list (`blocks`) or a
    module of every block (`blocks.*.attn`)."""
    import re

    for entry in region:
        parts = entry.split(".")
        pattern = r"\.".join("[^.]+" if p == "*" else re.escape(p) for p in parts)
        if re.fullmatch(pattern + r"(\..*)?", name):
            return True
    return False
'''


def in_region(variable: str, lists: tuple[str, ...] | list[str], negate: bool = False) -> str:
    """The generated condition "module `name` is inside the region `variable` names": its first
    name part is a listed block list, or (entries naming modules inside the blocks,
    `<list>.*.<attr>`) it matches an entry through `_in_region` (`REGION_HELPER`)."""
    if any("." in entry for entry in lists):
        return f"{'not ' if negate else ''}_in_region(name, {variable})"
    return f"name.split('.')[0] {'not in' if negate else 'in'} {variable}"


def local_attention_code(lists: tuple[str, ...], width: int) -> str:
    b = INDENT
    names = ", ".join(quote(n) for n in lists)
    doc = (
        "Clear cache-dit's parallel config on the attention processors outside the split "
        "lists: their blocks run on the whole sequence on every rank, so their attention must "
        "stay local. A processor shared with a block inside the lists keeps it."
    )
    lines = [
        f"_SPLIT_LISTS = ({names},)",
        "",
        "",
        f"def {LOCAL_FUNCTION}(transformer: torch.nn.Module) -> None:",
        *docstring(doc, indent=b, width=width),
        f"{b}inside: set[int] = set()",
        f"{b}outside: list[Any] = []",
        f"{b}for name, module in transformer.named_modules():",
        f"{2 * b}processor = getattr(module, 'processor', None)",
        f"{2 * b}if processor is None or not hasattr(processor, '_parallel_config'):",
        f"{3 * b}continue",
        f"{2 * b}if {in_region('_SPLIT_LISTS', lists)}:",
        f"{3 * b}inside.add(id(processor))",
        f"{2 * b}else:",
        f"{3 * b}outside.append(processor)",
        f"{b}for processor in outside:",
        f"{2 * b}if id(processor) not in inside:",
        f"{3 * b}processor._parallel_config = None",
        f"{3 * b}if hasattr(processor, '_cp_config'):",
        f"{4 * b}processor._cp_config = None",
    ]
    return "\n".join(lines) + "\n"
