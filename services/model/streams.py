"""Stream names, ids and annotations the services agree on (see docs/services.md, "Streams").

One CloneSet ``<ns>/<name>`` owns three event streams, each with a single kind of writer:

- ``CloneSet/<ns>/<name>/observed``: ObjectObserved of the CloneSet, its pods and PVCs (the watcher);
- ``CloneSet/<ns>/<name>``: the planner's rounds and decisions (one planner, expected_version);
- ``CloneSet/<ns>/<name>/actions``: the executors' outcomes (any executor, store-assigned versions).

A CloneSet in shadow mode (docs/shadow.md) has a fourth, ``CloneSet/<ns>/<name>/shadow`` (the planner):
what its real controller did and what rollbook would have done.

All three are published with the workload stream as partition key, so they share one bus partition.
"""

from __future__ import annotations

import uuid

ACTION_ID_ANNOTATION = "rollbook.io/action-id"  # the last pod action applied to an object
WORKLOAD_KIND = "CloneSet"
CLONESET_GROUP = "apps.kruise.io"
CLONESET_VERSION = "v1alpha1"
CLONESET_PLURAL = "clonesets"

# uuid5 namespace of every deterministic event id rollbook derives.
ROLLBOOK_NAMESPACE = uuid.UUID("6f1c3a52-8d0e-4b7e-9a51-2f4c0e7d9b10")


def decisions_stream(namespace: str, name: str) -> str:
    return f"{WORKLOAD_KIND}/{namespace}/{name}"


def observed_stream(namespace: str, name: str) -> str:
    return f"{WORKLOAD_KIND}/{namespace}/{name}/observed"


def actions_stream(namespace: str, name: str) -> str:
    return f"{WORKLOAD_KIND}/{namespace}/{name}/actions"


def shadow_stream(namespace: str, name: str) -> str:
    """A CloneSet rollbook observes but does not drive: the pod actions observed, the rollouts observed and
    what rollbook would have done (the planner, in shadow mode; docs/shadow.md)."""
    return f"{WORKLOAD_KIND}/{namespace}/{name}/shadow"


def workload_stream(stream: str) -> str:
    """The workload (decisions) stream any of the three streams belongs to."""
    return "/".join(stream.split("/", 3)[:3])


def workload_of(stream: str) -> tuple[str, str]:
    """(namespace, name) of the workload a stream belongs to."""
    parts = stream.split("/", 3)
    if len(parts) < 3 or parts[0] != WORKLOAD_KIND:
        raise ValueError(f"not a {WORKLOAD_KIND} stream: {stream!r}")
    return parts[1], parts[2]


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
