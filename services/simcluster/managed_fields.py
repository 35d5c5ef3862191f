"""``metadata.managedFields`` as kube-apiserver keeps them, simplified: one entry per (manager, operation,
subresource) that wrote the object through the API, with the time of its last write and the fields it
touched (``fieldsV1``, to two levels: ``f:spec`` and the spec's fields, ``f:metadata`` and its labels or
annotations, other top-level fields). The manager is the request's ``fieldManager``, else the client's
User-Agent up to its first ``/`` (as the API server defaults it). Writes by simcluster's own controllers go
to the store directly and record none, so ``managedFields`` name only the clients."""

from __future__ import annotations

from typing import Any

from .store import now_iso

APPLY_PATCH = "application/apply-patch+yaml"
_SKIPPED = {"apiVersion", "kind", "status", "metadata"}
_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")


def manager_of(field_manager: str | None, user_agent: str | None) -> str:
    if field_manager:
        return field_manager[:128]
    return (user_agent or "unknown").split("/", 1)[0][:128] or "unknown"


def touched(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """The fieldsV1 of what a write changed (everything present, for a create)."""
    before = old or {}
    fields: dict[str, Any] = {}
    for key in sorted(set(new) - _SKIPPED):
        if key == "spec" and isinstance(new.get(key), dict):
            spec, old_spec = new[key], before.get(key) or {}
            changed: dict[str, Any] = {f"f:{k}": {} for k in sorted(spec) if spec.get(k) != old_spec.get(k)}
            if changed:
                fields["f:spec"] = changed
        elif new.get(key) != before.get(key):
            fields[f"f:{key}"] = {}
    meta, old_meta = new.get("metadata") or {}, before.get("metadata") or {}
    changed_meta: dict[str, Any] = {
        f"f:{k}": {} for k in _METADATA if meta.get(k) and meta.get(k) != old_meta.get(k)
    }
    if changed_meta:
        fields["f:metadata"] = changed_meta
    return fields


def record(
    obj: dict[str, Any],
    old: dict[str, Any] | None,
    *,
    manager: str,
    content_type: str,
    subresource: str | None,
    api_version: str,
) -> None:
    """Note the write in ``obj``'s managedFields (in place); a write that changed nothing notes nothing."""
    fields = touched(old, obj)
    if not fields:
        return
    operation = "Apply" if content_type.startswith(APPLY_PATCH) else "Update"
    meta = obj.setdefault("metadata", {})
    entries = [dict(e) for e in (meta.get("managedFields") or []) if isinstance(e, dict)]
    mine = [
        e
        for e in entries
        if e.get("manager") == manager
        and e.get("operation") == operation
        and e.get("subresource") == subresource
    ]
    entry: dict[str, Any] = mine[0] if mine else {"manager": manager, "operation": operation}
    if not mine:
        entries.append(entry)
    merged = dict(entry.get("fieldsV1") or {})
    for key, value in fields.items():
        merged[key] = {**(merged.get(key) or {}), **value}
    entry.update(apiVersion=api_version, time=now_iso(), fieldsType="FieldsV1", fieldsV1=merged)
    if subresource:
        entry["subresource"] = subresource
    meta["managedFields"] = entries
