"""Which analysis object each line of a document stands for: the lines hovers and lenses use.

Built from the `analyze` report (transformer classes, block-list declarations, the loops that run
them, block classes) and, for attention classes, from a line scan of the document: the report names
attention modules by path (`transformer_blocks.*.attn`), the block class's `__init__` names the
class it builds there (`self.attn = FluxAttention(...)`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal

from .positions import LineIndex, same_file

AnchorKind = Literal[
    "transformer",
    "block_list",
    "other_list",
    "loop",
    "block_class",
    "attention_class",
    "denoising_loop",
]


@dataclass(frozen=True)
class Anchor:
    """One analysis object at a 1-based line. `key`: the list attribute, block class or module."""

    line: int
    kind: AnchorKind
    class_name: str
    key: str


@dataclass
class Anchors:
    by_line: dict[int, list[Anchor]] = field(default_factory=lambda: defaultdict(list))

    def add(self, anchor: Anchor) -> None:
        if anchor.line >= 1 and anchor not in self.by_line[anchor.line]:
            self.by_line[anchor.line].append(anchor)

    def at(self, line: int) -> list[Anchor]:
        return list(self.by_line.get(line, ()))

    def of_kind(self, kind: AnchorKind) -> list[Anchor]:
        return [a for items in self.by_line.values() for a in items if a.kind == kind]


_CLASS_LINE = re.compile(r"class\s+(\w+)")


def build_anchors(report: dict[str, Any], path: str, lines: LineIndex) -> Anchors:
    anchors = Anchors()
    classes = _top_level_classes(lines)
    for t in report.get("transformers", []):
        name = t["className"]
        anchors.add(Anchor(t["line"], "transformer", name, name))
        for b in t.get("blockLists", []):
            evidence = b.get("evidence") or []
            if len(evidence) > 0 and same_file(evidence[0]["path"], path):
                anchors.add(Anchor(evidence[0]["line"], "block_list", name, b["attr"]))
            if len(evidence) > 1 and same_file(evidence[1]["path"], path):
                anchors.add(Anchor(evidence[1]["line"], "loop", name, b["attr"]))
            block_path, block_line = b.get("blockClassPath"), b.get("blockClassLine")
            if block_path and block_line and same_file(block_path, path):
                anchors.add(Anchor(block_line, "block_class", name, b["blockClass"]))
        for o in t.get("otherBlockLists", []):
            anchors.add(Anchor(o["line"], "other_list", name, o["attr"]))
        for attention in (t.get("tensorParallel") or {}).get("attention", []):
            line = _attention_class_line(attention["module"], t, classes, lines)
            if line is not None:
                anchors.add(Anchor(line, "attention_class", name, attention["module"]))
    return anchors


def build_pipeline_anchors(separate_cfg: dict[str, Any], path: str) -> Anchors:
    """A pipeline file: its denoising loop (the first evidence line of `has_separate_cfg`)."""
    anchors = Anchors()
    first = separate_cfg["evidence"][0]
    if same_file(first["path"], path):
        anchors.add(Anchor(first["line"], "denoising_loop", "", "separateCfg"))
    return anchors


def _top_level_classes(lines: LineIndex) -> dict[str, tuple[int, int]]:
    """Class name -> (first, last) 1-based lines of each top-level class of the document."""
    starts: list[tuple[str, int]] = []
    boundaries: list[int] = []
    for i, text in enumerate(lines.lines, start=1):
        if not text or text[0].isspace() or text[0] in "#)]}@":
            continue
        boundaries.append(i)
        match = _CLASS_LINE.match(text)
        if match:
            starts.append((match.group(1), i))
    out: dict[str, tuple[int, int]] = {}
    for name, first in starts:
        last = next((b - 1 for b in boundaries if b > first), len(lines))
        out.setdefault(name, (first, last))
    return out


def _attention_class_line(
    module: str, t: dict[str, Any], classes: dict[str, tuple[int, int]], lines: LineIndex
) -> int | None:
    """The line of the class built at `module` (`<list>.*.<attr>`) by the list's block class."""
    head, _, attr_path = module.partition(".*.")
    if not attr_path:
        return None
    block = next((b for b in t.get("blockLists", []) if b["attr"] == head), None)
    if block is None or block["blockClass"] not in classes:
        return None
    first, last = classes[block["blockClass"]]
    attr = attr_path.split(".")[0]
    assign = re.compile(rf"^\s*self\.{re.escape(attr)}\s*(?::[^=]*)?=\s*([\w.]+)\s*\(")
    for line in range(first, last + 1):
        match = assign.match(lines.line_text(line))
        if match:
            cls = match.group(1).rsplit(".", 1)[-1]
            if cls in classes:
                return classes[cls][0]
    return None
