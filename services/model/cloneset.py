"""CloneSet spec values every service resolves the same way (OpenKruise's defaults,
apis/apps/defaults/v1alpha1.go ``SetDefaultsCloneSet``)."""

from __future__ import annotations

from typing import Any

DEFAULT_REPLICAS = 1
RECREATE = "ReCreate"
IN_PLACE_IF_POSSIBLE = "InPlaceIfPossible"
IN_PLACE_ONLY = "InPlaceOnly"
# OnDelete: the new revision reaches a pod only when the pod is deleted (OpenKruise 1.9; admitted through
# v1beta1 there, also accepted in v1alpha1 input by rollbook: docs/plan.md).
ON_DELETE = "OnDelete"
UPDATE_TYPES = (RECREATE, IN_PLACE_IF_POSSIBLE, IN_PLACE_ONLY, ON_DELETE)
DEFAULT_MAX_UNAVAILABLE = "20%"
# The label naming a pod's instance, on the pod and on each of its PVCs (reused by its replacement).
INSTANCE_ID_LABEL = "apps.kruise.io/cloneset-instance-id"
# OpenKruise's record of a pod's in-place update (InPlaceUpdateState: revision, updateTimestamp, ...).
INPLACE_STATE_ANNOTATION = "apps.kruise.io/inplace-update-state"
# The name it had before, which OpenKruise still reads and removes on its next write.
INPLACE_STATE_ANNOTATION_OLD = "inplace-update-state"


def desired_replicas(cloneset: dict[str, Any] | None) -> int:
    """``spec.replicas``, with absent or ``null`` meaning the default 1 (as OpenKruise's defaulting webhook
    fills it). The one resolution used by the planner, its rollout events, the CLI and what-if."""
    spec = (cloneset or {}).get("spec") or {}
    replicas = spec.get("replicas") if isinstance(spec, dict) else None
    return DEFAULT_REPLICAS if replicas is None else int(replicas)
