"""JSON Schema (draft 2020-12) of the IntegrationPlan document, for the UI and other tools.

`plan.parse_plan` is the authority (it also checks cross-field rules such as "the register name
is a prefix of the transformer class", and refuses a part with errors instead of the plan); this
schema describes the same shape and value sets and is checked against `IntegrationPlan.to_json`
in the tests. `refused` is written by `to_json` (parts refused, with their reasons) and ignored
when a plan is read.
"""

from __future__ import annotations

from typing import Any

from .plan_model import (
    COMPONENT_KINDS,
    FORWARD_PATTERNS,
    SCHEMA_VERSION,
    TARGET_KINDS,
    TASK_TYPES,
    TP_KEY_PATTERN,
    TP_STYLES,
)
from .plan_reader import LIST_PATH

_MASK_GUARD = {
    "type": "object",
    "properties": {
        "params": {"type": "array", "items": {"type": "string"}},
        "reason": {"type": "string"},
    },
}


def _nullable(kind: str | dict[str, Any]) -> dict[str, Any]:
    base = {"type": kind} if isinstance(kind, str) else kind
    return {"anyOf": [base, {"type": "null"}]}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_SPLIT = _object(
    {
        "split_dim": {"type": "integer"},
        "expected_dims": _nullable("integer"),
        "split_output": {"type": "boolean"},
        "reason": {"type": "string"},
        "line": {"type": "integer"},
    },
    ["split_dim"],
)

_CP_ENTRY = {
    "oneOf": [
        _object(
            {
                "gather_dim": {"type": "integer"},
                "expected_dims": _nullable("integer"),
                "outputs": {"type": "integer", "minimum": 1},
                "skip": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                "reason": {"type": "string"},
                "line": {"type": "integer"},
            },
            ["gather_dim"],
        ),
        {
            "type": "object",
            "not": {"required": ["gather_dim"]},
            "additionalProperties": {
                "anyOf": [
                    _SPLIT,
                    {"type": "array", "items": _SPLIT},
                    {"type": "string"},
                    {"type": "integer"},
                ]
            },
        },
    ]
}


def _cache_part(properties: dict[str, Any]) -> dict[str, Any]:
    """The cache part: `blockLists` is required unless the part is disabled."""
    return _object(properties, []) | {
        "if": {"properties": {"enabled": {"const": False}}, "required": ["enabled"]},
        "else": {"required": ["blockLists"]},
    }


def integration_plan_schema() -> dict[str, Any]:
    """The schema as a plain dict (serialize with `json.dumps`)."""
    identifier = {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://cdit-integrator/schemas/integration-plan.json",
        "title": "IntegrationPlan",
        "description": "The analysis joined with the gate-check answers; input of codegen.",
        **_object(
            {
                "schemaVersion": {"const": SCHEMA_VERSION},
                "model": _model(identifier),
                "registerName": identifier,
                "modelSlug": {"type": "string", "pattern": r"^[a-z][a-z0-9_]*$"},
                "target": _target(),
                "cache": _cache(),
                "contextParallel": _context_parallel(),
                "tensorParallel": _tensor_parallel(),
                "components": _components(identifier),
                "example": _example(),
                "provenance": {"type": "object"},
                "refused": _refused(),
            },
            ["schemaVersion", "model", "registerName", "modelSlug", "target", "cache"],
        ),
    }


def _model(identifier: dict[str, Any]) -> dict[str, Any]:
    return _object(
        {
            "transformerClass": identifier,
            "transformerModule": {"type": "string"},
            "pipelineClass": _nullable(identifier),
            "localPath": _nullable("string"),
            "defaultModelId": _nullable("string"),
            "isDiffusersModel": {"type": "boolean"},
            "sources": _object(
                {
                    "transformer": {"type": "string"},
                    "pipeline": _nullable("string"),
                    "config": _nullable("string"),
                    "modelIndex": _nullable("string"),
                },
                ["transformer"],
            ),
        },
        ["transformerClass", "transformerModule", "sources"],
    )


def _target() -> dict[str, Any]:
    return {
        "oneOf": [
            _object(
                {"kind": {"const": "standalone"}, "path": {"type": "string"}},
                ["kind", "path"],
            ),
            _object(
                {"kind": {"const": "cache-dit-checkout"}, "root": {"type": "string"}},
                ["kind", "root"],
            ),
        ],
        "x-kinds": list(TARGET_KINDS),
    }


def _cache() -> dict[str, Any]:
    return _cache_part(
        {
            "enabled": {"type": "boolean"},
            "blockLists": {
                "type": "array",
                "items": _object(
                    {
                        "attr": {"type": "string", "pattern": LIST_PATH.pattern},  # a module path
                        "forwardPattern": {"enum": list(FORWARD_PATTERNS)},
                        "checkForwardPattern": {"type": "boolean"},
                        "checkNumOutputs": {"type": "boolean"},
                        "blockClass": _nullable("string"),
                        "blockClassPath": _nullable("string"),
                        "blockClassLine": _nullable("integer"),
                        "continues": _nullable("string"),
                        "container": {"enum": ["ModuleList", "Sequential"]},
                    },
                    ["attr", "forwardPattern"],
                ),
            },
            "hasSeparateCfg": {"type": "boolean"},
            "notCacheable": _nullable("string"),
            "patchFunctor": _patch_functor(),
        },
    )


def _patch_functor() -> dict[str, Any]:
    return _object(
        {
            "enabled": {"type": "boolean"},
            "reasons": {
                "type": "array",
                "items": _object(
                    {
                        "kind": {"type": "string"},
                        "message": {"type": "string"},
                        "line": {"type": "integer"},
                        "blockList": _nullable("string"),
                        "severity": {"type": "string"},
                    },
                    ["kind", "line"],
                ),
            },
        },
        [],
    )


def _context_parallel() -> dict[str, Any]:
    return _object(
        {
            "enabled": {"type": "boolean"},
            "approach": _nullable("string"),
            "plan": {"type": "object", "additionalProperties": _CP_ENTRY},
            "ulyssesAnything": {"type": "boolean"},
            "patches": {"type": "array", "items": {"type": "string"}},
            "ringUnsupported": _nullable("string"),
            "notPossible": _nullable("string"),
            "ringMasks": {"type": "boolean"},
            "sdpaRoutes": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "class": {"type": "string"},
                        "owner": {"enum": ["processor", "module"]},
                        "names": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["class", "owner", "names"],
                },
            },
            "flashNames": {"type": "array", "items": {"type": "string"}},
            "kernelFlags": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "class": {"type": "string"},
                        "attr": {"type": "string"},
                        "value": {"type": "boolean"},
                    },
                    "required": ["class", "attr", "value"],
                },
            },
            "maskGuard": _nullable(_MASK_GUARD),
            "streamMasks": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "list": {"type": "string"},
                        "mask": {"type": "string"},
                        "stream": {"type": "string"},
                    },
                    "required": ["list", "mask", "stream"],
                },
            },
            "maskReorder": _nullable(
                {
                    "type": "object",
                    "properties": {
                        "list": {"type": "string"},
                        "mask": {"type": "string"},
                        "streams": {"type": "array", "items": {"type": "string"}},
                    },
                }
            ),
        },
        [],
    )


def _tensor_parallel() -> dict[str, Any]:
    return _object(
        {
            "enabled": {"type": "boolean"},
            "attentionStrategy": _nullable("string"),
            "layers": {
                "type": "object",
                "propertyNames": {"pattern": TP_KEY_PATTERN.pattern},
                "additionalProperties": {"enum": list(TP_STYLES)},
            },
            "shardDivAttrs": {"type": "array", "items": {"type": "string"}},
            "conditionalLayers": {
                "type": "object",
                "additionalProperties": {"type": "string"},
            },
            "weightRearrangement": {
                "type": "array",
                "items": _object(
                    {
                        "layer": {"type": "string"},
                        "kind": {"type": "string"},
                        "reason": {"type": "string"},
                        "segments": {"type": "array", "items": {"type": "string"}},
                    },
                    ["layer", "kind"],
                ),
            },
            "distributedNorms": {"type": "array", "items": {"type": "string"}},
            "dtensorUnsafe": {"type": "array", "items": {"type": "string"}},
        },
        [],
    )


def _components(identifier: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "array",
        "items": _object(
            {
                "component": {"type": "string"},
                "class": identifier,
                "kind": {"enum": list(COMPONENT_KINDS)},
                "library": {"type": "string"},
                "generate": {"type": "boolean"},
                "source": _nullable("string"),
            },
            ["component", "class", "kind"],
        ),
    }


def _example() -> dict[str, Any]:
    return _nullable(
        _object(
            {
                "name": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9_.\-]*$"},
                "envVar": {"type": "string", "pattern": r"^[A-Z][A-Z0-9_]*$"},
                "taskType": {"enum": list(TASK_TYPES)},
                "prompt": {"type": "string"},
                "height": _nullable({"type": "integer", "minimum": 1}),
                "width": _nullable({"type": "integer", "minimum": 1}),
                "numFrames": _nullable({"type": "integer", "minimum": 1}),
                "numInferenceSteps": _nullable({"type": "integer", "minimum": 1}),
                "guidanceScale": _nullable("number"),
                "enableSeparateCfg": _nullable("boolean"),
            },
            ["name", "envVar"],
        )
    )


def _refused() -> dict[str, Any]:
    return {
        "type": "array",
        "items": _object(
            {
                "part": {"type": "string"},
                "label": {"type": "string"},
                "reasons": {"type": "array", "items": {"type": "string"}},
            },
            ["part", "reasons"],
        ),
    }
