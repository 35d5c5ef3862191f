"""What the CloneSet and SidecarSet planners share (docs/services.md, "planner"), pure: the head of every
fold (``advance``), the envelopes of a round (``RoundPlanned`` then its decisions, ids derived from the
round; a round whose only decision is a status is one ``StatusPlanned`` carrying its ``RoundPlanned``), the
expectation timer and its ``RequeueDue``, and the key that says a partition step is new.

The two states differ in what they fold; both keep per-stream versions, the round's ``now``, the last
input's id and the timers not yet fired, which is all this module needs (``FoldedState``). Reading and
appending (store I/O) is the planner service's (services/planner/service.py).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import msgspec

from services.model.events import (
    Envelope,
    Event,
    PartitionStepPlanned,
    PodActionStarted,
    RequeueDue,
    RequeueScheduled,
    RoundPlanned,
    StatusPlanned,
    new_event,
)
from services.model.streams import derived_id

# A requested action not seen in effect after this long no longer blocks planning (OpenKruise's
# expectations time out the same way, so a lost watch event cannot wedge a workload).
EXPECTATION_TIMEOUT = timedelta(seconds=60)
# That timeout starts when the action took effect (its outcome), not when it was requested: an action no
# executor has reported on yet is still on its way (queued behind a thousand others, the API rate limit,
# a slow API server), and timing it out would make the planner request the same pods again. Only an
# action with no outcome at all for this long stops blocking (its message was dead-lettered unsettled).
UNREPORTED_TIMEOUT = 10 * EXPECTATION_TIMEOUT

_canonical = msgspec.json.Encoder(order="sorted")


class FoldedState(Protocol):
    versions: dict[str, int]
    now: datetime | None
    last_input_id: Any
    schedules: dict[str, datetime]  # RequeueScheduled id -> due, not yet fired

    @property
    def streams(self) -> tuple[str, str, str]: ...

    def through(self) -> dict[str, int]: ...

    def fold(self, envelope: Envelope) -> None: ...


def round_envelopes(
    state: FoldedState,
    stream: str,
    *,
    round_id: UUID,
    input_sha256: str,
    decisions: Sequence[Event],
    correlation_id: str | None,
    rules: int,
) -> list[Envelope]:
    """``RoundPlanned`` naming exactly what was folded and the planner ``rules`` that decided, then the
    decisions, numbered from the stream's version; decision ids are ``uuid5(round, index)`` so a re-run
    stores nothing twice (``rules`` is in no id). A round whose only decision is a status is one event:
    the ``StatusPlanned`` carrying its ``RoundPlanned`` (``round``), with the round's id and causation."""
    assert state.now is not None
    base = state.versions.get(stream, 0)
    planned = RoundPlanned(through=state.through(), now=state.now, input_sha256=input_sha256, rules=rules)
    head = functools.partial(
        new_event,
        stream=stream,
        stream_version=base + 1,
        occurred_at=state.now,
        event_id=round_id,
        causation_id=state.last_input_id,
        correlation_id=correlation_id,
    )
    if len(decisions) == 1 and isinstance(decisions[0], StatusPlanned):
        return [head(msgspec.structs.replace(decisions[0], round=planned))]
    envelopes = [head(planned)]
    for index, payload in enumerate(decisions):
        envelopes.append(
            new_event(
                payload,
                stream=stream,
                stream_version=base + 2 + index,
                occurred_at=state.now,
                event_id=derived_id("decision", round_id, index),
                causation_id=round_id,
                correlation_id=correlation_id,
            )
        )
    return envelopes


def round_of(payload: object) -> RoundPlanned | None:
    """The round an event records: a ``RoundPlanned``, or the one a status round's ``StatusPlanned``
    carries; None for any other event."""
    if isinstance(payload, RoundPlanned):
        return payload
    if isinstance(payload, StatusPlanned) and isinstance(payload.round, RoundPlanned):
        return payload.round
    return None


def with_round(payload: Event, planned: RoundPlanned) -> Event:
    """The event recording a round (``round_of`` is not None) with ``planned`` as its round."""
    if isinstance(payload, StatusPlanned):
        return msgspec.structs.replace(payload, round=planned)
    assert isinstance(payload, RoundPlanned)
    return planned


def split_round(envelopes: Sequence[Envelope]) -> list[Envelope]:
    """A round in the shape recorded before status rounds were one event: a status round's single
    ``StatusPlanned`` as ``RoundPlanned`` (the round's id, version and causation) then the status (id
    ``uuid5(round, 0)``, caused by the round, at the next version); any other round as it is. Verify
    compares a replayed round so with a round recorded so (old trails)."""
    if len(envelopes) != 1:
        return list(envelopes)
    (envelope,) = envelopes
    payload = envelope.payload
    if not isinstance(payload, StatusPlanned) or not isinstance(payload.round, RoundPlanned):
        return list(envelopes)
    planned = new_event(
        payload.round,
        stream=envelope.stream,
        stream_version=envelope.stream_version,
        occurred_at=envelope.occurred_at,
        event_id=envelope.event_id,
        causation_id=envelope.causation_id,
        correlation_id=envelope.correlation_id,
    )
    status = new_event(
        msgspec.structs.replace(payload, round=msgspec.UNSET),
        stream=envelope.stream,
        stream_version=envelope.stream_version + 1,
        occurred_at=envelope.occurred_at,
        event_id=derived_id("decision", envelope.event_id, 0),
        causation_id=envelope.event_id,
        correlation_id=envelope.correlation_id,
    )
    return [planned, status]


def expectation_timer(state: FoldedState, stream: str, due: datetime) -> Envelope | None:
    """A ``RequeueScheduled`` waking the workload at ``due`` when pending actions time out; None when a
    timer within a second of it is already set."""
    if any(abs((d - due).total_seconds()) < 1 for d in state.schedules.values()):
        return None
    return new_event(
        RequeueScheduled(due_at=due, reason="expectations"),
        stream=stream,
        stream_version=state.versions.get(stream, 0) + 1,
        occurred_at=state.now or due,
        event_id=derived_id("expectations", stream, due.isoformat()),
        causation_id=state.last_input_id,
    )


def requeue_due(
    state: FoldedState, stream: str, timer_event: Envelope, timer: RequeueScheduled
) -> Envelope | None:
    """The ``RequeueDue`` recording that a timer fired; None when it fired already (a redelivery)."""
    if str(timer_event.event_id) not in state.schedules:
        return None
    return new_event(
        RequeueDue(due_at=timer.due_at, scheduled_by=timer_event.event_id),
        stream=stream,
        stream_version=state.versions.get(stream, 0) + 1,
        occurred_at=timer.due_at,
        event_id=derived_id("requeue-due", timer_event.event_id),
        causation_id=timer_event.event_id,
        correlation_id=timer_event.correlation_id,
    )


def advance(state: FoldedState, envelope: Envelope, decisions: str) -> bool:
    """The common head of a fold: False for an event already folded; otherwise record its version and,
    for an input (any stream but the planner's own ``decisions``), move the round's ``now`` and cause.

    ``PodActionStarted`` (an executor took an action) sits in the actions stream but is no input: only
    its version is recorded (so ``through`` covers it), the round's clock and cause stay as they were, and
    nothing else folds it. Decisions are thus the same with or without it."""
    stream = envelope.stream
    if envelope.stream_version <= state.versions.get(stream, 0):
        return False
    state.versions[stream] = envelope.stream_version
    if stream != decisions and not isinstance(envelope.payload, PodActionStarted):
        state.last_input_id = envelope.event_id
        if state.now is None or envelope.occurred_at > state.now:
            state.now = envelope.occurred_at
    return True


def all_folded(folded: dict[str, int], announced: dict[str, int]) -> bool:
    """Every event the wake-ups announce (stream -> highest version) is folded already (``folded``: the
    state's versions): a round for them would read nothing new. False when nothing is announced."""
    return bool(announced) and all(folded.get(stream, 0) >= v for stream, v in announced.items())


StepKey = tuple[str, int, int, int, int, int]


def step_key(step: PartitionStepPlanned) -> StepKey:
    """What makes a partition step new: a step equal in all of these to the last one is not repeated."""
    return (
        step.rollout_id,
        step.partition,
        step.replicas,
        step.expected_updated,
        step.max_unavailable,
        step.max_surge,
    )


def encode_input(plan_input: Any) -> tuple[bytes, str]:
    """The decision input (a dict, or a Struct such as the CloneSet planner's ``PlanInput``) as canonical
    JSON (sorted keys, sorted fields) and its SHA-256, recorded on ``RoundPlanned``."""
    data = _canonical.encode(plan_input)
    return data, hashlib.sha256(data).hexdigest()
