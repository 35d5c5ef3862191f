"""Names and annotations of SidecarSet in-place upgrades, shared by the watcher, the planner and the
executor (docs/sidecarset.md, "Upgrade in place").

A SidecarSet is cluster-scoped, so its streams have an empty namespace. It owns four streams (named by its
kind, services/kinds/sidecarset), all published with ``SidecarSet//<name>`` as partition key (one bus
partition per SidecarSet):

- ``SidecarSet//<name>``: ``SidecarInjected`` from the webhook (any replica, store-assigned versions);
- ``SidecarSet//<name>/observed``: ``ObjectObserved`` of the SidecarSet and of every pod whose
  ``kruise.io/sidecarset-injected-list`` names it (the watcher);
- ``SidecarSet//<name>/decisions``: the planner's rounds and decisions (single writer, expected_version);
  separate from the webhook's stream so injections never make a planner append conflict;
- ``SidecarSet//<name>/actions``: the executors' outcomes (store-assigned versions).
"""

from __future__ import annotations

from services.model.actions import ActionKind

SIDECARSET_KIND = "SidecarSet"
SIDECARSET_GROUP = "apps.kruise.io"
SIDECARSET_VERSION = "v1alpha1"
SIDECARSET_PLURAL = "sidecarsets"

# The in-place sidecar upgrade a planner asks for (PodActionRequested.action; its kind in the model).
UPDATE_SIDECAR_ACTION = ActionKind.UPDATE_SIDECAR_IN_PLACE
# The last SidecarSet action applied to a pod: a separate annotation from the CloneSet's
# rollbook.io/action-id, so a CloneSet controller and a SidecarSet controller patching the same pod never
# overwrite each other's expectation record.
SIDECARSET_ACTION_ANNOTATION = "rollbook.io/sidecarset-action-id"
# OpenKruise's record of an in-place sidecar upgrade in progress:
# {<sidecarset>: {"revision", "updateTimestamp", "lastContainerStatuses": {<container>: {"imageID"}}}}
# Not the CloneSet in-place state (apps.kruise.io/inplace-update-state,
# services/kinds/cloneset/rules/names.py): a per-SidecarSet map of the sidecar upgrade state, OpenKruise's
# SidecarSetUpgradeSpec.
SIDECARSET_INPLACE_STATE_ANNOTATION = "kruise.io/sidecarset-inplace-update-state"


def rollout_id(name: str, revision: str, sequence: int) -> str:
    """Correlation id of every event of one SidecarSet rollout (``/<name>@<revision name>#<sequence>``, the
    CloneSet form ``<ns>/<name>@<revision>#<sequence>`` with the empty namespace of a cluster-scoped
    object; ``sequence`` counts the SidecarSet's RolloutStarted events, services/model/streams.py)."""
    return f"/{name}@{revision}#{sequence}"


def revision_correlation(name: str, revision: str) -> str:
    """The correlation id the watcher gives an observation: the revision it shows, not a rollout."""
    return f"/{name}@{revision}"


def revision_name(name: str, sidecarset_hash: str) -> str:
    """The name a SidecarSet rollout targets: the SidecarSet hash (64 characters) cut to 10. Rollouts are
    keyed by the hash the pods must reach; the recorded revisions (``status.latestRevision``) have
    OpenKruise's ControllerRevision names (``services.kinds.sidecarset.rules.revisions``)."""
    return f"{name}-{sidecarset_hash[:10]}"
