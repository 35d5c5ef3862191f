"""SidecarSet (OpenKruise, apps.kruise.io/v1alpha1, cluster-scoped): driven by rollbook.

Streams (services/model/sidecarset_streams.py): ``SidecarSet//<name>`` (the webhook's injections),
``/observed``, ``/decisions``, ``/actions``. Its pods are routed by the injected-list annotation, which
needs what the watcher knows of every SidecarSet: services/watcher/sidecarsets.py, not ``route``."""

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
