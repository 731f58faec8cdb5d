"""Import blocks for generated modules: merged, deduplicated and grouped the isort way."""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from collections.abc import Iterable

_FROM = re.compile(r"^from\s+(\S+)\s+import\s+(.+)$")
_IMPORT = re.compile(r"^import\s+(.+)$")


def import_block(lines: Iterable[str], *, width: int, local: Iterable[str] = ()) -> str:
    """Sorted import statements: `__future__`, stdlib, third party, then `local` packages."""
    plain: set[str] = set()
    froms: dict[str, set[str]] = defaultdict(set)
    for line in lines:
        line = line.strip()
        if match := _FROM.match(line):
            names = match.group(2).strip("()")
            froms[match.group(1)].update(n.strip() for n in names.split(",") if n.strip())
        elif match := _IMPORT.match(line):
            plain.update(n.strip() for n in match.group(1).split(","))
    local_roots = set(local)

    def section(module: str) -> int:
        root = module.split(".")[0]
        if root == "__future__":
            return 0
        if module.startswith(".") or root in local_roots:
            return 3
        return 1 if root in sys.stdlib_module_names else 2

    groups: dict[int, list[str]] = defaultdict(list)
    for name in sorted(plain, key=str.lower):
        groups[section(name.split(" as ")[0])].append(f"import {name}")
    for module in sorted(froms, key=str.lower):
        names = sorted(froms[module], key=_isort_key)
        one = f"from {module} import {', '.join(names)}"
        if len(one) <= width:
            groups[section(module)].append(one)
        else:
            body = "".join(f"    {n},\n" for n in names)
            groups[section(module)].append(f"from {module} import (\n{body})")
    blocks = ["\n".join(groups[key]) for key in sorted(groups) if groups[key]]
    return "\n\n".join(blocks) + "\n"


def _isort_key(name: str) -> tuple[int, str]:
    """isort's force_sort_within_sections=False order: CONSTANTS, Classes, functions."""
    bare = name.split(" as ")[0]
    if bare.isupper() and len(bare) > 1:
        return 0, bare
    if bare[:1].isupper():
        return 1, bare
    return 2, bare.lower()
