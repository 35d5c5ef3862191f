"""Classify a template change and build the in-place patch (seed 003; semantics CS-19, CS-21).

Classes, from mildest to hardest (the seed's vocabulary):
- Dynamic: applied to the running pod with no container restart (template metadata; probes in extended mode);
- Rebuild: the container is recreated in place, the pod is kept (image; env/envFrom/volumeMounts/volumes in
  extended mode);
- Static: the pod must be recreated (everything else).
The default mode is what stock Kubernetes and OpenKruise accept; the extended mode is switched on per
CloneSet with the annotation ``rollbook.io/inplace-mode: extended`` and needs a kubelet that accepts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from services.planner.names import (
    INPLACE_GRACE_ANNOTATION,
    INPLACE_READY_CONDITION,
    INPLACE_STATE_ANNOTATION,
    POD_TEMPLATE_HASH_LABEL,
    REVISION_LABEL,
)
from services.planner.podstate import container_statuses

NONE, DYNAMIC, REBUILD, STATIC = 0, 1, 2, 3
CLASS_NAMES = {NONE: "None", DYNAMIC: "Dynamic", REBUILD: "Rebuild", STATIC: "Static"}

_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_EXTENDED_REBUILD = ("env", "envFrom", "volumeMounts")


@dataclass(slots=True)
class Change:
    """The difference between a pod's revision and the target revision."""

    kind: int = NONE
    static_field: str | None = None  # first field that forces a recreate
    labels: dict[str, str | None] = field(default_factory=dict)  # label -> new value (None = remove)
    annotations: dict[str, str | None] = field(default_factory=dict)
    containers: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> changed fields
    restart: list[str] = field(default_factory=list)  # containers recreated in place
    volumes: list[Any] | None = None  # new pod volumes (extended mode), when they changed
    removed_volumes: list[str] = field(default_factory=list)
    spec_patch: dict[str, Any] | None = None  # built once per change, shared by every pod it applies to
    labels_patch: dict[str, str | None] | None = None  # likewise (a change has one target revision)

    @property
    def in_place(self) -> bool:
        return self.kind != STATIC

    def bump(self, kind: int, where: str | None = None) -> None:
        if kind == STATIC and self.static_field is None:
            self.static_field = where
        self.kind = max(self.kind, kind)


def _map_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    diff: dict[str, Any] = {k: v for k, v in new.items() if old.get(k) != v}
    diff.update({k: None for k in old if k not in new})
    return diff


def classify(old: dict[str, Any], new: dict[str, Any], extended: bool) -> Change:
    change = Change()
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    change.labels = _map_diff(old_meta.get("labels") or {}, new_meta.get("labels") or {})
    change.annotations = _map_diff(old_meta.get("annotations") or {}, new_meta.get("annotations") or {})
    if old_meta != new_meta:
        change.bump(DYNAMIC)
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    for key in sorted(set(old_spec) | set(new_spec)):
        if key == "containers" or old_spec.get(key) == new_spec.get(key):
            continue
        if key == "volumes" and extended:
            _classify_volumes(change, old_spec.get("volumes") or [], new_spec.get("volumes") or [], new_spec)
        else:
            change.bump(STATIC, f"spec.template.spec.{key}")
    _classify_containers(change, old_spec.get("containers") or [], new_spec.get("containers") or [], extended)
    return change


def _classify_containers(change: Change, old: list[Any], new: list[Any], extended: bool) -> None:
    if [c.get("name") for c in old] != [c.get("name") for c in new]:
        change.bump(STATIC, "spec.template.spec.containers")
        return
    for index, (before, after) in enumerate(zip(old, new, strict=True)):
        if before == after:
            continue
        name = after["name"]
        changed: dict[str, Any] = {}
        restart = False
        for key in sorted(set(before) | set(after)):
            if before.get(key) == after.get(key):
                continue
            changed[key] = after.get(key)
            if key == "image":
                restart = True
            elif extended and key in _PROBES:
                change.bump(DYNAMIC)
            elif extended and key in _EXTENDED_REBUILD:
                restart = True
            else:
                change.bump(STATIC, f"spec.template.spec.containers[{index}].{key}")
        if restart:
            change.bump(REBUILD)
            change.restart.append(name)
        change.containers[name] = changed


def _classify_volumes(change: Change, old: list[Any], new: list[Any], new_spec: dict[str, Any]) -> None:
    before = {v.get("name"): v for v in old}
    after = {v.get("name"): v for v in new}
    touched = {name for name in set(before) | set(after) if before.get(name) != after.get(name)}
    change.volumes = new
    change.removed_volumes = sorted(n for n in before if n not in after)
    change.bump(REBUILD)
    for container in new_spec.get("containers") or []:
        mounts = {m.get("name") for m in container.get("volumeMounts") or []}
        if mounts & touched and container["name"] not in change.restart:
            change.restart.append(container["name"])


_annotation_encoder = msgspec.json.Encoder(order="sorted")


def _dump(value: Any) -> str:
    """Annotation values: compact JSON with sorted keys (stable bytes for replay)."""
    return _annotation_encoder.encode(value).decode()


def container_patch(change: Change, old_containers: list[Any]) -> list[dict[str, Any]]:
    """Strategic-merge entries for the changed containers (merge key: name)."""
    old_by_name = {c.get("name"): c for c in old_containers}
    entries = []
    for name, changed in change.containers.items():
        entry: dict[str, Any] = {"name": name}
        before = old_by_name.get(name) or {}
        for key, value in changed.items():
            if key in _PROBES and value is not None:
                entry[key] = {**value, "$patch": "replace"}
            elif key in ("env", "volumeMounts") and value is not None:
                merge_key = "name" if key == "env" else "mountPath"
                kept = {item.get(merge_key) for item in value}
                gone = [
                    {merge_key: item.get(merge_key), "$patch": "delete"}
                    for item in before.get(key) or []
                    if item.get(merge_key) not in kept
                ]
                entry[key] = list(value) + gone
            else:
                entry[key] = value
        entries.append(entry)
    return entries


def _statuses_of(pod: dict[str, Any], names: list[str]) -> dict[str, dict[str, Any]]:
    """The container statuses of the named containers (the last one wins, as in ``container_statuses``)."""
    if not names:
        return {}
    found = {}
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        name = status.get("name", "")
        if name in names:
            found[name] = status
    return found


def update_patch(
    pod: dict[str, Any],
    change: Change,
    old_template: dict[str, Any],
    revision_name: str,
    revision_hash: str,
    now_text: str,
) -> dict[str, Any]:
    """The strategic merge patch that moves ``pod`` in place to the target revision."""
    statuses = _statuses_of(pod, change.restart)
    last_statuses = {}
    for name in change.restart:
        status = statuses.get(name) or {}
        last_statuses[name] = {
            "imageID": status.get("imageID", ""),
            "containerID": status.get("containerID", ""),
        }
    state = {
        "revision": revision_name,
        "updateTimestamp": now_text,
        "updateImages": any("image" in c for c in change.containers.values()),
        "lastContainerStatuses": last_statuses,
    }
    if change.labels_patch is None or change.labels_patch[REVISION_LABEL] != revision_hash:
        labels: dict[str, str | None] = dict(change.labels)
        labels[REVISION_LABEL] = revision_hash
        labels[POD_TEMPLATE_HASH_LABEL] = revision_hash
        change.labels_patch = labels
    annotations: dict[str, str | None] = dict(change.annotations)
    annotations[INPLACE_STATE_ANNOTATION] = _dump(state)
    annotations[INPLACE_GRACE_ANNOTATION] = None
    # The labels and spec parts are the same for every pod of this change: built once, shared.
    patch: dict[str, Any] = {"metadata": {"labels": change.labels_patch, "annotations": annotations}}
    if change.spec_patch is None:
        spec: dict[str, Any] = {}
        entries = container_patch(change, (old_template.get("spec") or {}).get("containers") or [])
        if entries:
            spec["containers"] = entries
        if change.volumes is not None:
            spec["volumes"] = list(change.volumes) + [
                {"name": n, "$patch": "delete"} for n in change.removed_volumes
            ]
        change.spec_patch = spec
    if change.spec_patch:
        # Shared between the pods of this round: action payloads are immutable values.
        patch["spec"] = change.spec_patch
    return patch


def grace_patch(revision_name: str, grace_seconds: int, now_text: str) -> dict[str, Any]:
    grace = {"revision": revision_name, "graceSeconds": grace_seconds, "markedAt": now_text}
    return {"metadata": {"annotations": {INPLACE_GRACE_ANNOTATION: _dump(grace)}}}


def clear_grace_patch() -> dict[str, Any]:
    return {"metadata": {"annotations": {INPLACE_GRACE_ANNOTATION: None}}}


def condition(ready: bool, reason: str, now_text: str) -> dict[str, Any]:
    return {
        "type": INPLACE_READY_CONDITION,
        "status": "True" if ready else "False",
        "reason": reason,
        "lastTransitionTime": now_text,
    }


def update_complete(pod: dict[str, Any], state: dict[str, Any]) -> bool:
    """CS-21 step 4: every restarted container reports a new image id or a new container id."""
    recorded = state.get("lastContainerStatuses") or {}
    if not isinstance(recorded, dict):
        return True
    statuses = container_statuses(pod)
    spec_images = {c.get("name"): c.get("image") for c in (pod.get("spec") or {}).get("containers") or []}
    for name, before in recorded.items():
        now_status = statuses.get(name)
        if now_status is None:
            return False
        before = before if isinstance(before, dict) else {}
        old_image_id, old_container_id = before.get("imageID", ""), before.get("containerID", "")
        new_image_id, new_container_id = now_status.get("imageID", ""), now_status.get("containerID", "")
        if old_image_id and new_image_id and new_image_id != old_image_id:
            continue
        if old_container_id and new_container_id and new_container_id != old_container_id:
            continue
        if (
            not old_image_id
            and not old_container_id
            and new_container_id
            and now_status.get("image") == spec_images.get(name)
        ):
            continue
        return False
    return True
