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
