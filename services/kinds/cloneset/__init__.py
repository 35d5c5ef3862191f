"""CloneSet (OpenKruise, apps.kruise.io/v1alpha1): driven by rollbook's planner and executor.

Streams (``KIND.stream``, unchanged since the first recorded trail): ``CloneSet/<ns>/<name>`` (the
planner's decisions), ``/observed`` (the watcher: the CloneSet, its pods and PVCs), ``/actions`` (executors)
and ``/shadow`` (docs/shadow.md). Its pod actions as the executor reads them: ``actions.py``. Its rules,
pure: ``rules/`` (``rules/decisions.py`` and the modules it uses)."""

from __future__ import annotations

from typing import Any

from services.kinds.base import Kind, Watched, Workload, own_name, owned_by
from services.kinds.cloneset.actions import ACTIONS
from services.kinds.cloneset.rules.names import REJECTED_CONDITION
from services.model.streams import CLONESET_GROUP, CLONESET_PLURAL, CLONESET_VERSION

NAME = "CloneSet"

REVISION_LABEL = "controller-revision-hash"


def route(kind: str, obj: dict[str, Any]) -> Workload | None:
    """The CloneSet itself, and the pods and PVCs a CloneSet controls."""
    if kind == NAME:
        return own_name(obj)
    if kind not in ("Pod", "PersistentVolumeClaim"):
        return None
    owner = owned_by(obj, NAME, CLONESET_GROUP)
    return (own_name(obj)[0], owner) if owner is not None else None


# What rules/status.py counts from the pods: the rules read only revisions, collisionCount and conditions
# back from the observed status (tests/planner/test_properties.py).
POD_COUNTS = frozenset(
    {
        "replicas",
        "readyReplicas",
        "availableReplicas",
        "updatedReplicas",
        "updatedReadyReplicas",
        "updatedAvailableReplicas",
    }
)


def pod_counts(obj: dict[str, Any]) -> frozenset[str]:
    """``POD_COUNTS``, but none while the spec is rejected: the planner then reports the observed status
    back as it is, counts included (rules/plan.py ``_rejected``)."""
    conditions = (obj.get("status") or {}).get("conditions") or ()
    if any(c.get("type") == REJECTED_CONDITION and c.get("status") == "True" for c in conditions):
        return frozenset()
    return POD_COUNTS


KIND = Kind(
    name=NAME,
    driven=True,
    watches=(
        Watched(NAME, "custom", CLONESET_PLURAL, CLONESET_GROUP, CLONESET_VERSION),
        Watched("PersistentVolumeClaim", "core", "list_persistent_volume_claim_for_all_namespaces"),
    ),
    route=route,
    revision_label=REVISION_LABEL,
    actions=ACTIONS,
    decisions="",
    suffixes=("", "observed", "actions", "shadow"),
    pod_counts=pod_counts,
)
