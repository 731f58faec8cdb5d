"""Reading a plan document: typed field access that records `FieldError`s instead of raising.

`Reader.get` checks a field's JSON type, pattern and value set and records one error per problem
(``path``: the JSON path, such as ``cache.blockLists[0].attr``); the patterns of the document's
names are the contract's (`cdit_runtime.contract.plan`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cdit_runtime.contract import plan as plan_contract

from .plan_model import FieldError

IDENTIFIER = re.compile(plan_contract.IDENTIFIER)
SLUG = re.compile(plan_contract.SLUG)
LIST_PATH = re.compile(plan_contract.LIST_PATH)
DOTTED = re.compile(plan_contract.DOTTED)
ENV_VAR = re.compile(plan_contract.ENV_VAR)
EXAMPLE_NAME = re.compile(plan_contract.EXAMPLE_NAME)
MODULE_KEY_ATOM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*|\d+|\*|<last>|<each>)$")


class Reader:
    """Typed field access over nested JSON objects that records errors instead of raising."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def obj(self, data: Any, path: str, *, required: bool = True) -> Mapping[str, Any] | None:
        if data is None and not required:
            return None
        if not isinstance(data, Mapping):
            self.error(path, f"expected an object, got {type_name(data)}")
            return None
        return data

    def get(self, data: Mapping[str, Any], key: str, path: str, kind: type | tuple, **opts: Any):
        where = f"{path}.{key}" if path else key
        if key not in data or data[key] is None:
            if opts.get("required", False):
                self.error(where, "is required")
            return opts.get("default")
        value = data[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            self.error(where, f"expected an integer, got {type_name(value)}")
            return opts.get("default")
        if kind is float and (isinstance(value, bool) or not isinstance(value, int | float)):
            self.error(where, f"expected a number, got {type_name(value)}")
            return opts.get("default")
        if kind not in (int, float) and not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            self.error(where, f"expected {json_kind(names)}, got {type_name(value)}")
            return opts.get("default")
        pattern: re.Pattern[str] | None = opts.get("pattern")
        if pattern is not None and isinstance(value, str) and not pattern.match(value):
            self.error(where, f"{value!r} {opts.get('pattern_message', 'is not valid')}")
        choices = opts.get("choices")
        if choices is not None and value not in choices:
            self.error(where, f"{value!r} is not one of {', '.join(map(str, choices))}")
        return float(value) if kind is float else value


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), "an array" if isinstance(value, list) else "an object"
    )


def json_kind(python_names: str) -> str:
    names = {"str": "a string", "bool": "a boolean", "list": "an array", "dict": "an object"}
    return " or ".join(names.get(n, n) for n in python_names.split("/"))
