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


def rollout_id(namespace: str, name: str, update_revision: str) -> str:
    """The correlation id of every event of one rollout."""
    return f"{namespace}/{name}@{update_revision}"


def derived_id(*parts: object) -> uuid.UUID:
    """A deterministic event/action id: the same inputs give the same id in every process and re-run."""
    return uuid.uuid5(ROLLBOOK_NAMESPACE, "\x1f".join(str(p) for p in parts))
