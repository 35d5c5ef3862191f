"""StatefulSet (apps/v1): recorded, not driven (docs/kinds.md). Streams ``StatefulSet/<ns>/<name>/observed``
(the watcher: the StatefulSet, its ControllerRevisions and its pods) and ``/recorded`` (``rules.py``)."""

from __future__ import annotations

from typing import Any

from services.kinds.base import Kind, Watched, Workload, own_name, owned_by
from services.kinds.statefulset.rules import KIND as NAME
from services.kinds.statefulset.rules import REVISION_KIND, REVISION_LABEL, StatefulSetTrail


def route(kind: str, obj: dict[str, Any]) -> Workload | None:
    """The StatefulSet, and the ControllerRevisions and pods it controls."""
    if kind == NAME:
        return own_name(obj)
    if kind not in (REVISION_KIND, "Pod"):
        return None
    owner = owned_by(obj, NAME, "apps")
    return (own_name(obj)[0], owner) if owner is not None else None


KIND = Kind(
    name=NAME,
    driven=False,
    watches=(
        Watched(NAME, "apps", "list_stateful_set_for_all_namespaces"),
        Watched(REVISION_KIND, "apps", "list_controller_revision_for_all_namespaces"),
    ),
    route=route,
    revision_label=REVISION_LABEL,
    suffixes=("observed", "recorded"),
    trail=StatefulSetTrail,
)
