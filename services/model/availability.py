"""What "unavailable" means, once, for everything that counts it: the SQL view ``unavailability`` (and
``max_unavailable_exceeded`` on top of it), ``rollbook replay`` and ``rollbook what-if``.

A pod is **available** when it is not terminating (no deletionTimestamp), its ``Ready`` condition is
``True`` and its ``InPlaceUpdateReady`` condition is not ``False`` (an in-place update marks the pod
not-ready through that readiness gate before the kubelet's Ready catches up). The number of unavailable
pods of a workload is ``max(spec.replicas - available pods, 0)``: a missing pod counts as unavailable and a
surplus pod (surge) makes up for one that is not ready, which is how maxUnavailable is budgeted
(OpenKruise allows ``maxUnavailable + pods - replicas`` pods not available). Counting the pods that exist
and are not available instead would count a recreated pod twice (the old one terminating and its
replacement starting) and disagree with the views.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

READY_CONDITION = "Ready"
INPLACE_READY_CONDITION = "InPlaceUpdateReady"


def _condition(pod: Mapping[str, Any], kind: str) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def pod_available(pod: Mapping[str, Any]) -> bool:
    """Not terminating, Ready=True and InPlaceUpdateReady not False."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return _condition(pod, READY_CONDITION) == "True" and _condition(pod, INPLACE_READY_CONDITION) != "False"


def unavailable(replicas: int, pods: Iterable[Mapping[str, Any]]) -> int:
    """How many of the ``replicas`` wanted pods are not available right now."""
    return max(replicas - sum(1 for pod in pods if pod_available(pod)), 0)


def revision_hash(revision: str | None) -> str:
    """The hash part of a revision name or of a pod's controller-revision-hash label: the label may hold
    the full name (``sample-7656fc4998``) or the hash alone, so compare these, never the raw strings."""
    return (revision or "").rpartition("-")[2]
