"""Where a rollout stands, from a plan's status: for RolloutStarted / RolloutCompleted events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.model.cloneset import desired_replicas
from services.model.cloneset_conversion import ConversionError, as_v1alpha1


@dataclass(frozen=True, slots=True)
class RolloutProgress:
    in_progress: bool  # pods still have to move, or updated pods are not all ready
    complete: bool  # currentRevision == updateRevision and every desired pod is updated and ready
    partition_reached: bool  # the pods the partition allows are updated and ready (a canary step is done)
    paused: bool


def rollout_progress(cloneset: dict[str, Any], status: dict[str, Any] | None) -> RolloutProgress:
    try:
        cloneset = as_v1alpha1(cloneset)
    except ConversionError:
        pass  # refused by the planner anyway: read it as it is
    spec = cloneset.get("spec") or {}
    replicas = desired_replicas(cloneset)
    paused = bool((spec.get("updateStrategy") or {}).get("paused", False))
    if not status:
        return RolloutProgress(False, False, False, paused)
    updated = status.get("updatedReplicas", 0)
    updated_ready = status.get("updatedReadyReplicas", 0)
    expected = status.get("expectedUpdatedReplicas", replicas)
    complete = (
        status.get("currentRevision") == status.get("updateRevision")
        and status.get("replicas") == replicas == updated == updated_ready
    )
    partition_reached = updated >= expected and updated_ready >= expected
    return RolloutProgress(not complete and not partition_reached, complete, partition_reached, paused)
