"""SidecarSet (OpenKruise, apps.kruise.io/v1alpha1, cluster-scoped): driven by rollbook.

Streams (``KIND.stream`` with the empty namespace): ``SidecarSet//<name>`` (the webhook's injections),
``/observed``, ``/decisions`` (the planner's), ``/actions``. Its pod action as the executor reads it:
``actions.py``; its rules, pure: ``rules/`` (``rules/decisions.py`` and the modules it uses). Its pods
are routed by the injected-list annotation, which needs what the watcher knows of every SidecarSet:
services/watcher/sidecarsets.py, not ``route``."""

from __future__ import annotations

from services.kinds.base import Kind, Watched
from services.kinds.sidecarset.actions import ACTIONS
from services.model.sidecarset_streams import (
    SIDECARSET_GROUP,
    SIDECARSET_KIND,
    SIDECARSET_PLURAL,
    SIDECARSET_VERSION,
)

KIND = Kind(
    name=SIDECARSET_KIND,
    driven=True,
    cluster_scoped=True,
    watches=(
        Watched(
            SIDECARSET_KIND, "custom", SIDECARSET_PLURAL, SIDECARSET_GROUP, SIDECARSET_VERSION, optional=True
        ),
    ),
    actions=ACTIONS,
    decisions="decisions",
    suffixes=("", "observed", "decisions", "actions"),
)


def sidecarset_of(stream: str) -> str | None:
    """The SidecarSet any of its streams belongs to (its injections stream too); None for other streams."""
    workload = KIND.workload_of(stream)
    return None if workload is None else workload[1]
