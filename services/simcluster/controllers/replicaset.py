"""The ReplicaSet controller (kube-controller-manager's replicaset controller): keeps ``spec.replicas``
active pods from the template, deletes the surplus in the order upstream does (unscheduled, pending,
not ready, ready for less time, more restarts, newer first), and reports ``replicas``,
``fullyLabeledReplicas``, ``readyReplicas``, ``availableReplicas`` (ready for ``minReadySeconds``) and
``observedGeneration``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from services.model.labels import matches

from ..errors import ApiError
from ..resources import PODS, REPLICASETS
from ..store import Key, Obj, WatchEvent, key_of
from .base import (
    Controller,
    available_in,
    controlled,
    event_owner_keys,
    iso,
    parse_time,
    pod_active,
    pod_condition,
    pod_from_template,
    pod_ready,
)

_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def deletion_order(pod: Obj) -> tuple[Any, ...]:
    """Sort key of controller.ActivePods: the pods to delete first come first."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    ready = pod_ready(pod)
    ready_since = parse_time((pod_condition(pod, "Ready") or {}).get("lastTransitionTime")) if ready else None
    restarts = max((c.get("restartCount", 0) for c in status.get("containerStatuses") or []), default=0)
    created = parse_time(pod["metadata"].get("creationTimestamp"))
    return (
        1 if spec.get("nodeName") else 0,
        _PHASE_RANK.get(status.get("phase", "Pending"), 0),
        1 if ready else 0,
        -(ready_since.timestamp() if ready_since else 0.0),
        -restarts,
        -(created.timestamp() if created else 0.0),
    )


def pods_to_delete(active: list[Obj], surplus: int) -> list[Obj]:
    return sorted(active, key=deletion_order)[: max(surplus, 0)]


def replica_set_status(rs: Obj, pods: list[Obj], now: datetime) -> tuple[dict[str, Any], float | None]:
    """The status calculateStatus writes, and when to look again (a pod becoming available)."""
    spec = rs.get("spec") or {}
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    active = [p for p in pods if pod_active(p)]
    fully_labeled = ready = available = 0
    recheck: float | None = None
    for pod in active:
        labels = pod["metadata"].get("labels") or {}
        if all(labels.get(k) == v for k, v in template_labels.items()):
            fully_labeled += 1
        if pod_ready(pod):
            ready += 1
            left = available_in(pod, min_ready, now)
            if left == 0.0:
                available += 1
            elif left is not None:
                recheck = left if recheck is None else min(recheck, left)
    status = dict(rs.get("status") or {})
    status.update(
        {
            "replicas": len(active),
            "fullyLabeledReplicas": fully_labeled,
            "readyReplicas": ready,
            "availableReplicas": available,
            "observedGeneration": rs["metadata"].get("generation", 1),
        }
    )
    return status, recheck


class ReplicaSetController(Controller):
    name = "replicaset-controller"
    watches = (REPLICASETS, PODS)

    def keys(self, event: WatchEvent) -> Iterable[Key]:
        if event.resource is REPLICASETS:
            return [key_of(event.obj)]
        return event_owner_keys(event, "ReplicaSet")

    async def sync(self, key: Key) -> float | None:
        rs = self.store.find(REPLICASETS, *key)
        if rs is None or rs["metadata"].get("deletionTimestamp"):
            return None
        selector = (rs.get("spec") or {}).get("selector")
        pods = [p for p in controlled(self.store, rs, PODS) if matches(selector, p["metadata"].get("labels"))]
        active = [p for p in pods if pod_active(p)]
        wanted = int((rs.get("spec") or {}).get("replicas", 1))
        failed: ApiError | None = None
        if len(active) < wanted:
            template = (rs.get("spec") or {}).get("template") or {}
            for _ in range(wanted - len(active)):
                try:
                    await self.create(PODS, key[0], pod_from_template(template, rs))
                except ApiError as exc:  # e.g. a webhook refused it: report, retry later
                    failed = exc
                    break
        elif len(active) > wanted:
            for pod in pods_to_delete(active, len(active) - wanted):
                self.delete_pod(pod)
        rs = self.store.find(REPLICASETS, *key)
        if rs is None:
            return None
        pods = [p for p in controlled(self.store, rs, PODS) if matches(selector, p["metadata"].get("labels"))]
        status, recheck = replica_set_status(rs, pods, self.now())
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "ReplicaFailure"]
        if failed is not None:
            conditions.append(
                {
                    "type": "ReplicaFailure",
                    "status": "True",
                    "reason": "FailedCreate",
                    "message": failed.message,
                    "lastTransitionTime": self._transition(rs, "ReplicaFailure"),
                }
            )
        if conditions:
            status["conditions"] = conditions
        else:
            status.pop("conditions", None)
        self.write_status(REPLICASETS, rs, status)
        if failed is not None:
            return 1.0
        return recheck

    def _transition(self, rs: Obj, type_: str) -> str:
        for condition in (rs.get("status") or {}).get("conditions") or []:
            if condition.get("type") == type_ and condition.get("lastTransitionTime"):
                return str(condition["lastTransitionTime"])
        return iso(self.now())
