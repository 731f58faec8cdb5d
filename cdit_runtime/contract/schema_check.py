"""A small JSON-schema validator for the subset `contract.json_schema()` uses (stdlib only).

Keywords: ``$ref`` (to ``#/$defs/...``), ``type``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``enum``, ``anyOf``, and for the IntegrationPlan's schema
``const``, ``pattern``, ``minimum``, ``propertyNames``, ``not`` and ``if``/``then``/``else``.
Enough to check our own documents in tests and at the runtime's input boundary without a
jsonschema dependency.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TYPES: dict[str, Any] = {
    "object": Mapping,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def validate(instance: Any, schema: Mapping[str, Any], definition: str) -> list[str]:
    """Problems (empty when valid) of ``instance`` against ``schema['$defs'][definition]``."""
    problems: list[str] = []
    _check(instance, {"$ref": f"#/$defs/{definition}"}, schema, definition, problems)
    return problems


def _resolve(node: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"unsupported $ref {ref}")
        node = root["$defs"][ref.removeprefix("#/$defs/")]
    return node


def _type_ok(instance: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(instance, int) and not isinstance(instance, bool)
    if name == "number":
        return isinstance(instance, (int, float)) and not isinstance(instance, bool)
    return isinstance(instance, _TYPES[name])


def _check(
    instance: Any, node: Mapping[str, Any], root: Mapping[str, Any], where: str, out: list[str]
) -> None:
    node = _resolve(node, root)
    if "anyOf" in node:
        for option in node["anyOf"]:
            trial: list[str] = []
            _check(instance, option, root, where, trial)
            if not trial:
                _check_value(instance, node, where, out)  # keywords beside the forms
                return
        out.append(f"{where}: {_short(instance)} matches none of the allowed forms")
        return
    if "enum" in node and instance not in node["enum"]:
        out.append(f"{where}: {_short(instance)} is not one of {node['enum']}")
        return
    if "const" in node and instance != node["const"]:
        out.append(f"{where}: {_short(instance)} is not {node['const']!r}")
        return
    kind = node.get("type")
    if kind is not None and not _type_ok(instance, kind):
        out.append(f"{where}: expected {kind}, got {_short(instance)}")
        return
    _check_value(instance, node, where, out)
    _check_conditions(instance, node, root, where, out)
    if kind == "object" or (kind is None and isinstance(instance, Mapping)):
        props: Mapping[str, Any] = node.get("properties", {})
        for key in node.get("required", []):
            if key not in instance:
                out.append(f"{where}: missing required key '{key}'")
        extra = node.get("additionalProperties", True)
        for key, value in instance.items():
            if key in props:
                _check(value, props[key], root, f"{where}.{key}", out)
            elif extra is False:
                out.append(f"{where}: unknown key '{key}'")
            elif isinstance(extra, Mapping):
                _check(value, extra, root, f"{where}.{key}", out)
    elif kind == "array" and "items" in node:
        for index, value in enumerate(instance):
            _check(value, node["items"], root, f"{where}[{index}]", out)


def _check_value(instance: Any, node: Mapping[str, Any], where: str, out: list[str]) -> None:
    """``pattern`` (strings), ``minimum`` (numbers), ``propertyNames`` (an object's keys)."""
    if isinstance(instance, str) and re.search(node.get("pattern", ""), instance) is None:
        out.append(f"{where}: {_short(instance)} does not match {node['pattern']}")
    number = isinstance(instance, (int, float)) and not isinstance(instance, bool)
    if number and "minimum" in node and instance < node["minimum"]:
        out.append(f"{where}: {instance} is below {node['minimum']}")
    names = node.get("propertyNames", {}).get("pattern")
    if isinstance(instance, Mapping) and names is not None:
        for key in instance:
            if re.search(names, str(key)) is None:
                out.append(f"{where}: key {_short(key)} does not match {names}")


def _check_conditions(
    instance: Any, node: Mapping[str, Any], root: Mapping[str, Any], where: str, out: list[str]
) -> None:
    """``not`` and ``if``/``then``/``else``."""
    if "not" in node:
        trial: list[str] = []
        _check(instance, node["not"], root, where, trial)
        if not trial:
            out.append(f"{where}: {_short(instance)} matches a form that is not allowed")
    if "if" in node:
        trial = []
        _check(instance, node["if"], root, where, trial)
        branch = node.get("else") if trial else node.get("then")
        if branch is not None:
            _check(instance, branch, root, where, out)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
