"""Strategic merge patch, as the API server applies it to the built-in types (pods): lists with a merge
key (containers, volumes, env by ``name``, conditions by ``type``, ...) merge item by item, other lists
are replaced; the directives kubectl sends (``$patch``, ``$setElementOrder/…``,
``$deleteFromPrimitiveList/…``, ``$retainKeys``) are honoured. Pure: simcluster applies patches with it,
and the executor computes from it the JSON patch it sends (services/model/pod_writes.py)."""

from __future__ import annotations

import copy
from typing import Any

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
