"""Ids, correlation ids and annotations the services agree on (see docs/services.md, "Streams").

Stream names are the kinds' (services/kinds/base.py ``Kind.stream``, read through services/kinds/registry.py):
every stream of a workload is ``<Kind>/<namespace>/<name>[/<suffix>]``, and all of them are published with
the workload stream as partition key, so they share one bus partition (``workload_stream``).
"""

from __future__ import annotations

import uuid

ACTION_ID_ANNOTATION = "rollbook.io/action-id"  # the last pod action applied to an object
# The field manager of the executor's status writes (a StatusPlanned carried out): the API server names it
# in the workload's managedFields as the owner of the status fields it set, which is how the watcher tells
# rollbook's own status write from another controller's (services/watcher/objects.py ``own_status_write``).
# Any client may claim the name, so the watcher also checks the values against the stored StatusPlanned
# (``carried_plan``).
STATUS_FIELD_MANAGER = "rollbook-executor"
# The CloneSet API (OpenKruise); its streams and routing are services/kinds/cloneset.
CLONESET_GROUP = "apps.kruise.io"
CLONESET_VERSION = "v1alpha1"
CLONESET_PLURAL = "clonesets"

# uuid5 namespace of every deterministic event id rollbook derives.
ROLLBOOK_NAMESPACE = uuid.UUID("6f1c3a52-8d0e-4b7e-9a51-2f4c0e7d9b10")


def workload_stream(stream: str) -> str:
    """The workload stream (``<Kind>/<namespace>/<name>``) any of a workload's streams belongs to."""
    return "/".join(stream.split("/", 3)[:3])


def rollout_id(namespace: str, name: str, update_revision: str, sequence: int) -> str:
    """The correlation id of every event of one rollout: ``<namespace>/<name>@<revision>#<sequence>``, where
    ``sequence`` is the workload's rollout number (its RolloutStarted events so far, this one included; 0
    before the first). A rollback to an earlier revision and a second roll to the same revision get ids of
    their own. Folded from the log, never from a clock, so replay and verify reproduce it (docs/events.md,
    "Rollout ids")."""
    return f"{namespace}/{name}@{update_revision}{ROLLOUT_SEQUENCE_MARK}{sequence}"


def revision_correlation(namespace: str, name: str, revision: str) -> str:
    """The correlation id the watcher gives an observation: the revision it shows (``<ns>/<name>@<rev>``).
    The watcher does not fold the planner's record, so it names the revision, not the rollout."""
    return f"{namespace}/{name}@{revision}"


# Separates a rollout id's revision from its sequence. Kubernetes names never contain it.
ROLLOUT_SEQUENCE_MARK = "#"


def sequenced_rollout_id(rollout_id: str, sequence: int) -> str:
    """A rollout id recorded before rollouts were numbered (``<ns>/<name>@<revision>``) with the sequence it
    has in its stream; an id that has one is returned unchanged (services/model/upcasting.py)."""
    if ROLLOUT_SEQUENCE_MARK in rollout_id:
        return rollout_id
    return f"{rollout_id}{ROLLOUT_SEQUENCE_MARK}{sequence}"


def rollout_revision(rollout_id: str) -> str:
    """The revision a rollout id names (``...@<revision>#<sequence>`` -> ``<revision>``)."""
    return rollout_id.partition("@")[2].partition(ROLLOUT_SEQUENCE_MARK)[0]


def derived_id(*parts: object) -> uuid.UUID:
    """A deterministic event/action id: the same inputs give the same id in every process and re-run."""
    return uuid.uuid5(ROLLBOOK_NAMESPACE, "\x1f".join(str(p) for p in parts))
