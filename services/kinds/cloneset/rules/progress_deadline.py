"""The CloneSet's ``Progressing`` condition (``spec.progressDeadlineSeconds``), as OpenKruise computes it:
pkg/controller/cloneset/cloneset_status.go ``calculateProgressingStatus`` and
pkg/controller/cloneset/utils/cloneset_utils.go (``SetCloneSetCondition``, ``CloneSetDeadlineExceeded``).

Pure: the time comes in as ``now``. The first matching row decides:
1. available (currentRevision == updateRevision, replicas == updated == updatedAvailable == spec) ->
   True ``CloneSetAvailable``;
2. ``updateStrategy.paused`` -> True ``CloneSetPaused``;
3. a partition holds pods back and the pods it allows are updated and available -> True
   ``ProgressPartitionAvailable``;
4. the condition already says ``ProgressDeadlineExceeded``, or its ``lastUpdateTime`` +
   progressDeadlineSeconds is strictly before now -> False ``ProgressDeadlineExceeded``;
5. otherwise True ``CloneSetUpdated``.
Setting a (status, reason) the condition already has changes nothing (not even ``lastUpdateTime``): the
deadline runs from the moment the CloneSet left rows 1-3. Unset or 2147483647 removes the condition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

PROGRESSING = "Progressing"
AVAILABLE = "CloneSetAvailable"
PAUSED = "CloneSetPaused"
PARTITION_AVAILABLE = "ProgressPartitionAvailable"
DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
UPDATED = "CloneSetUpdated"
NO_DEADLINE = 2**31 - 1  # math.MaxInt32: "no deadline", as Deployments


@dataclass(frozen=True, slots=True)
class Progress:
    conditions: list[dict[str, Any]]
    requeue_after: int | None  # seconds until the deadline passes (row 5), else None


def _row(status: dict[str, Any], replicas: int, paused: bool) -> tuple[str, str, str] | None:
    updated_available = int(status.get("updatedAvailableReplicas") or 0)
    if (
        status.get("currentRevision") == status.get("updateRevision")
        and status.get("replicas") == replicas
        and status.get("updatedReplicas") == replicas
        and updated_available == replicas
    ):
        return ("True", AVAILABLE, "CloneSet is available")
    if paused:
        return ("True", PAUSED, "CloneSet is paused")
    expected = int(status.get("expectedUpdatedReplicas") or 0)
    if expected < replicas and expected <= updated_available:
        return ("True", PARTITION_AVAILABLE, "CloneSet has been paused due to partition ready")
    return None


def progressing(
    conditions: list[dict[str, Any]],
    status: dict[str, Any],
    *,
    deadline_seconds: int | None,
    replicas: int,
    paused: bool,
    now: float,
    now_text: str,
    parse_time: Any,
) -> Progress:
    """``conditions`` (the status's, previous ones carried over) with the Progressing condition set."""
    others = [c for c in conditions if c.get("type") != PROGRESSING]
    if deadline_seconds is None or deadline_seconds == NO_DEADLINE:
        return Progress(others, None)
    current = next((c for c in conditions if c.get("type") == PROGRESSING), None)
    wanted = _row(status, replicas, paused)
    if wanted is None:
        last_update = parse_time(current.get("lastUpdateTime")) if current else None
        exceeded = current is not None and (
            current.get("reason") == DEADLINE_EXCEEDED
            or (last_update is not None and last_update + deadline_seconds < now)
        )
        if exceeded:
            message = f"CloneSet revision {status.get('updateRevision')} has timed out progressing"
            wanted = ("False", DEADLINE_EXCEEDED, message)
        else:
            wanted = ("True", UPDATED, "CloneSet is progressing")
    condition_status, reason, message = wanted
    if current is not None and current.get("status") == condition_status and current.get("reason") == reason:
        result = conditions
        chosen = current
    else:
        since = now_text
        if current is not None and current.get("status") == condition_status:
            since = current.get("lastTransitionTime") or now_text
        chosen = {
            "type": PROGRESSING,
            "status": condition_status,
            "lastUpdateTime": now_text,
            "lastTransitionTime": since,
            "reason": reason,
            "message": message,
        }
        result = [*others, chosen]
    requeue = None
    if reason == UPDATED:
        last_update = parse_time(chosen.get("lastUpdateTime"))
        if last_update is not None:
            # Strictly past the deadline, as row 4 asks (OpenKruise adds a second to avoid clock skew).
            requeue = max(math.floor(last_update + deadline_seconds - now) + 1, 1)
    return Progress(result, requeue)


def exceeded(status: dict[str, Any] | None) -> dict[str, Any] | None:
    """The Progressing condition when it says ProgressDeadlineExceeded, else None."""
    for condition in (status or {}).get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == PROGRESSING:
            return condition if condition.get("reason") == DEADLINE_EXCEEDED else None
    return None
