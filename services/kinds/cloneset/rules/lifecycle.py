"""The pod lifecycle label and CloneSet lifecycle hooks, as OpenKruise moves them.

OpenKruise sources: ``apis/apps/pub/lifecycle.go`` (the hook API and the states),
``pkg/util/lifecycle/lifecycle_utils.go`` (``IsPodHooked``, ``IsPodAllHooked``, ``UpdatePodLifecycle``,
``UpdatePodLifecycleWithHandler``), ``pkg/util/podreadiness/pod_readiness_utils.go`` (the KruisePodReady
keys of ``markPodNotReady``) and ``pkg/controller/cloneset/sync/cloneset_update.go`` ``refreshPodState``.

Every state change is one patch of the label ``lifecycle.apps.kruise.io/state`` plus the annotation
``lifecycle.apps.kruise.io/timestamp``; a move to the state the pod already has is not written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from services.kinds.cloneset.rules.names import (
    KRUISE_POD_READY_CONDITION,
    LIFECYCLE_STATE_LABEL,
    LIFECYCLE_TIMESTAMP_ANNOTATION,
)

PREPARING_NORMAL = "PreparingNormal"
NORMAL = "Normal"
PREPARING_UPDATE = "PreparingUpdate"
UPDATING = "Updating"
UPDATED = "Updated"
PREPARING_DELETE = "PreparingDelete"
STATES = (PREPARING_NORMAL, NORMAL, PREPARING_UPDATE, UPDATING, UPDATED, PREPARING_DELETE)
# States in which a pod may count as available (OpenKruise's IsPodAvailable: empty or Normal only).
AVAILABLE_STATES = frozenset({"", NORMAL})

# KruisePodReady message keys (markPodNotReady), user agent "Lifecycle".
PRE_DELETE_KEY = "preDeleteHook"
PRE_UPDATE_KEY = "preUpdateHook"
USER_AGENT = "Lifecycle"


@dataclass(frozen=True, slots=True)
class Hook:
    labels: tuple[tuple[str, str], ...]  # labelsHandler, sorted by key
    finalizers: tuple[str, ...]  # finalizersHandler, in spec order
    mark_not_ready: bool


@dataclass(frozen=True, slots=True)
class Lifecycle:
    pre_delete: Hook | None
    in_place_update: Hook | None
    pre_normal: Hook | None


def _hook(raw: Any) -> Hook | None:
    if not isinstance(raw, dict):
        return None
    labels = raw.get("labelsHandler") or {}
    return Hook(
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        finalizers=tuple(str(f) for f in raw.get("finalizersHandler") or ()),
        mark_not_ready=bool(raw.get("markPodNotReady", False)),
    )


def read_lifecycle(raw: Any) -> Lifecycle | None:
    """``spec.lifecycle`` (already validated); None when the CloneSet has none."""
    if not isinstance(raw, dict):
        return None
    return Lifecycle(
        _hook(raw.get("preDelete")), _hook(raw.get("inPlaceUpdate")), _hook(raw.get("preNormal"))
    )


def hooked(hook: Hook | None, labels: dict[str, str], finalizers: tuple[str, ...] | list[str]) -> bool:
    """At least one of the hook's finalizers is on the pod, or one labelsHandler label has its value.
    A nil hook is never hooked."""
    if hook is None:
        return False
    return any(f in finalizers for f in hook.finalizers) or any(labels.get(k) == v for k, v in hook.labels)


def all_hooked(hook: Hook | None, labels: dict[str, str], finalizers: tuple[str, ...] | list[str]) -> bool:
    """Every finalizer present and every label equal (an empty hook is all-hooked). A nil hook never is."""
    if hook is None:
        return False
    return all(f in finalizers for f in hook.finalizers) and all(labels.get(k) == v for k, v in hook.labels)


def state_patch(state: str, now_text: str, handler: Hook | None = None) -> dict[str, Any]:
    """The metadata patch moving a pod to ``state``; with ``handler`` (an ``Updated`` pod chosen again)
    the inPlaceUpdate hook's labels and finalizers are put back in the same patch."""
    labels: dict[str, str | None] = {LIFECYCLE_STATE_LABEL: state}
    metadata: dict[str, Any] = {"labels": labels, "annotations": {LIFECYCLE_TIMESTAMP_ANNOTATION: now_text}}
    if handler is not None:
        labels.update(dict(handler.labels))
        if handler.finalizers:
            metadata["finalizers"] = list(handler.finalizers)
    return {"metadata": metadata}


def refreshed_state(
    state: str,
    lifecycle: Lifecycle | None,
    *,
    scheduled: bool,
    at_update_revision: bool,
    update_complete: bool,
    labels: dict[str, str],
    finalizers: tuple[str, ...] | list[str],
) -> str | None:
    """The state the per-pod refresh at the start of the update step moves a pod to; None = stays.

    - PreparingNormal -> Normal: without a preNormal hook once the pod is scheduled; with one once the pod
      is all-hooked by it (scheduled or not);
    - PreparingUpdate at the update revision (the template was rolled back while it waited) and Updating
      once its in-place update is complete -> Updated when ``spec.lifecycle`` is set and the pod is not
      all-hooked by inPlaceUpdate, else Normal;
    - Updated -> Normal when there is no inPlaceUpdate hook or the pod is all-hooked by it."""
    in_place = lifecycle.in_place_update if lifecycle is not None else None
    after_update = (
        UPDATED if lifecycle is not None and not all_hooked(in_place, labels, finalizers) else NORMAL
    )
    target: str | None = None
    if state == PREPARING_NORMAL:
        pre_normal = lifecycle.pre_normal if lifecycle is not None else None
        ready = scheduled if pre_normal is None else all_hooked(pre_normal, labels, finalizers)
        target = NORMAL if ready else None
    elif state == PREPARING_UPDATE:
        target = after_update if at_update_revision else None
    elif state == UPDATING:
        target = after_update if update_complete else None
    elif state == UPDATED:
        if in_place is None or all_hooked(in_place, labels, finalizers):
            target = NORMAL
    return None if target == state else target


def _messages(condition: dict[str, Any] | None) -> list[dict[str, str]]:
    if not condition or not isinstance(condition.get("message"), str) or not condition["message"]:
        return []
    try:
        parsed = json.loads(condition["message"])
    except ValueError:
        return []
    return [m for m in parsed if isinstance(m, dict)] if isinstance(parsed, list) else []


def _dump(messages: list[dict[str, str]]) -> str:
    ordered = sorted(messages, key=lambda m: (m.get("userAgent", ""), m.get("key", "")))
    return json.dumps(
        [{"userAgent": m.get("userAgent", ""), "key": m.get("key", "")} for m in ordered],
        separators=(",", ":"),
    )


def not_ready_key_added(condition: dict[str, Any] | None, key: str, now_text: str) -> dict[str, Any] | None:
    """The KruisePodReady condition with ``key`` added (status False); None when it already holds it."""
    messages = _messages(condition)
    if condition is not None and condition.get("status") != "True":
        if any(m.get("userAgent") == USER_AGENT and m.get("key") == key for m in messages):
            return None
    if not any(m.get("userAgent") == USER_AGENT and m.get("key") == key for m in messages):
        messages.append({"userAgent": USER_AGENT, "key": key})
    return {
        "type": KRUISE_POD_READY_CONDITION,
        "status": "False",
        "message": _dump(messages),
        "lastTransitionTime": now_text,
    }


def not_ready_key_removed(condition: dict[str, Any] | None, key: str, now_text: str) -> dict[str, Any] | None:
    """The KruisePodReady condition without ``key`` (True when no key is left); None when it has none."""
    if condition is None:
        return None
    messages = _messages(condition)
    kept = [m for m in messages if not (m.get("userAgent") == USER_AGENT and m.get("key") == key)]
    if len(kept) == len(messages):
        return None
    return {
        "type": KRUISE_POD_READY_CONDITION,
        "status": "True" if not kept else condition.get("status", "False"),
        "message": _dump(kept),
        "lastTransitionTime": now_text,
    }


def holding_hook(
    state: str,
    lifecycle: Lifecycle | None,
    *,
    at_update_revision: bool,
    labels: dict[str, str],
    finalizers: tuple[str, ...] | list[str],
) -> str | None:
    """The hook holding a pod in ``state`` right now (what it waits for), or None:
    PreparingDelete while hooked by preDelete; PreparingUpdate (not yet at the update revision) while
    hooked by inPlaceUpdate; Updated until all-hooked by inPlaceUpdate; PreparingNormal until all-hooked by
    preNormal."""
    if lifecycle is None:
        return None
    if state == PREPARING_DELETE and hooked(lifecycle.pre_delete, labels, finalizers):
        return "preDelete"
    if state == PREPARING_UPDATE and not at_update_revision:
        if hooked(lifecycle.in_place_update, labels, finalizers):
            return "inPlaceUpdate"
    if state == UPDATED and lifecycle.in_place_update is not None:
        if not all_hooked(lifecycle.in_place_update, labels, finalizers):
            return "inPlaceUpdate"
    if state == PREPARING_NORMAL and lifecycle.pre_normal is not None:
        if not all_hooked(lifecycle.pre_normal, labels, finalizers):
            return "preNormal"
    return None
