"""The context-parallel hook plan as literal cache-dit objects (generated code).

The plan JSON (the analysis' `contextParallel.plan`) maps module keys to split/gather entries.
Static keys become one dict literal; keys with `<last>` resolve to `len(<list>) - 1` in the
generated code and `<each>` keys become a loop, both added through a `_merge` helper that unites
input dicts and pairs a split with a gather on one module (`[inputs, output]`), as cache-dit
expects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .layout import INDENT, call, module_expr, quote

LAST = "<last>"
EACH = "<each>"
_DOC_KEYS = frozenset({"reason", "line"})

MERGE_HELPER = '''\
def _merge(plan: dict[str, Any], key: str, entry: Any) -> None:
    """Add `entry` at `key`: input dicts are united, a split and a gather paired."""
    current = plan.get(key)
    if current is None:
        plan[key] = entry
        return
    parts = list(current) if isinstance(current, list) else [current]
    inputs = next((p for p in parts if isinstance(p, dict)), None)
    gathers = [p for p in parts if not isinstance(p, dict)]
    if isinstance(entry, dict):
        inputs = {**(inputs or {}), **entry}
    elif gathers:
        raise ValueError(f"two gathers on module {key!r}")
    else:
        gathers = [entry]
    if inputs and gathers:
        plan[key] = [inputs, *gathers]
    else:
        plan[key] = inputs or gathers[0]
'''


@dataclass(frozen=True)
class CpNames:
    """How the generated code spells cache-dit's plan classes."""

    split: str = "_ContextParallelInput"
    gather: str = "_ContextParallelOutput"


def cp_plan_body(
    plan: Mapping[str, Any],
    *,
    transformer: str = "transformer",
    names: CpNames = CpNames(),
    width: int = 79,
    indent: str = INDENT,
) -> tuple[list[str], bool]:
    """Statements building `plan` into a local `plan` and returning it; whether `_merge` is used."""
    static = {
        k: v for k, v in plan.items() if LAST not in k.split(".") and EACH not in k.split(".")
    }
    dynamic = [(k, v) for k, v in plan.items() if k not in static]
    lines: list[str] = []
    if static:
        lines.append(f"{indent}plan: dict[str, Any] = {{")
        for key, entry in static.items():
            lines.extend(_entry_lines(quote(key), entry, names, indent + INDENT, width))
        lines.append(f"{indent}}}")
    else:
        lines.append(f"{indent}plan: dict[str, Any] = {{}}")
    for key, entry in dynamic:
        lines.extend(_dynamic_lines(key, entry, transformer, names, indent, width))
    lines.append(f"{indent}return plan")
    return lines, bool(dynamic)


def _dynamic_lines(
    key: str, entry: Any, transformer: str, names: CpNames, indent: str, width: int
) -> list[str]:
    parts = key.split(".")
    marker = LAST if LAST in parts else EACH
    at = parts.index(marker)
    list_expr = module_expr(transformer, ".".join(parts[:at]))
    head = ".".join(parts[:at])
    tail = ".".join(parts[at + 1 :])
    tail = f".{tail}" if tail else ""
    if marker == LAST:
        target = f'f"{head}.{{len({list_expr}) - 1}}{tail}"'
        return _merge_call(target, entry, names, indent, width)
    lines = [f"{indent}for index in range(len({list_expr})):"]
    lines.extend(_merge_call(f'f"{head}.{{index}}{tail}"', entry, names, indent + INDENT, width))
    return lines


def _merge_call(target: str, entry: Any, names: CpNames, indent: str, width: int) -> list[str]:
    value = _value_lines(entry, names, indent + INDENT, width)
    one = f"{indent}_merge(plan, {target}, {value[0].strip()})"
    if len(value) == 1 and len(one) <= width:
        return [one]
    return [
        f"{indent}_merge(",
        f"{indent}{INDENT}plan,",
        f"{indent}{INDENT}{target},",
        *value[:-1],
        value[-1] + ",",
        f"{indent})",
    ]


def _entry_lines(key: str, entry: Any, names: CpNames, indent: str, width: int) -> list[str]:
    value = _value_lines(entry, names, indent, width, prefix=f"{key}: ")
    value[-1] += ","
    return value


def _value_lines(
    entry: Any, names: CpNames, indent: str, width: int, prefix: str = ""
) -> list[str]:
    """Lines for one plan value (input dict, gather, or tuple of gathers)."""
    if not isinstance(entry, Mapping):
        raise ValueError(f"CP plan entry is not an object: {entry!r}")
    if "gather_dim" in entry:
        args = _gather_args(entry)
        count = entry.get("outputs", 1) or 1
        if count == 1:
            return call(names.gather, args, indent=indent, width=width, prefix=prefix)
        skip = set(entry.get("skip", ()))
        lines = [f"{indent}{prefix}("]
        for index in range(count):
            if index in skip:  # not a token stream (a modulation handed back): left as it is
                lines.append(f"{indent}{INDENT}None,")
                continue
            lines.extend(call(names.gather, args, indent=indent + INDENT, width=width, suffix=","))
        lines.append(f"{indent})")
        return lines
    lines = [f"{indent}{prefix}{{"]
    for name, split in entry.items():
        if name in _DOC_KEYS:
            continue
        key = str(int(name)) if str(name).isdigit() else quote(str(name))
        if isinstance(split, list):
            lines.append(f"{indent}{INDENT}{key}: [")
            for item in split:
                lines.extend(
                    call(
                        names.split,
                        _split_args(item),
                        indent=indent + 2 * INDENT,
                        width=width,
                        suffix=",",
                    )
                )
            lines.append(f"{indent}{INDENT}],")
        else:
            lines.extend(
                call(
                    names.split,
                    _split_args(split),
                    indent=indent + INDENT,
                    width=width,
                    prefix=f"{key}: ",
                    suffix=",",
                )
            )
    lines.append(f"{indent}}}")
    return lines


def _split_args(item: Mapping[str, Any]) -> list[str]:
    args = [f"split_dim={int(item['split_dim'])}"]
    if item.get("expected_dims") is not None:
        args.append(f"expected_dims={int(item['expected_dims'])}")
    if item.get("split_output"):
        args.append("split_output=True")
    return args


def _gather_args(entry: Mapping[str, Any]) -> list[str]:
    args = [f"gather_dim={int(entry['gather_dim'])}"]
    if entry.get("expected_dims") is not None:
        args.append(f"expected_dims={int(entry['expected_dims'])}")
    return args
