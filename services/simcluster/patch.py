"""The three PATCH flavours: JSON merge patch (RFC 7386), strategic merge patch, JSON patch (RFC 6902).

Strategic merge follows the built-in types' patch strategy: lists with a merge key (containers, volumes,
env by `name`, conditions by `type`, ...) are merged item by item; other lists are replaced. The
directives kubectl sends (`$patch`, `$setElementOrder/…`, `$deleteFromPrimitiveList/…`, `$retainKeys`)
are honoured.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch  # RFC 6902, the library kubernetes' own Python tooling uses

from .errors import ApiError

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# Field name -> merge key, from the `patchMergeKey` tags of the core/v1 and meta/v1 types.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "readinessGates": "conditionType",
    "resourceClaims": "name",
}
# Lists of primitives with patchStrategy "merge" (union, not replace).
MERGE_PRIMITIVE_LISTS = {"finalizers"}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return _strip_directives(copy.deepcopy(patch))
    return _merge_map(target, patch)


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _merge_map(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip_directives({k: v for k, v in patch.items() if k != "$patch"})
    if directive == "delete":
        return {}
    result = dict(target)
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in {"$patch", "$retainKeys"}:
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list):
                result[field] = [item for item in result[field] if item not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            merged = _merge_map(current if isinstance(current, dict) else {}, value)
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            result[key] = value
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    for key, order in patch.items():
        if key.startswith("$setElementOrder/") and isinstance(result.get(key.split("/", 1)[1]), list):
            field = key.split("/", 1)[1]
            result[field] = _reorder(result[field], order, MERGE_KEYS.get(field))
    return result


def _merge_list(field: str, current: Any, patch: list[Any]) -> list[Any]:
    current_list = list(current) if isinstance(current, list) else []
    if field in MERGE_PRIMITIVE_LISTS:
        return current_list + [item for item in patch if item not in current_list]
    merge_key = MERGE_KEYS.get(field)
    if merge_key is None or not all(isinstance(item, dict) for item in patch):
        return _strip_directives(copy.deepcopy(patch))
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip_directives(i) for i in patch if not (isinstance(i, dict) and i.get("$patch"))]
    result = list(current_list)
    for item in patch:
        key_value = item.get(merge_key)
        index = next(
            (
                i
                for i, existing in enumerate(result)
                if isinstance(existing, dict) and existing.get(merge_key) == key_value
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append(_strip_directives(item))
        else:
            result[index] = _merge_map(result[index], item)
    return result


def _reorder(items: list[Any], order: list[Any], merge_key: str | None) -> list[Any]:
    def key_of(item: Any) -> Any:
        return item.get(merge_key) if merge_key and isinstance(item, dict) else item

    wanted = [key_of(o) for o in order]
    ranked = sorted(
        enumerate(items),
        key=lambda pair: (
            wanted.index(key_of(pair[1])) if key_of(pair[1]) in wanted else len(wanted),
            pair[0],
        ),
    )
    return [item for _, item in ranked]


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise ApiError(
            400,
            "json patch must be a JSON array of operations (kubernetes-asyncio's CustomObjectsApi sends a "
            "dict body as json-patch: pass _content_type='application/merge-patch+json')",
        )
    try:
        return jsonpatch.JsonPatch(operations).apply(target)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as exc:
        raise ApiError(422, f"the server rejected our request due to an error in our request: {exc}") from exc


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
