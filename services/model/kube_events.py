"""Kubernetes Events (events.k8s.io/v1) for CloneSets and SidecarSets, pure: which of the planner's decisions
an operator sees in ``kubectl describe``, the Event that says it, and how often one is written.

The planner decides (its decision events: a rollout started, a batch of updates planned, paused, finished,
a spec rejected, the progress deadline passed); the executor writes the Event each one means
(services/executor/kube_events.py), as it writes every other decision. No clock of the planner's is
involved: an Event's time is its decision's ``occurred_at``, its name derives from the decision's id, so a
redelivered decision writes the same Event (409, nothing twice).

Rate limit and dedup, as kubectl's event series: per object and reason, at most one write per
``interval`` seconds. A repeat within it is counted, not written; the next write after it updates the
existing Event's ``series`` (count, lastObservedTime) when the note is the same, or writes a new Event when
it says something else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.model.events import (
    Envelope,
    PartitionStepPlanned,
    RolloutCompleted,
    RolloutPaused,
    RolloutProgressDeadlineExceeded,
    RolloutStarted,
    SpecRejected,
)
from services.model.streams import derived_id

EVENTS_GROUP, EVENTS_VERSION = "events.k8s.io", "v1"
REPORTING_CONTROLLER = "rollbook.io/rollbook"
# The decision types that mean an Event (the executor's events consumer takes exactly these).
EVENT_DECISION_TYPES = (
    "RolloutStarted",
    "PartitionStepPlanned",
    "RolloutPaused",
    "RolloutCompleted",
    "SpecRejected",
    "RolloutProgressDeadlineExceeded",
)
# A cluster-scoped object's (a SidecarSet's) Events go to this namespace, as Kubernetes' own recorders do.
CLUSTER_SCOPED_EVENT_NAMESPACE = "default"


@dataclass(frozen=True)
class Regarding:
    kind: str  # CloneSet or SidecarSet
    namespace: str  # "" for a SidecarSet
    name: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.name)


@dataclass(frozen=True)
class EventIntent:
    """One Event a decision means."""

    regarding: Regarding
    reason: str
    note: str
    type: str  # Normal or Warning
    action: str
    name: str  # the Event object's name (from the decision's id)
    at: datetime


def intent_of(envelope: Envelope, regarding: Regarding | None) -> EventIntent | None:
    """The Event a decision means, or None (not one an operator is told about, or ``regarding`` is None:
    not a decision of a workload; the executor names it from the decisions stream through the kinds'
    registry)."""
    if regarding is None:
        return None
    payload = envelope.payload
    said: tuple[str, str, str, str] | None = None  # reason, note, type, action
    if isinstance(payload, RolloutStarted):
        what = (
            f"{payload.from_revision} -> {payload.to_revision}"
            if payload.from_revision
            else payload.to_revision
        )
        strategy = str((payload.strategy or {}).get("type") or "ReCreate")
        said = (
            "RolloutStarted",
            f"rollout {payload.rollout_id} started: {what} ({strategy})",
            "Normal",
            "Rollout",
        )
    elif isinstance(payload, PartitionStepPlanned):
        said = (
            "BatchPlanned",
            f"rollout {payload.rollout_id}: {payload.expected_updated} of {payload.replicas} pods to update"
            f" (partition {payload.partition}, maxUnavailable {payload.max_unavailable},"
            f" maxSurge {payload.max_surge})",
            "Normal",
            "Rollout",
        )
    elif isinstance(payload, RolloutPaused):
        said = (
            "RolloutPaused",
            f"rollout {payload.rollout_id} paused: {payload.reason}",
            "Normal",
            "Rollout",
        )
    elif isinstance(payload, RolloutCompleted):
        if payload.outcome == "succeeded":
            said = (
                "RolloutFinished",
                f"rollout {payload.rollout_id} finished at {payload.revision}",
                "Normal",
                "Rollout",
            )
        else:
            said = (
                "RolloutEnded",
                f"rollout {payload.rollout_id} {payload.outcome} (now at {payload.revision})",
                "Warning" if payload.outcome == "failed" else "Normal",
                "Rollout",
            )
    elif isinstance(payload, SpecRejected):
        generation = f" (generation {payload.generation})" if payload.generation is not None else ""
        said = (
            "SpecRejected",
            f"spec rejected{generation}: {payload.field}: {payload.reason}",
            "Warning",
            "Plan",
        )
    elif isinstance(payload, RolloutProgressDeadlineExceeded):
        said = (
            "ProgressDeadlineExceeded",
            f"rollout {payload.rollout_id or '-'} has not finished within progressDeadlineSeconds"
            f" ({payload.progress_deadline_seconds} s, progressing since {payload.progressing_since})",
            "Warning",
            "Rollout",
        )
    if said is None:
        return None
    reason, note, type_, action = said
    name = f"{regarding.name}.{derived_id('kube-event', envelope.event_id).hex[:16]}"
    return EventIntent(regarding, reason, note[:1024], type_, action, name, envelope.occurred_at)


@dataclass(frozen=True)
class Create:
    intent: EventIntent


@dataclass(frozen=True)
class UpdateSeries:
    """The existing Event ``name`` now stands for ``count`` occurrences, the last at ``last``."""

    namespace: str
    name: str
    count: int
    last: datetime


@dataclass
class _Series:
    name: str
    note: str
    count: int
    written_count: int
    written_at: datetime
    last: datetime


@dataclass
class EventLimiter:
    """Per object and reason: one write per ``interval`` seconds, repeats counted into the Event's series."""

    interval: float
    series: dict[tuple[tuple[str, str, str], str], _Series] = field(default_factory=dict)

    def offer(self, intent: EventIntent) -> Create | UpdateSeries | None:
        key = (intent.regarding.key, intent.reason)
        current = self.series.get(key)
        if current is not None and (intent.at - current.written_at).total_seconds() < self.interval:
            current.count += 1  # within the window: counted, written with the next write after it
            current.last = max(current.last, intent.at)
            return None
        if current is not None and current.note == intent.note:
            current.count += 1
            current.last = max(current.last, intent.at)
            current.written_at, current.written_count = intent.at, current.count
            return UpdateSeries(event_namespace(intent.regarding), current.name, current.count, current.last)
        self.series[key] = _Series(intent.name, intent.note, 1, 1, intent.at, intent.at)
        return Create(intent)


def event_namespace(regarding: Regarding) -> str:
    return regarding.namespace or CLUSTER_SCOPED_EVENT_NAMESPACE


def micro_time(moment: datetime) -> str:
    """A MicroTime as the API writes it (RFC 3339, microseconds, Z)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_body(intent: EventIntent, uid: str | None, api_version: str, instance: str) -> dict[str, Any]:
    """The events.k8s.io/v1 Event object for ``intent`` (``uid``: the regarded object's, if known)."""
    regarding: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": intent.regarding.kind,
        "name": intent.regarding.name,
    }
    if intent.regarding.namespace:
        regarding["namespace"] = intent.regarding.namespace
    if uid:
        regarding["uid"] = uid
    at = micro_time(intent.at)
    seconds = intent.at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": f"{EVENTS_GROUP}/{EVENTS_VERSION}",
        "kind": "Event",
        "metadata": {"name": intent.name, "namespace": event_namespace(intent.regarding)},
        "eventTime": at,
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance[:128],
        "action": intent.action,
        "reason": intent.reason,
        "regarding": regarding,
        "note": intent.note,
        "type": intent.type,
        # what kubectl describe of older clients reads (core/v1 count, firstTimestamp, lastTimestamp)
        "deprecatedCount": 1,
        "deprecatedFirstTimestamp": seconds,
        "deprecatedLastTimestamp": seconds,
    }


def series_patch(update: UpdateSeries) -> dict[str, Any]:
    return {
        "series": {"count": update.count, "lastObservedTime": micro_time(update.last)},
        "deprecatedCount": update.count,
        "deprecatedLastTimestamp": update.last.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
