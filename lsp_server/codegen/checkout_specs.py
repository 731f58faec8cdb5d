"""The file specs of a cache-dit checkout integration, with the generated code formatted in each
file's own style (line length and formatter of the checkout, indentation of the file).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import libcst as cst

from .checkout_layout import PACKAGE
from .edits import FileSpec
from .regions import Region
from .style import CodeStyle, format_snippet


class CheckoutSpecs:
    """Collects file specs, formatting generated code in each file's own style."""

    def __init__(self, package: Path, style: CodeStyle) -> None:
        self.package = package
        self.style = style
        self.whole_files: dict[str, str] = {}
        self.region_files: dict[str, list[Region]] = {}

    def module_name(self, relative: str) -> str:
        parts = relative[:-3].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        return ".".join([PACKAGE, *parts])

    def whole(self, relative: str, code: str) -> None:
        path = self.package / relative
        formatted = format_snippet(code, self.style, filename=str(path))
        self.whole_files[relative] = formatted

    def regions(self, relative: str, *regions: Region) -> None:
        path = self.package / relative
        indent = self.style.indent
        # a missing or broken file is reported by the edit planner
        with contextlib.suppress(OSError, UnicodeDecodeError, cst.ParserSyntaxError):
            indent = cst.parse_module(path.read_text(encoding="utf-8")).default_indent
        style = self.style.with_indent(indent)
        for region in regions:
            code = region.code
            if region.kind in ("def", "assign", "function_assign"):
                code = format_snippet(code, style, filename=str(path)).strip("\n") + "\n"
            self.region_files.setdefault(relative, []).append(
                Region(
                    id=region.id,
                    kind=region.kind,
                    name=region.name,
                    code=code,
                    container=region.container,
                    anchor=region.anchor,
                    imports=region.imports,
                )
            )

    def done(self) -> list[FileSpec]:
        specs = [
            FileSpec(
                path=self.package / rel,
                content=code,
                module_name=self.module_name(rel),
                must_exist=False,
            )
            for rel, code in self.whole_files.items()
        ]
        specs += [
            FileSpec(
                path=self.package / rel,
                regions=tuple(regions),
                module_name=self.module_name(rel),
            )
            for rel, regions in self.region_files.items()
        ]
        return specs
