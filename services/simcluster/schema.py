"""Structural OpenAPI v3 schemas of CustomResourceDefinitions, applied as kube-apiserver's apiextensions
server applies them to a custom resource on create and update: nulls in non-nullable fields dropped,
unknown fields pruned (unless ``x-kubernetes-preserve-unknown-fields``), ``default``s filled in, then the
value validated (type, required, enum, bounds, lengths, pattern, items) with the apiextensions messages
(`staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/validation`). Pure functions."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

Schema = dict[str, Any]
Cause = tuple[str, str, str]  # (field, reason, message), as errors.invalid takes them
_ROOT_KEPT = ("apiVersion", "kind", "metadata")


def _quote(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def prepare(schema: Schema, obj: dict[str, Any]) -> dict[str, Any]:
    """Prune and default a whole object (root metadata, apiVersion and kind are always kept)."""
    out = {k: v for k, v in obj.items() if k in _ROOT_KEPT}
    rest = {k: v for k, v in obj.items() if k not in _ROOT_KEPT}
    pruned = _prune_default(schema, rest)
    if isinstance(pruned, dict):
        out.update(pruned)
    return out


def _prune_default(schema: Schema, value: Any) -> Any:
    if isinstance(value, dict) and _is_object(schema):
        properties: dict[str, Schema] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        embedded = schema.get("x-kubernetes-embedded-resource") is True
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub = properties.get(key)
            if sub is not None:
                if item is None and not sub.get("nullable"):
                    continue  # nulls of non-nullable fields are pruned, before defaulting
                out[key] = _prune_default(sub, item)
            elif isinstance(additional, dict):
                out[key] = _prune_default(additional, item)
            elif preserve or additional is True or (embedded and key in _ROOT_KEPT):
                out[key] = item
        for key, sub in properties.items():
            if key not in out and "default" in sub:
                out[key] = _prune_default(sub, copy.deepcopy(sub["default"]))
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune_default(schema["items"], item) for item in value]
    return value


def _is_object(schema: Schema) -> bool:
    return schema.get("type") == "object" or "properties" in schema or "additionalProperties" in schema


_TYPE_CHECKS = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def validate(schema: Schema, value: Any, path: str = "") -> list[Cause]:
    """The causes ``value`` breaks ``schema`` with (empty: valid)."""
    causes: list[Cause] = []
    where = path or "<root>"
    if value is None:
        if not schema.get("nullable") and schema.get("type"):
            causes.append(
                (
                    where,
                    "FieldValueTypeInvalid",
                    f'Invalid value: "null": {where} in body must be of type {schema["type"]}: "null"',
                )
            )
        return causes
    kind = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _TYPE_CHECKS["integer"](value)):
            actual = _quote(_json_type(value))
            causes.append(
                (
                    where,
                    "FieldValueTypeInvalid",
                    f"Invalid value: {actual}: {where} in body must be of type integer,string: {actual}",
                )
            )
            return causes
    elif kind in _TYPE_CHECKS and not _TYPE_CHECKS[kind](value):
        # apiextensions reports the type it found as the invalid value.
        actual = _quote(_json_type(value))
        causes.append(
            (
                where,
                "FieldValueTypeInvalid",
                f"Invalid value: {actual}: {where} in body must be of type {kind}: {actual}",
            )
        )
        return causes
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_quote(v) for v in schema["enum"])
        causes.append(
            (
                where,
                "FieldValueNotSupported",
                f"Unsupported value: {_quote(value)}: supported values: {supported}",
            )
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            causes.append(
                (
                    where,
                    "FieldValueInvalid",
                    f"Invalid value: {value}: {where} in body should be greater than or equal to "
                    f"{schema['minimum']}",
                )
            )
        if "maximum" in schema and value > schema["maximum"]:
            causes.append(
                (
                    where,
                    "FieldValueInvalid",
                    f"Invalid value: {value}: {where} in body should be less than or equal to "
                    f"{schema['maximum']}",
                )
            )
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            causes.append(
                (where, "FieldValueTooLong", f"Too long: may not be longer than {schema['maxLength']}")
            )
        if "minLength" in schema and len(value) < schema["minLength"]:
            causes.append(
                (
                    where,
                    "FieldValueInvalid",
                    f"Invalid value: {_quote(value)}: {where} in body should be at least "
                    f"{schema['minLength']} chars long",
                )
            )
        if "pattern" in schema and not re.search(schema["pattern"], value):
            causes.append(
                (
                    where,
                    "FieldValueInvalid",
                    f"Invalid value: {_quote(value)}: {where} in body should match '{schema['pattern']}'",
                )
            )
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            causes.append(
                (
                    where,
                    "FieldValueTooMany",
                    f"Too many: {len(value)}: must have at most {schema['maxItems']} items",
                )
            )
        if "minItems" in schema and len(value) < schema["minItems"]:
            causes.append(
                (
                    where,
                    "FieldValueInvalid",
                    f"Invalid value: {len(value)}: {where} in body should have at least "
                    f"{schema['minItems']} items",
                )
            )
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                causes += validate(items, item, f"{path}[{i}]")
    if isinstance(value, dict):
        for required in schema.get("required") or []:
            if required not in value:
                causes.append((_join(path, required), "FieldValueRequired", "Required value"))
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                causes += validate(properties[key], item, _join(path, key))
            elif isinstance(additional, dict):
                causes += validate(additional, item, _join(path, key))
    return causes


def validate_object(schema: Schema, obj: dict[str, Any]) -> list[Cause]:
    """Validate everything but the root metadata (which the API server validates as any object's)."""
    body = {k: v for k, v in obj.items() if k != "metadata"}
    root = dict(schema)
    root["properties"] = {k: v for k, v in (schema.get("properties") or {}).items() if k != "metadata"}
    root["required"] = [r for r in schema.get("required") or [] if r != "metadata"]
    return validate(root, body)


def structural_problems(schema: Any, path: str = "openAPIV3Schema") -> list[str]:
    """What keeps a schema from being structural (the apiextensions rules, the ones that matter here):
    every node has a ``type`` unless it is int-or-string or preserves unknown fields; the root is an
    object."""
    if not isinstance(schema, dict):
        return [f"{path}: must be an object"]
    problems = []
    if path == "openAPIV3Schema" and schema.get("type") != "object":
        problems.append(f"{path}.type: Required value: must be object at the root")
    if (
        not schema.get("type")
        and not schema.get("x-kubernetes-int-or-string")
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        problems.append(f"{path}.type: Required value: must not be empty for specified object fields")
    for key, sub in (schema.get("properties") or {}).items():
        problems += structural_problems(sub, f"{path}.properties[{key}]")
    if isinstance(schema.get("items"), dict):
        problems += structural_problems(schema["items"], f"{path}.items")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += structural_problems(schema["additionalProperties"], f"{path}.additionalProperties")
    return problems


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
