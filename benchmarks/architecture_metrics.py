"""Size and shape of the shipped Python packages: the numbers `docs/architecture.md` records.

    python benchmarks/architecture_metrics.py [--top N]

Prints, for `lsp_server/` and `cdit_runtime/`: the N largest functions (lines from `def` to its
last line, nested functions counted on their own too), every module over 500 lines, and the import
cycles (the same graph `tests/test_import_cycles.py` checks: deferred imports count, `if
TYPE_CHECKING:` blocks do not). Targets (issue 14): no function over 80 lines, no module over
500, no cycle.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("lsp_server", "cdit_runtime")
FUNCTION_TARGET = 80
MODULE_TARGET = 500


def _sizes() -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    functions: list[tuple[int, str]] = []
    modules: list[tuple[int, str]] = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            where = path.relative_to(REPO).as_posix()
            modules.append((text.count("\n"), where))
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    size = (node.end_lineno or node.lineno) - node.lineno + 1
                    functions.append((size, f"{where}:{node.name}"))
    return sorted(functions, reverse=True), sorted(modules, reverse=True)


def _cycles() -> list[list[str]]:
    sys.path.insert(0, str(REPO))
    from tests.test_import_cycles import _cycles as find
    from tests.test_import_cycles import _imports, _modules

    modules = _modules()
    known = set(modules)
    graph = {
        name: _imports(ast.parse(file.read_text(encoding="utf-8")), name, is_package, known)
        for name, (file, is_package) in modules.items()
    }
    return find(graph)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    functions, modules = _sizes()
    over = [f for f in functions if f[0] > FUNCTION_TARGET]
    print(f"functions over {FUNCTION_TARGET} lines: {len(over)} (of {len(functions)})")
    for size, name in functions[: args.top]:
        print(f"  {size:4d}  {name}")
    big = [m for m in modules if m[0] > MODULE_TARGET]
    print(f"modules over {MODULE_TARGET} lines: {len(big)} (of {len(modules)})")
    for size, name in big:
        print(f"  {size:4d}  {name}")
    cycles = _cycles()
    print(f"import cycles: {len(cycles)}")
    for cycle in cycles:
        print("  " + " -> ".join(cycle))
    return 0


if __name__ == "__main__":
    sys.exit(main())
