"""The rules a CRD's schema must follow to be *structural*, which apiextensions.k8s.io/v1 requires (the API
server refuses the CRD otherwise), as the Kubernetes documentation states them ("Specifying a structural
schema"):

1. a non-empty ``type`` at the root, for every field of an object (``properties``,
   ``additionalProperties``) and for every array's ``items``, except on a node with
   ``x-kubernetes-int-or-string: true`` or ``x-kubernetes-preserve-unknown-fields: true``;
2. every field and item named inside ``allOf``/``anyOf``/``oneOf``/``not`` is also specified outside;
3. no ``description``, ``type``, ``default``, ``additionalProperties`` or ``nullable`` inside those
   junctors, except the ``anyOf: [{type: integer}, {type: string}]`` of an int-or-string;
4. under ``metadata`` only restrictions of ``name`` and ``generateName``;

plus what the API server checks with them: the root is an object, ``properties`` and
``additionalProperties`` exclude each other, an array has ``items``, and an int-or-string node has no
``type``.
"""

from __future__ import annotations

from typing import Any

JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
FORBIDDEN_IN_JUNCTORS = ("description", "type", "default", "additionalProperties", "nullable")
INT_OR_STRING_ANY_OF = [{"type": "integer"}, {"type": "string"}]


def structural_errors(schema: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    if schema.get("type") != "object":
        errors.append("<root>: type must be object")
    _node(schema, "", errors, root=True)
    metadata = (schema.get("properties") or {}).get("metadata")
    if isinstance(metadata, dict):
        allowed = {"name", "generateName"}
        extra = set(metadata.get("properties") or {}) - allowed
        if extra or set(metadata) - {"type", "description", "properties"}:
            errors.append(f".metadata: only name and generateName may be restricted, not {sorted(extra)}")
    return errors


def _node(schema: dict[str, Any], path: str, errors: list[str], *, root: bool = False) -> None:
    where = path or "<root>"
    int_or_string = schema.get("x-kubernetes-int-or-string") is True
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    if int_or_string and "type" in schema:
        errors.append(f"{where}: an x-kubernetes-int-or-string node has no type")
    if not root and not schema.get("type") and not int_or_string and not preserve:
        errors.append(f"{where}: type is missing")
    if "properties" in schema and "additionalProperties" in schema:
        errors.append(f"{where}: properties and additionalProperties exclude each other")
    if schema.get("type") == "array" and "items" not in schema:
        errors.append(f"{where}: an array needs items")
    for junctor in JUNCTORS:
        if junctor in schema:
            _junctor(schema, junctor, where, int_or_string, errors)
    for name, child in (schema.get("properties") or {}).items():
        _node(child, f"{path}.{name}", errors)
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        _node(additional, f"{path}{{}}", errors)
    items = schema.get("items")
    if isinstance(items, dict):
        _node(items, f"{path}[]", errors)
    elif items is not None:
        errors.append(f"{where}: items must be one schema")


def _junctor(
    schema: dict[str, Any], junctor: str, where: str, int_or_string: bool, errors: list[str]
) -> None:
    branches = schema[junctor] if junctor != "not" else [schema[junctor]]
    if int_or_string and junctor == "anyOf" and branches == INT_OR_STRING_ANY_OF:
        return
    for branch in branches:
        for key in FORBIDDEN_IN_JUNCTORS:
            if key in branch:
                errors.append(f"{where}: {key} inside {junctor}")
        outside = schema.get("properties") or {}
        for name in branch.get("properties") or {}:
            if name not in outside:
                errors.append(f"{where}: {name} is named in {junctor} but not specified outside it")
        if "items" in branch and "items" not in schema:
            errors.append(f"{where}: items named in {junctor} but not specified outside it")


def field_type(schema: dict[str, Any], json_path: str) -> str | None:
    """The type of the field at a simple ``.a.b`` path of the schema (None when it is not specified)."""
    node: dict[str, Any] | None = schema
    for part in json_path.strip(".").split("."):
        node = (node or {}).get("properties", {}).get(part)
        if node is None:
            return None
    return str(node.get("type")) if node else None
