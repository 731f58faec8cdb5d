"""The plan's `axisSplit` (context parallelism over an input axis that is not the token
sequence): built from the analysis' `factorised` reading, and read back from a plan document."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .plan_model import AxisSplit
from .plan_reader import LIST_PATH, MODULE_KEY_ATOM, Reader


def axis_split_fields(found: Any) -> dict[str, Any]:
    """The analysis' split of an input axis (`factorised`) as the plan's `axisSplit`."""
    if not isinstance(found, Mapping):
        return {}
    return {
        "axisSplit": {
            "param": found.get("param"),
            "axis": found.get("axis"),
            "gatherAxis": found.get("gatherAxis"),
            "routed": list(found.get("routed") or []),
            "local": list(found.get("local") or []),
            "tables": [{"attr": a, "axis": x} for a, x in found.get("tables") or []],
            "guards": [{"op": o, "value": v} for o, v in found.get("guards") or []],
            **(
                {"inputs": [{"param": n, "axis": x} for n, x in found["inputs"]]}
                if found.get("inputs")
                else {}
            ),
        }
    }


_GUARD_OPS = (">", ">=", "<", "<=", "==", "!=")


def _region_ok(entry: object) -> bool:
    """A block list (`blocks`) or a module of every block (`blocks.*.attn_temp`)."""
    return isinstance(entry, str) and all(
        MODULE_KEY_ATOM.match(part) and not part.startswith("<") for part in entry.split(".")
    )


def parse_axis_split(r: Reader, c: Mapping[str, Any], p: str) -> AxisSplit | None:
    """`axisSplit` (`{"param", "axis", "gatherAxis", "routed", "local", "tables": [{"attr",
    "axis"}], "guards": [{"op", "value"}], "inputs": [{"param", "axis"}]}` or absent)."""
    where = f"{p}.axisSplit"
    raw = r.obj(c.get("axisSplit"), where, required=False)
    if not raw:
        return None
    param = r.get(raw, "param", where, str, required=True)
    axis = r.get(raw, "axis", where, int, required=True)
    gather = r.get(raw, "gatherAxis", where, int, required=True)
    lists = [r.get(raw, k, where, list, default=[]) or [] for k in ("routed", "local")]
    tables = [t for t in r.get(raw, "tables", where, list, default=[]) or []]
    guards = [g for g in r.get(raw, "guards", where, list, default=[]) or []]
    inputs = [i for i in r.get(raw, "inputs", where, list, default=[]) or []]
    input_pairs = [(i.get("param"), i.get("axis")) for i in inputs if isinstance(i, dict)]
    table_pairs = [(t.get("attr"), t.get("axis")) for t in tables if isinstance(t, dict)]
    guard_pairs = [(g.get("op"), g.get("value")) for g in guards if isinstance(g, dict)]
    ok = (
        isinstance(param, str)
        and param.isidentifier()
        and isinstance(axis, int)
        and isinstance(gather, int)
        and all(_region_ok(n) for names in lists for n in names)
        and len(table_pairs) == len(tables)
        and all(
            isinstance(a, str) and LIST_PATH.match(a) and type(x) is int and x < 0
            for a, x in table_pairs
        )
        and len(guard_pairs) == len(guards)
        and all(o in _GUARD_OPS and type(v) is int for o, v in guard_pairs)
        and len(input_pairs) == len(inputs)
        and all(
            isinstance(n, str) and n.isidentifier() and type(x) is int and x >= 0
            for n, x in input_pairs
        )
    )
    if not ok:
        r.error(
            where,
            "needs an identifier `param`, integer axes, block lists, tables, guards and inputs",
        )
        return None
    return AxisSplit(
        param=param,  # type: ignore[arg-type]
        axis=axis,  # type: ignore[arg-type]
        gather_axis=gather,  # type: ignore[arg-type]
        routed=tuple(lists[0]),
        local=tuple(lists[1]),
        tables=tuple(table_pairs),  # type: ignore[arg-type]
        guards=tuple(guard_pairs),  # type: ignore[arg-type]
        inputs=tuple(input_pairs),  # type: ignore[arg-type]
    )
