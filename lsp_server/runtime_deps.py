"""Whether the verification runtime's packages (the `[runtime]` extra) are installed.

The base install (`pip install cdit-integrator`) holds what the language server and the
`analyze` / `generate` / `serve` commands need: libcst, pygls, lsprotocol. Verification runs
(`cdit-integrate verify`, the extension's one-click runs, the gate check's load test) import
torch, diffusers, transformers and cache-dit; they come with `pip install
'cdit-integrator[runtime]'`. This module only *finds* those packages (`importlib.util.find_spec`
of a top-level name runs none of its code), so asking is cheap and imports nothing heavy.
Standard library only.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from collections.abc import Callable, Iterable
from typing import Any

RUNTIME_EXTRA = "runtime"
RUNTIME_REQUIREMENT = f"cdit-integrator[{RUNTIME_EXTRA}]"
INSTALL_HINT = f"pip install '{RUNTIME_REQUIREMENT}'"

# import name -> distribution name: what `[runtime]` in pyproject.toml installs
RUNTIME_MODULES: dict[str, str] = {
    "torch": "torch",
    "diffusers": "diffusers",
    "transformers": "transformers",
    "cache_dit": "cache-dit",
    "einops": "einops",
    "skimage": "scikit-image",
}

# `python -c CHECK_SCRIPT` in another interpreter: one JSON line {"missing": [import names]}
CHECK_SCRIPT = (
    "import importlib.util, json\n"
    "def found(name):\n"
    "    try:\n"
    "        return importlib.util.find_spec(name) is not None\n"
    "    except (ImportError, ValueError):\n"
    "        return False\n"
    f"print(json.dumps({{'missing': [n for n in {list(RUNTIME_MODULES)!r} if not found(n)]}}))\n"
)


def _found(name: str, find_spec: Callable[[str], Any]) -> bool:
    try:
        return find_spec(name) is not None
    except (ImportError, ValueError):  # a broken parent package, a module without a spec
        return False


def missing_runtime_modules(
    find_spec: Callable[[str], Any] = importlib.util.find_spec,
) -> list[str]:
    """The runtime packages (import names) this interpreter cannot find, in `RUNTIME_MODULES`
    order; empty when the `[runtime]` extra is installed."""
    importlib.invalidate_caches()  # a package installed since the last look
    return [name for name in RUNTIME_MODULES if not _found(name, find_spec)]


def parse_check_output(stdout: str) -> list[str] | None:
    """The missing names `CHECK_SCRIPT` printed, or None when it printed no such line."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        missing = data.get("missing") if isinstance(data, dict) else None
        if isinstance(missing, list) and all(isinstance(m, str) for m in missing):
            return [m for m in missing if m in RUNTIME_MODULES]
    return None


def missing_message(missing: Iterable[str], what: str = "a verification run") -> str:
    """One line: what is missing and the command that installs it."""
    names = ", ".join(RUNTIME_MODULES.get(m, m) for m in missing)
    return (
        f"{what} needs the [{RUNTIME_EXTRA}] extra ({names} not installed): {INSTALL_HINT} "
        f"(in a source checkout: pip install -e '.[{RUNTIME_EXTRA}]')"
    )
