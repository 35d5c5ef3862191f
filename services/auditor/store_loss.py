"""Which events a failover lost from the store can go back, from the bus, as themselves; and the record
of the loss (what came back, and what did not, by name).

An asynchronous standby promoted without the old primary's last commits lacks events the relay had
already published (services/auditor/bus_loss.py ``store_divergence`` names them). The bus still holds
their bodies as published. A lost event goes back into the store as the original event (its id, stream,
stream version, type, payload and times) only where it fits the record as it is now:

- its id is not stored anywhere (else it is back already: a service stored it again at its own place,
  ids being derived from what they record);
- its stream is at the version right before it, so its slot is free;
- the bus still holds its body (not gone with the bus, nor sent by reference to the store's copy), as the
  relay published it: the very bytes, on the same subject, at the sequence its (not duplicate) publish
  was stored at;
- every lost event before it (by position) went back, or is stored again at its own place;
- the loss does not reach back to the oldest event the relay checked (else earlier ones, which it no
  longer remembers, may be lost too).

The last rule keeps the record one history: an event was appended on everything committed before it, in
any stream (a planner's round names the versions of the observations it folded), so once one lost event
cannot go back (a service rebuilt from the store and appended another event at its version: the watcher
relists), none after it may: they may rest on it. Decided in position order.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.auditor.bus_loss import Sent
from services.kinds.registry import CLONESET
from services.model.events import (
    STORE_LOSS_STREAM,
    Envelope,
    PodActionRequested,
    PodActionSucceeded,
    StoreLossDetected,
    new_event,
)
from services.model.streams import ROLLBOOK_NAMESPACE, workload_stream

RECOVERABLE = "recoverable"
STORED = "stored again"  # its id is stored: not lost after all
SLOT_TAKEN = "its stream version is held by another event now"
AFTER_UNRECOVERED = "an earlier lost event could not go back"
GAP = "an earlier version of its stream is missing"
NO_BODY = "the bus no longer holds its body"
# The message at the sequence the relay noted is not the one it published (other identities may publish on
# some subjects of the stream, with any id), or its publish was a duplicate of an earlier message.
NOT_RELAYS = "the bus's copy is not known to be the relay's"
# Even the oldest published event the relay checked is gone: earlier ones may be lost too, unnamed, and any
# lost event it knows of may rest on them.
BEYOND_MEMORY = "the loss extends beyond the relay's memory"
UNRECOVERABLE = (SLOT_TAKEN, AFTER_UNRECOVERED, GAP, NO_BODY, NOT_RELAYS, BEYOND_MEMORY)


@dataclass(frozen=True)
class Lost:
    """A published event the store lost: where it was stored, what the relay remembers of it, and its body
    as the bus holds it (None: the bus does not)."""

    position: int
    sent: Sent
    body: Envelope | None
    missing: str = NO_BODY  # why ``body`` is None: NO_BODY or NOT_RELAYS


@dataclass(frozen=True)
class StoreNow:
    """What the store holds now, for the lost events' streams: each stream's version, the event id at
    each lost event's (stream, version), and which of the lost ids are stored anywhere."""

    versions: Mapping[str, int]
    slots: Mapping[tuple[str, int], uuid.UUID]
    stored_ids: frozenset[uuid.UUID]


def recovery(lost: Sequence[Lost], now: StoreNow, beyond_memory: bool = False) -> list[tuple[Lost, str]]:
    """Each lost event with its verdict (``RECOVERABLE``, ``STORED`` or one of ``UNRECOVERABLE``), in
    position order: the order to append the recoverable ones in. ``beyond_memory``: the loss may start
    before the oldest event the relay remembers (``BEYOND_MEMORY``), so none goes back."""
    versions = dict(now.versions)
    blocked = False  # a lost event could not go back: none after it may
    verdicts: list[tuple[Lost, str]] = []
    for event in sorted(lost, key=lambda e: e.position):
        stream, version = event.sent.stream, event.sent.stream_version
        if event.sent.event_id in now.stored_ids:
            verdict = STORED
            # Stored again elsewhere than its own place: what came after it rested on another history.
            blocked = blocked or now.slots.get((stream, version)) != event.sent.event_id
        elif beyond_memory:
            verdict = BEYOND_MEMORY
        elif blocked:
            verdict = AFTER_UNRECOVERED
        elif event.body is None:
            verdict = event.missing
        elif now.slots.get((stream, version), event.sent.event_id) != event.sent.event_id:
            verdict = SLOT_TAKEN
        elif versions.get(stream, 0) >= version:
            verdict = SLOT_TAKEN  # held, by an event not read (the slot map names the lost ones' only)
        elif versions.get(stream, 0) != version - 1:
            verdict = GAP
        else:
            verdict = RECOVERABLE
            versions[stream] = version
        if verdict in UNRECOVERABLE:
            blocked = True
        verdicts.append((event, verdict))
    return verdicts


def _rollout(event: Lost) -> str | None:
    if event.body is None:
        return None
    rollout = getattr(event.body.payload, "rollout_id", None)
    return rollout if isinstance(rollout, str) else event.body.correlation_id


def _named(event: Lost) -> dict[str, Any]:
    return {
        "event_id": str(event.sent.event_id),
        "stream": event.sent.stream,
        "version": event.sent.stream_version,
        "type": event.sent.type,
        "rollout_id": _rollout(event),
        "position_before": event.position,
    }


def applied_actions(
    unrecoverable: Iterable[Lost], requests: Mapping[str, PodActionRequested]
) -> list[dict[str, Any]]:
    """The pod actions carried out whose success the store lost for good: each lost
    ``PodActionSucceeded``'s action, with its pod from its request (``requests``, by action id: the
    store's and the lost events'), when known."""
    found = []
    for event in unrecoverable:
        payload = event.body.payload if event.body is not None else None
        if not isinstance(payload, PodActionSucceeded):
            continue
        request = requests.get(payload.action_id)
        found.append(
            {
                "action_id": payload.action_id,
                "action": request.action if request is not None else None,
                "pod": request.target if request is not None else None,
                "pod_uid": payload.pod_uid,
                "rollout_id": _rollout(event),
                "event_id": str(event.sent.event_id),
            }
        )
    return found


def loss_stream(workload: str) -> str:
    """Where the record of a workload's loss goes: a CloneSet's actions stream (store-assigned versions,
    which its planner folds, to report it as a status condition), else ``Audit//store-loss``."""
    parts = workload.split("/")
    if len(parts) == 3 and parts[0] == CLONESET.name:
        return CLONESET.actions_stream(parts[1], parts[2])
    return STORE_LOSS_STREAM


def loss_records(
    verdicts: Sequence[tuple[Lost, str]],
    positions: Mapping[uuid.UUID, int],
    requests: Mapping[str, PodActionRequested],
    detected_at: datetime,
) -> list[Envelope]:
    """The ``StoreLossDetected`` records to store for ``verdicts``, one per workload that lost events
    (``positions``: where each recovered event is stored now); none when nothing was lost after all. Each
    id derives from the workload and its lost events, so auditors that find the same loss record it once."""
    by_workload: dict[str, list[tuple[Lost, str]]] = {}
    for event, verdict in verdicts:
        if verdict != STORED:
            by_workload.setdefault(workload_stream(event.sent.stream), []).append((event, verdict))
    records = []
    for workload, lost in sorted(by_workload.items()):
        unrecoverable = [(event, verdict) for event, verdict in lost if verdict in UNRECOVERABLE]
        record = StoreLossDetected(
            detected_at=detected_at,
            recovered=[
                {**_named(event), "position": positions.get(event.sent.event_id)}
                for event, verdict in lost
                if verdict == RECOVERABLE
            ],
            unrecoverable=[{**_named(event), "reason": verdict} for event, verdict in unrecoverable],
            actions_applied=applied_actions((event for event, _ in unrecoverable), requests),
            workloads=[workload],
        )
        lost_ids = ",".join(sorted(str(event.sent.event_id) for event, _ in lost))
        records.append(
            new_event(
                record,
                stream=loss_stream(workload),
                stream_version=0,  # the store gives it the next version
                occurred_at=detected_at,
                event_id=uuid.uuid5(ROLLBOOK_NAMESPACE, f"store-loss:{workload}:{lost_ids}"),
            )
        )
    return records
