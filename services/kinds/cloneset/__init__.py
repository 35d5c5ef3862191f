"""CloneSet (OpenKruise, apps.kruise.io/v1alpha1): driven by rollbook's planner and executor.

Streams (``KIND.stream``, unchanged since the first recorded trail): ``CloneSet/<ns>/<name>`` (the
planner's decisions), ``/observed`` (the watcher: the CloneSet, its pods and PVCs), ``/actions`` (executors)
and ``/shadow`` (docs/shadow.md). Its pod actions as the executor reads them: ``actions.py``. Its rules,
pure: ``rules/`` (``rules/decisions.py`` and the modules it uses)."""

from __future__ import annotations

from typing import Any

from services.kinds.base import Kind, Watched, Workload, own_name, owned_by
from services.kinds.cloneset.actions import ACTIONS
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
)
