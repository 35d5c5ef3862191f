"""What the CloneSet planner and the executor agree on about a write to an existing pod: whether the pod
carries a condition already, and the resourceVersion an action names so the executor's first write needs
no read of the pod (docs/services.md, "executor", "The first write without a read").

An action computed from the pod at resourceVersion X can make its first write with X as precondition: the
API server applies it only if the pod is still exactly what the planner saw, so nothing (this action on an
earlier delivery, a later action, another writer) has changed it since; anything else answers 409 and
the executor reads the pod and goes on as without X. That holds only if the executor's first write from X
is known without reading X: it writes a condition only when the pod lacks it (``has_condition``), so the
planner names X only when the pod it saw lacks every condition the action writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.model.strategic_merge import MERGE_KEYS, strategic_merge_patch
from services.model.streams import ACTION_ID_ANNOTATION

# The details key of a pod action (PodActionRequested.details) naming the version it was computed from.
OBSERVED_VERSION = "resourceVersion"
# The details keys of the conditions an action on an existing pod writes: an in-place update's
# InPlaceUpdateReady=False written first (``notReady``), a mark's condition (``condition``).
_CONDITION_KEYS = ("notReady", "condition")


def has_condition(pod: Mapping[str, Any], condition: Mapping[str, Any]) -> bool:
    """The pod carries ``condition`` already (same type, status and reason): writing it again would change
    nothing but its lastTransitionTime, which must move only on a transition. So a mark action retried
    after its status write landed (its metadata write answered 429 or 500) retries only what failed."""
    wanted = {key: condition.get(key) for key in ("type", "status", "reason")}
    return any(
        {key: current.get(key) for key in wanted} == wanted
        for current in (pod.get("status") or {}).get("conditions") or []
    )


def observed_version(details: Mapping[str, Any], pod: Mapping[str, Any] | None) -> str | None:
    """The resourceVersion an action on ``pod`` (as observed, the version its ``details`` were computed
    from) may name as its first write's precondition; None when the pod is unknown or has no version, or
    carries a condition the action writes (the executor would leave it out, which it knows only by
    reading)."""
    if pod is None:
        return None
    version = (pod.get("metadata") or {}).get("resourceVersion")
    if not version:
        return None
    for key in _CONDITION_KEYS:
        condition = details.get(key)
        if isinstance(condition, Mapping) and has_condition(pod, condition):
            return None
    return str(version)


# --- the spec patch as a JSON patch with tests --------------------------------------------------------
#
# A strategic merge patch cannot say what it was computed from except by resourceVersion, and any write to
# the pod moves that: the kubelet's status write answering the InPlaceUpdateReady condition made the spec
# patch that followed it meet 409 (then a read and a second patch: 5 requests per in-place pod). The JSON
# patch ``json_patch_from`` builds says it field by field instead: before each value it changes, a
# ``test`` of that value as it was in the pod the patch was computed from (null when absent). A status
# write changes none of them, so it does not conflict; anything that changed a field the patch writes
# (this action applied already: its id annotation is among them; another writer's spec change) fails the
# test, and the API server refuses the whole patch (422), as the resourceVersion precondition did.

JSON_PATCH = "application/json-patch+json"

_ABSENT = object()
# What the JSON patch leaves to the strategic merge's whole-value rule (test the old value, write the
# new one) rather than going into field by field.
_WHOLE_VALUE_DIRECTIVES = frozenset({"$patch", "$retainKeys"})


def json_patch_from(current: Mapping[str, Any], patch: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch (RFC 6902) that makes ``current`` (a pod as read or as a write returned it) what the
    strategic merge ``patch`` makes of it: ``test /metadata/uid`` first (the same incarnation), then per
    field the patch writes a ``test`` of its value in ``current`` and the change. Maps are gone into key by
    key, and a list merged by key (containers by name) item by item when the merge changes items in place
    (the item's index is tested by its key); anything else (a replaced list, an item added or removed, a
    ``$patch`` directive) is one value. A field whose value does not change is tested, not written."""
    operations: list[dict[str, Any]] = []
    uid = (current.get("metadata") or {}).get("uid")
    if uid:
        operations.append({"op": "test", "path": "/metadata/uid", "value": uid})
    merged = strategic_merge_patch(dict(current), dict(patch))
    _fields(operations, "", current, merged, patch)
    return operations


def _pointer(path: str, key: str | int) -> str:
    return f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}"


def _fields(
    operations: list[dict[str, Any]],
    path: str,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    patch: Mapping[str, Any],
) -> None:
    touched: list[str] = []
    for key in patch:
        if key.startswith("$"):
            field = key.split("/", 1)[1] if "/" in key else None
            if field is not None and field not in touched:
                touched.append(field)  # $setElementOrder/…, $deleteFromPrimitiveList/…
        elif key not in touched:
            touched.append(key)
    for key in touched:
        pointer = _pointer(path, key)
        before, after, change = old.get(key, _ABSENT), new.get(key, _ABSENT), patch.get(key)
        if (
            isinstance(before, Mapping)
            and isinstance(after, Mapping)
            and isinstance(change, Mapping)
            and not _WHOLE_VALUE_DIRECTIVES & change.keys()
        ):
            _fields(operations, pointer, before, after, change)
        elif not _items(operations, pointer, key, before, after, change):
            _value(operations, pointer, before, after)


def _items(operations: list[dict[str, Any]], path: str, field: str, old: Any, new: Any, patch: Any) -> bool:
    """A list merged by key whose items the merge changed in place, field by field; False (nothing
    written) when it is not one."""
    merge_key = MERGE_KEYS.get(field)
    if (
        merge_key is None
        or not isinstance(old, list)
        or not isinstance(new, list)
        or not isinstance(patch, list)
        or len(old) != len(new)
        or not all(isinstance(item, dict) for item in (*old, *new, *patch))
        or any(_WHOLE_VALUE_DIRECTIVES & item.keys() for item in patch)
        or [item.get(merge_key) for item in old] != [item.get(merge_key) for item in new]
    ):
        return False
    index = {item.get(merge_key): i for i, item in enumerate(old)}
    if any(item.get(merge_key) not in index for item in patch):
        return False
    for item in patch:
        at = index[item.get(merge_key)]
        # The item's key first: the index names the same item still.
        _fields(operations, _pointer(path, at), old[at], new[at], {merge_key: None, **item})
    return True


def _value(operations: list[dict[str, Any]], path: str, before: Any, after: Any) -> None:
    operations.append({"op": "test", "path": path, "value": None if before is _ABSENT else before})
    if after is _ABSENT:
        if before is not _ABSENT:
            operations.append({"op": "remove", "path": path})
    elif after != before:
        operations.append({"op": "add", "path": path, "value": after})


# --- a mark after this executor's own write -----------------------------------------------------------


class Written:
    """What a mark needs of the pod one of this executor's writes returned: its uid, the action id it
    carried, its labels and annotations, the types of its conditions in order, and whether the write
    created it."""

    __slots__ = ("action_id", "annotations", "condition_types", "created", "labels", "uid")

    def __init__(self, pod: Mapping[str, Any], *, created: bool = False) -> None:
        self.created = created
        metadata = pod.get("metadata") or {}
        self.uid: str | None = metadata.get("uid")
        self.labels: Mapping[str, Any] | None = metadata.get("labels")
        self.annotations: Mapping[str, Any] | None = metadata.get("annotations")
        self.action_id: str | None = (self.annotations or {}).get(ACTION_ID_ANNOTATION)
        conditions = (pod.get("status") or {}).get("conditions") or []
        self.condition_types: tuple[Any, ...] = tuple(c.get("type") for c in conditions)


# The parts of a mark's metadata patch ``mark_from_written`` writes key by key (maps of strings).
_MARK_MAPS = ("labels", "annotations")


def mark_from_written(
    written: Written,
    uid: str | None,
    condition: Mapping[str, Any] | None,
    action_id: str,
    patch: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]] | None:
    """A mark (its condition and action id, no other change) as a JSON patch of pods/status computed from
    the pod this executor's last write to it returned, instead of a write at the version the planner saw:
    the kubelet's status writes since (containers restarted, Ready) do not conflict with it. It tests the
    uid, that the action id is still the one that write left (no action applied since, this mark
    included) and the condition's place among the conditions. A pod this executor created gets the
    condition appended instead (the readiness gate's first value): its conditions are the kubelet's
    until a mark gives it this one, and no action but a mark (each moving the action id) writes it
    before the pod is first ready. The mark's metadata ``patch`` (labels and annotations: the lifecycle
    state a finished update moves to) goes key by key, each tested as the written pod had it, so a
    change to one since (by anyone) refuses the mark as the planner's version would. None when the
    written pod is another incarnation, an updated pod lacks the condition's type, or the patch writes
    something else (then the write at the planner's version, as before)."""
    if condition is None or written.uid is None or written.uid != uid or written.action_id is None:
        return None
    metadata = (patch or {}).get("metadata") or {}
    if set(patch or {}) - {"metadata"} or set(metadata) - set(_MARK_MAPS):
        return None
    kind = condition.get("type")
    key = "/metadata/annotations/" + ACTION_ID_ANNOTATION.replace("~", "~0").replace("/", "~1")
    operations: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": key, "value": written.action_id},
        {"op": "add", "path": key, "value": action_id},
    ]
    for part in _MARK_MAPS:
        changes = metadata.get(part)
        if not changes:
            continue
        current = written.labels if part == "labels" else written.annotations
        if not isinstance(changes, Mapping) or current is None or ACTION_ID_ANNOTATION in changes:
            return None  # a map the pod lacks would need adding whole: the way at the planner's version
        for name, value in changes.items():
            before = current.get(name, _ABSENT)
            _value(
                operations, _pointer(f"/metadata/{part}", name), before, _ABSENT if value is None else value
            )
    if kind in written.condition_types:
        at = written.condition_types.index(kind)
        operations.append({"op": "test", "path": f"/status/conditions/{at}/type", "value": kind})
        operations.append({"op": "replace", "path": f"/status/conditions/{at}", "value": dict(condition)})
    elif written.created:
        # Refused (422) while the pod has no conditions yet: then the way without this.
        operations.append({"op": "add", "path": "/status/conditions/-", "value": dict(condition)})
    else:
        return None
    return operations
