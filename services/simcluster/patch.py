"""The three PATCH flavours: JSON merge patch (RFC 7386), strategic merge patch
(services/model/strategic_merge.py), JSON patch (RFC 6902).

JSON patch as kube-apiserver applies it (evanphx/json-patch v4, which it uses): a ``test`` whose value is
null passes on a member the object lacks (its parent must exist), objects compare as that library does
(each member of the document's object must be in the value, equal), and an operation that fails, a
failed ``test`` included, makes the whole patch 422 Invalid with nothing applied. Without a
resourceVersion in the result, the patch is applied again to the current object on a write conflict (as
any patch is), so its tests are evaluated against what is current.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch  # RFC 6902, the library kubernetes' own Python tooling uses

from services.model.strategic_merge import merge_patch, strategic_merge_patch

from .errors import ApiError

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise ApiError(
            400,
            "json patch must be a JSON array of operations (kubernetes-asyncio's CustomObjectsApi sends a "
            "dict body as json-patch: pass _content_type='application/merge-patch+json')",
        )
    document = copy.deepcopy(target)
    try:
        for operation in operations:
            if isinstance(operation, dict) and operation.get("op") == "test":
                _test(document, operation)
            else:
                document = jsonpatch.JsonPatch([operation]).apply(document, in_place=True)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as exc:
        raise ApiError(422, f"the server rejected our request due to an error in our request: {exc}") from exc
    return document


_MISSING = object()


def _test(document: Any, operation: dict[str, Any]) -> None:
    """RFC 6902 ``test`` as kube-apiserver's json-patch library runs it (the module docstring)."""
    path = operation.get("path")
    if not isinstance(path, str) or "value" not in operation:
        raise jsonpatch.JsonPatchException(f"test operation needs a path and a value: {operation}")
    pointer = jsonpatch.JsonPointer(path)
    parts = pointer.parts
    if not parts:
        current: Any = document
    else:
        try:
            parent = jsonpatch.JsonPointer.from_parts(parts[:-1]).resolve(document)
        except jsonpatch.JsonPointerException:
            raise jsonpatch.JsonPatchException(
                f"test operation does not apply: is missing path: {path}"
            ) from None
        if isinstance(parent, dict):
            current = parent.get(parts[-1], _MISSING)
        elif isinstance(parent, list):
            index = parts[-1]
            if not (index.isdigit() and int(index) < len(parent)):
                raise jsonpatch.JsonPatchException(f"Unable to access invalid index: {index}")
            current = parent[int(index)]
        else:
            raise jsonpatch.JsonPatchException(f"test operation does not apply: is missing path: {path}")
    expected = operation["value"]
    if current is _MISSING or current is None:
        if expected is None:
            return
        raise jsonpatch.JsonPatchException(f"testing value {path} failed")
    if expected is None or not _same(current, expected):
        raise jsonpatch.JsonPatchException(f"testing value {path} failed")


def _same(current: Any, expected: Any) -> bool:
    """The library's equality: objects by the document's members (each in the value, equal), arrays item
    by item, anything else by its JSON text (so true is not 1, nor 1 1.0)."""
    if isinstance(current, dict):
        return isinstance(expected, dict) and all(
            key in expected and ((value is None and expected[key] is None) or _same(value, expected[key]))
            for key, value in current.items()
        )
    if isinstance(current, list):
        return (
            isinstance(expected, list)
            and len(current) == len(expected)
            and all(_same(a, b) for a, b in zip(current, expected, strict=True))
        )
    if isinstance(expected, dict | list):
        return False
    return json.dumps(current) == json.dumps(expected)


def apply_patch(content_type: str, target: dict[str, Any], patch: Any, custom: bool) -> dict[str, Any]:
    media = content_type.split(";", 1)[0].strip().lower()
    if media == MERGE_PATCH:
        result = merge_patch(target, patch)
    elif media == STRATEGIC_MERGE_PATCH:
        if custom:
            raise ApiError(
                415, "strategic merge patch is not supported for custom resources", "UnsupportedMediaType"
            )
        result = strategic_merge_patch(target, patch)
    elif media == JSON_PATCH:
        result = json_patch(target, patch)
    else:
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_MERGE_PATCH}",
            "UnsupportedMediaType",
        )
    if not isinstance(result, dict):
        raise ApiError(400, "patch result is not an object")
    return result
