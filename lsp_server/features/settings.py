"""Typed `cdit.*` settings: read from `initializationOptions` and `workspace/configuration`.

Every field has a default. A value of the wrong type or out of range falls back to its default and
produces one line in `problems`, which the server shows to the user once.

Workspace trust is the conjunction of what the client says at start (`initializationOptions`
`{"workspaceTrusted": false}`) and the `cdit.workspaceTrusted` setting: either can turn trust off,
neither can turn it back on (a workspace's own settings file must not be able to trust itself).
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Literal

# The plan's target kinds (`codegen.plan_model.TARGET_KINDS`), by the same names.
Target = Literal["standalone", "cache-dit-checkout"]
TARGETS: tuple[Target, ...] = ("standalone", "cache-dit-checkout")
# Earlier spellings still read from users' settings (never written): "checkout".
TARGET_ALIASES: dict[str, Target] = {"checkout": "cache-dit-checkout"}


@dataclass(frozen=True)
class Thresholds:
    """Overrides of the runtime's acceptance thresholds; None keeps the runtime's default.

    The defaults live once, in `cdit_runtime.contract.Thresholds` (cache PSNR > 30 dB, warning
    from 25 dB; parallel PSNR > 35 dB, near-exact in float32; the no-cache control's own bar;
    SSIM > 0.90). The fields are the contract's user-settable ones, by the same names
    (`tests/test_lsp_settings.py` checks them against the contract and `package.json`).
    """

    cache_psnr_db: float | None = None
    cache_warn_psnr_db: float | None = None
    parallel_psnr_db: float | None = None
    parallel_psnr_db_float32: float | None = None
    control_psnr_db: float | None = None
    control_psnr_db_float32: float | None = None
    ssim_min: float | None = None

    def to_json(self) -> dict[str, float]:
        """The overrides as contract JSON keys (only the ones that are set)."""
        out = {key: getattr(self, name) for key, name in _THRESHOLD_KEYS.items()}
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class Settings:
    """What the server reads from the client. Keys are camelCase under `cdit.` in the client."""

    # Interpreter that runs verification (needs torch, diffusers, cache-dit); "" = the server's.
    # A relative path ("./.venv/bin/python") is relative to the workspace root.
    interpreter: str = ""
    # Parallel degrees the CP / TP pre-flight checks consider.
    cp_sizes: tuple[int, ...] = (2, 4, 8)
    tp_sizes: tuple[int, ...] = (2, 4, 8)
    thresholds: Thresholds = field(default_factory=Thresholds)
    # Where generated code goes: a standalone module in the project, or a cache-dit checkout.
    target: Target = "standalone"
    # The cache-dit git checkout (target "cache-dit-checkout").
    cache_dit_path: str = ""
    # Quiet time after the last keystroke before a file is analyzed again.
    debounce_ms: int = 250
    # Files larger than this are not analyzed (kilobytes of text).
    max_file_kb: int = 2048
    # False when the client says the workspace is untrusted: no run, no write.
    workspace_trusted: bool = True
    # Severity per diagnostic code, as linters let you choose ("error" | "warning" | "info" |
    # "hint" | "off"), over the built-in defaults (`diagnostics.DEFAULT_SEVERITY`).
    diagnostic_severity: tuple[tuple[str, str], ...] = ()

    def run_interpreter(self) -> str:
        return os.path.expanduser(self.interpreter) if self.interpreter else sys.executable


_KEYS = {
    "interpreter": "interpreter",
    "cpSizes": "cp_sizes",
    "tpSizes": "tp_sizes",
    "thresholds": "thresholds",
    "target": "target",
    "cacheDitPath": "cache_dit_path",
    "debounceMs": "debounce_ms",
    "maxFileKb": "max_file_kb",
    "workspaceTrusted": "workspace_trusted",
    "diagnosticSeverity": "diagnostic_severity",
}
_THRESHOLD_KEYS = {
    "cachePsnrDb": "cache_psnr_db",
    "cacheWarnPsnrDb": "cache_warn_psnr_db",
    "parallelPsnrDb": "parallel_psnr_db",
    "parallelPsnrDbFloat32": "parallel_psnr_db_float32",
    "controlPsnrDb": "control_psnr_db",
    "controlPsnrDbFloat32": "control_psnr_db_float32",
    "ssimMin": "ssim_min",
}


@dataclass(frozen=True)
class ParsedSettings:
    settings: Settings
    problems: tuple[str, ...] = ()


def parse_settings(raw: Any, base: Settings | None = None) -> ParsedSettings:
    """`raw` (the `cdit` section as the client sends it) over `base`; bad values fall back.

    Keys may also arrive flattened with the prefix (`{"cdit.cpSizes": [2]}`), as some clients
    send them. Unknown keys are ignored; `null` keeps the current value.
    """
    base = base or Settings()
    if raw is None:
        return ParsedSettings(base)
    if not isinstance(raw, dict):
        return ParsedSettings(base, (f"cdit settings must be an object, got {_kind(raw)}",))
    raw = {k.removeprefix("cdit."): v for k, v in raw.items() if isinstance(k, str)}
    problems: list[str] = []
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = _KEYS.get(key)
        if name is None or value is None:
            continue
        parsed, problem = _PARSERS[name](value, base)
        if problem:
            problems.append(f"cdit.{key}: {problem}")
        if parsed is not None:
            values[name] = parsed
    return ParsedSettings(replace(base, **values), tuple(problems))


# Each parser returns (value or None to keep the current one, problem or None).
_Parsed = tuple[Any, str | None]


def _string(value: Any, base: Settings) -> _Parsed:
    if isinstance(value, str):
        return value, None
    return None, f"expected a string, got {_kind(value)}; kept the previous value"


def _sizes(value: Any, base: Settings) -> _Parsed:
    ok = (
        isinstance(value, list | tuple)
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) and 2 <= v <= 1024 for v in value)
    )
    if ok:
        return tuple(sorted(set(value))), None
    return (
        None,
        f"expected a non-empty list of integers >= 2, got {_show(value)}; kept the previous value",
    )


def _target(value: Any, base: Settings) -> _Parsed:
    if value in TARGETS:
        return value, None
    if isinstance(value, str) and value in TARGET_ALIASES:
        return TARGET_ALIASES[value], None
    return None, f"expected one of {', '.join(TARGETS)}, got {_show(value)}; kept {base.target}"


def _int_range(low: int, high: int) -> Any:
    def parse(value: Any, base: Settings) -> _Parsed:
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return value, None
        return (
            None,
            f"expected an integer from {low} to {high}, got {_show(value)}; "
            "kept the previous value",
        )

    return parse


def _bool(value: Any, base: Settings) -> _Parsed:
    if isinstance(value, bool):
        return value, None
    return None, f"expected true or false, got {_show(value)}; kept the previous value"


def _thresholds(value: Any, base: Settings) -> _Parsed:
    if not isinstance(value, dict):
        return None, f"expected an object, got {_kind(value)}; kept the previous thresholds"
    current = base.thresholds
    reasons = []
    changes: dict[str, float] = {}
    for key, v in value.items():
        name = _THRESHOLD_KEYS.get(key)
        if name is None:
            continue
        upper = 1.0 if name == "ssim_min" else 200.0
        if isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= upper:
            changes[name] = float(v)
        else:
            reasons.append(
                f"{key} must be a number from 0 to {upper:g}; kept {getattr(current, name)}"
            )
    result = replace(current, **changes)
    warn, cache = result.cache_warn_psnr_db, result.cache_psnr_db
    if warn is not None and cache is not None and warn > cache:
        reasons.append("cacheWarnPsnrDb is above cachePsnrDb; kept both previous values")
        result = replace(
            result,
            cache_psnr_db=current.cache_psnr_db,
            cache_warn_psnr_db=current.cache_warn_psnr_db,
        )
    return result, "; ".join(reasons) or None


SEVERITY_LEVELS = ("error", "warning", "info", "hint", "off")
_CODE = re.compile(r"^CDIT\d{3}$")


def _severities(value: Any, base: Settings) -> _Parsed:
    if not isinstance(value, dict):
        return None, f"expected an object of code -> severity, got {_kind(value)}; kept it"
    kept: list[tuple[str, str]] = []
    bad: list[str] = []
    for code, level in value.items():
        if isinstance(code, str) and _CODE.match(code) and level in SEVERITY_LEVELS:
            kept.append((code, level))
        else:
            bad.append(f"{_show(code)}: {_show(level)}")
    problem = (
        f"ignored {', '.join(bad)} (codes CDITnnn, severities {' | '.join(SEVERITY_LEVELS)})"
        if bad
        else None
    )
    return tuple(sorted(kept)), problem


_PARSERS = {
    "interpreter": _string,
    "cp_sizes": _sizes,
    "tp_sizes": _sizes,
    "thresholds": _thresholds,
    "target": _target,
    "cache_dit_path": _string,
    "debounce_ms": _int_range(0, 5000),
    "max_file_kb": _int_range(1, 20_000),
    "workspace_trusted": _bool,
    "diagnostic_severity": _severities,
}


def _kind(value: Any) -> str:
    return type(value).__name__


def _show(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
