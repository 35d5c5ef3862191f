"""What the planner reads from a pod: readiness, availability, revision, sort keys (semantics G-3, G-4, CS-11).

Each pod is read once into a ``PodView``; everything later works on views.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from services.planner.names import (
    DELETION_COST_ANNOTATION,
    INPLACE_GRACE_ANNOTATION,
    INPLACE_READY_CONDITION,
    INPLACE_STATE_ANNOTATION,
    INSTANCE_ID_LABEL,
    LIFECYCLE_STATE_LABEL,
    REVISION_LABEL,
    SPECIFIED_DELETE_LABEL,
)

_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}
# Lifecycle states in which a pod may count as available. rollbook has no lifecycle hooks and never writes
# the label; pods coming from OpenKruise keep theirs, and PreparingDelete/Updating/PreparingUpdate are busy.
_NORMAL_LIFECYCLE = {"", "Normal", "PreparingNormal"}
_NO_TIME = float("-inf")


def parse_time(value: Any) -> float | None:
    """RFC 3339 to epoch seconds; None when absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def format_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _deletion_cost(value: Any) -> int:
    # Kubernetes accepts only canonical int32 text: "+5" and "007" are malformed and count as 0.
    if not isinstance(value, str) or not value:
        return 0
    text = value[1:] if value.startswith("-") else value
    if not text.isdigit() or (len(text) > 1 and text[0] == "0") or text != value.lstrip("-"):
        return 0
    number = int(value)
    return number if -(2**31) <= number < 2**31 else 0


def _json_annotation(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


@dataclass(slots=True)
class PodView:
    obj: dict[str, Any]
    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    instance_id: str
    revision_hash: str  # the hash part of controller-revision-hash ('' when absent)
    node: str
    phase: str
    active: bool
    ready: bool
    ready_since: float | None  # lastTransitionTime of Ready=True
    inplace_ready: bool | None  # InPlaceUpdateReady condition; None when absent
    has_inplace_gate: bool
    lifecycle: str
    created: float | None
    restarts: int
    deletion_cost: int
    specified_delete: bool

    @classmethod
    def read(cls, pod: dict[str, Any]) -> PodView:
        metadata = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        labels = metadata.get("labels") or {}
        annotations = metadata.get("annotations") or {}
        phase = status.get("phase") or ""
        ready = False
        ready_since = None
        inplace_ready = None
        for condition in status.get("conditions") or ():
            kind = condition.get("type")
            if kind == "Ready":
                ready = condition.get("status") == "True"
                if ready:
                    ready_since = parse_time(condition.get("lastTransitionTime"))
            elif kind == INPLACE_READY_CONDITION:
                inplace_ready = condition.get("status") == "True"
        restarts = 0
        for container in status.get("containerStatuses") or ():
            restarts = max(restarts, int(container.get("restartCount") or 0))
        revision_label = labels.get(REVISION_LABEL, "")
        return cls(
            obj=pod,
            name=metadata.get("name", ""),
            labels=labels,
            annotations=annotations,
            instance_id=labels.get(INSTANCE_ID_LABEL, ""),
            revision_hash=revision_label.rsplit("-", 1)[-1],
            node=spec.get("nodeName") or "",
            phase=phase,
            active=phase not in ("Succeeded", "Failed") and not metadata.get("deletionTimestamp"),
            ready=ready,
            ready_since=ready_since,
            inplace_ready=inplace_ready,
            has_inplace_gate=any(
                g.get("conditionType") == INPLACE_READY_CONDITION for g in spec.get("readinessGates") or ()
            ),
            lifecycle=labels.get(LIFECYCLE_STATE_LABEL, ""),
            created=parse_time(metadata.get("creationTimestamp")),
            restarts=restarts,
            deletion_cost=_deletion_cost(annotations.get(DELETION_COST_ANNOTATION)),
            specified_delete=SPECIFIED_DELETE_LABEL in labels,
        )

    # --- readiness vocabulary -------------------------------------------------------------------------

    def available(self, min_ready_seconds: int, now: float) -> bool:
        """G-3: ready, and ready for longer than minReadySeconds (strictly)."""
        if not self.ready:
            return False
        if min_ready_seconds == 0:
            return True
        return self.ready_since is not None and self.ready_since + min_ready_seconds < now

    def cs_available(self, min_ready_seconds: int, now: float) -> bool:
        """CS-11: normal lifecycle, Running, available and InPlaceUpdateReady not False."""
        return (
            self.lifecycle in _NORMAL_LIFECYCLE
            and self.phase == "Running"
            and self.inplace_ready is not False
            and self.available(min_ready_seconds, now)
        )

    def counts_ready(self) -> bool:
        """CS-22 readyReplicas: Running, Ready and InPlaceUpdateReady not False."""
        return self.phase == "Running" and self.ready and self.inplace_ready is not False

    @property
    def pre_deleting(self) -> bool:
        return self.lifecycle == "PreparingDelete"

    @property
    def inplace_state(self) -> dict[str, Any] | None:
        return _json_annotation(self.annotations.get(INPLACE_STATE_ANNOTATION))

    @property
    def inplace_grace(self) -> dict[str, Any] | None:
        return _json_annotation(self.annotations.get(INPLACE_GRACE_ANNOTATION))

    # --- orderings ------------------------------------------------------------------------------------

    def _ready_recency(self) -> float:
        # Both ready: the one that became ready more recently first; a missing time counts as most recent.
        if not self.ready:
            return 0.0
        return -(self.ready_since if self.ready_since else float("inf"))

    def _newness(self) -> float:
        return -(self.created if self.created else float("inf"))

    def active_order_key(self) -> tuple[Any, ...]:
        """G-4 "least valuable first" (update candidates); the pod name breaks full ties (determinism)."""
        return (
            1 if self.node else 0,
            _PHASE_RANK.get(self.phase, 0),
            1 if self.ready else 0,
            self._ready_recency(),
            -self.restarts,
            self._newness(),
            self.name,
        )

    def scale_in_key(self, min_ready_seconds: int, now: float, spread_rank: int) -> tuple[Any, ...]:
        """CS-16 scale-in order: the first pods of this order are deleted first."""
        return (
            1 if self.node else 0,
            _PHASE_RANK.get(self.phase, 0),
            1 if self.cs_available(min_ready_seconds, now) else 0,
            1 if self.ready else 0,
            self.deletion_cost,
            -spread_rank,
            self._ready_recency(),
            -self.restarts,
            self._newness(),
            self.name,
        )

    def same_node_key(self, min_ready_seconds: int, now: float) -> tuple[Any, ...]:
        key = self.scale_in_key(min_ready_seconds, now, 0)
        return key[:5] + key[6:]


def container_statuses(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("name", ""): c for c in (pod.get("status") or {}).get("containerStatuses") or ()}


__all__ = ["PodView", "container_statuses", "format_time", "parse_time", "_NO_TIME"]
