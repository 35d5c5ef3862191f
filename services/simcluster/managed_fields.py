"""``metadata.managedFields`` as kube-apiserver keeps them, simplified: one entry per (manager, operation,
subresource) that wrote the object through the API, with the time of its last write and the fields it
owns (``fieldsV1``, to two levels: ``f:spec`` and the spec's fields, ``f:status`` and the status's fields,
``f:metadata`` and its labels or annotations, other top-level fields). A write through the main resource
touches no status field and one through the status subresource only status fields, and for a pod its
labels, annotations and finalizers, which pods/status takes too (each ignores the rest, as the API server
does). An update takes the fields it changed from every other manager (an
``Update`` is never a conflict: the last writer owns a field), and a manager left owning nothing is
dropped. The manager is the request's ``fieldManager``, else the client's User-Agent up to its first ``/``
(as the API server defaults it). Writes by simcluster's own controllers go to the store directly and
record none, so ``managedFields`` name only the clients."""

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


def touched(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    subresource: str | None = None,
    status_takes_metadata: bool = False,
) -> dict[str, Any]:
    """The fieldsV1 of what a write changed (everything present, for a create); through the status
    subresource, the status fields it set to a new value (a field it removed is owned by no one), and
    the metadata it changed when the status subresource takes metadata (``status_takes_metadata``: a
    pod's)."""
    before = old or {}
    fields: dict[str, Any] = {}
    if subresource == "status":
        status, old_status = new.get("status"), before.get("status")
        previous = old_status if isinstance(old_status, dict) else {}
        changed_status: dict[str, Any] = (
            {f"f:{k}": {} for k in sorted(status) if status[k] != previous.get(k)}
            if isinstance(status, dict)
            else {}
        )
        if changed_status:
            fields["f:status"] = changed_status
        if status_takes_metadata:  # not ownerReferences, which pods/status resets
            fields.update(_metadata_touched(before, new, _METADATA[:3]))
        return fields
    for key in sorted(set(new) - _SKIPPED):
        if key == "spec" and isinstance(new.get(key), dict):
            spec, old_spec = new[key], before.get(key) or {}
            changed: dict[str, Any] = {f"f:{k}": {} for k in sorted(spec) if spec.get(k) != old_spec.get(k)}
            if changed:
                fields["f:spec"] = changed
        elif new.get(key) != before.get(key):
            fields[f"f:{key}"] = {}
    fields.update(_metadata_touched(before, new, _METADATA))
    return fields


def _metadata_touched(before: dict[str, Any], new: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    meta, old_meta = new.get("metadata") or {}, before.get("metadata") or {}
    changed_meta: dict[str, Any] = {
        f"f:{k}": {} for k in keys if meta.get(k) and meta.get(k) != old_meta.get(k)
    }
    return {"f:metadata": changed_meta} if changed_meta else {}


def record(
    obj: dict[str, Any],
    old: dict[str, Any] | None,
    *,
    manager: str,
    content_type: str,
    subresource: str | None,
    api_version: str,
    status_takes_metadata: bool = False,
) -> None:
    """Note the write in ``obj``'s managedFields (in place); a write that changed nothing notes nothing."""
    fields = touched(old, obj, subresource, status_takes_metadata)
    if not fields:
        return
    operation = "Apply" if content_type.startswith(APPLY_PATCH) else "Update"
    meta = obj.setdefault("metadata", {})
    entries = [dict(e) for e in (meta.get("managedFields") or []) if isinstance(e, dict)]
    writer = (manager, operation, subresource)
    kept: list[dict[str, Any]] = []
    mine: list[dict[str, Any]] = []
    for e in entries:
        if (e.get("manager"), e.get("operation"), e.get("subresource")) == writer:
            mine.append(e)
        elif e.get("fieldsV1"):
            e["fieldsV1"] = without(e["fieldsV1"], fields)
            if not e["fieldsV1"]:
                continue  # every field it owned is this writer's now
        kept.append(e)
    entries = kept
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


def without(owned: dict[str, Any], taken: dict[str, Any]) -> dict[str, Any]:
    """A manager's fieldsV1 less the fields another manager's write took (a parent left with no field
    is no longer owned)."""
    kept: dict[str, Any] = {}
    for key, value in owned.items():
        if key not in taken:
            kept[key] = value
            continue
        children, taken_children = value or {}, taken[key] or {}
        if not children or not taken_children:
            continue  # the field itself was written
        rest = {k: v for k, v in children.items() if k not in taken_children}
        if rest:
            kept[key] = rest
    return kept
