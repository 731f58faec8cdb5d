"""Contract documents as JSON and back: camelCase keys, ``"inf"`` for infinite floats.

Standard library only (see `contract`). `from_json` checks every value against the dataclass
field's type and raises `ContractError` with the path of the first mismatch.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def to_json(obj: Any) -> Any:
    """A dataclass tree as JSON-ready data: camelCase keys, infinite floats as ``"inf"``. A field
    marked ``omit_empty`` (`common.doc_field`) is left out while it is None or empty."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if not (f.metadata.get("omit_empty") and _empty(value)):
                out[camel(f.name)] = to_json(value)
        return out
    if isinstance(obj, Mapping):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, float) and math.isinf(obj):
        return "inf" if obj > 0 else "-inf"
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return obj


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (list, tuple, Mapping)) and not value)


class ContractError(ValueError):
    """A document does not match the contract (schema violation or bad value)."""


def from_json(cls: type, data: Any) -> Any:
    """Build a contract dataclass from JSON data (keys camelCase). Raises `ContractError`."""
    return _convert(cls, data, cls.__name__)


def _convert(tp: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return data
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, Mapping):
            raise ContractError(f"{where}: expected an object, got {type(data).__name__}")
        hints = typing.get_type_hints(tp)
        known = {camel(f.name): f for f in dataclasses.fields(tp)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ContractError(f"{where}: unknown keys {unknown}")
        kwargs = {
            f.name: _convert(hints[f.name], data[key], f"{where}.{key}")
            for key, f in known.items()
            if key in data
        }
        try:
            return tp(**kwargs)
        except TypeError as exc:
            raise ContractError(f"{where}: {exc}") from None
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if data is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, data, where)
            except ContractError as exc:
                errors.append(str(exc))
        raise ContractError(errors[0] if len(errors) == 1 else f"{where}: no match ({errors})")
    if origin is Literal:
        if data not in typing.get_args(tp):
            raise ContractError(f"{where}: {data!r} is not one of {list(typing.get_args(tp))}")
        return data
    if origin is list:
        if not isinstance(data, list):
            raise ContractError(f"{where}: expected a list")
        (item,) = typing.get_args(tp)
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(data)]
    if origin is dict:
        if not isinstance(data, Mapping):
            raise ContractError(f"{where}: expected an object")
        _, value = typing.get_args(tp)
        return {str(k): _convert(value, v, f"{where}.{k}") for k, v in data.items()}
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise ContractError(f"{where}: expected a number, got {data!r}")
        return float(data)
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise ContractError(f"{where}: expected an integer, got {data!r}")
        return data
    if tp in (str, bool):
        if not isinstance(data, tp):
            raise ContractError(f"{where}: expected {tp.__name__}, got {data!r}")
        return data
    raise ContractError(f"{where}: unsupported type {tp!r}")
