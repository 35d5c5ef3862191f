"""What the CloneSet and SidecarSet planners share (docs/services.md, "planner"): catching a state up from
its streams, the envelopes of a round (``RoundPlanned`` then its decisions, ids derived from the round),
the expectation timer and its ``RequeueDue``, and the append with the decisions stream's expected version.

The two states differ in what they fold; both keep per-stream versions, the round's ``now``, the last
input's id and the timers not yet fired, which is all this module needs (``FoldedState``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from services.infra.metrics import EVENTS_APPENDED
from services.infra.store import EventStore
from services.model.events import (
    Envelope,
    Event,
    PodActionStarted,
    RequeueDue,
    RequeueScheduled,
    RoundPlanned,
    new_event,
)
from services.model.streams import derived_id


class FoldedState(Protocol):
    versions: dict[str, int]
    now: datetime | None
    last_input_id: Any
    schedules: dict[str, datetime]  # RequeueScheduled id -> due, not yet fired

    @property
    def streams(self) -> tuple[str, str, str]: ...

    def through(self) -> dict[str, int]: ...

    def fold(self, envelope: Envelope) -> None: ...


async def catch_up(store: EventStore, state: FoldedState) -> int:
    """Fold every event of the state's streams not folded yet; returns how many."""
    folded = 0
    for stream in state.streams:
        for stored in await store.read_stream(stream, state.versions.get(stream, 0) + 1):
            state.fold(stored.envelope)
            folded += 1
    return folded


async def append(store: EventStore, state: FoldedState, envelopes: list[Envelope]) -> None:
    """Append to one decisions stream at the version the state folded (single writer), then fold them."""
    stream = envelopes[0].stream
    result = await store.append(envelopes, expected_version=state.versions.get(stream, 0))
    for envelope in envelopes:
        state.fold(envelope)
    for envelope in result.events:
        EVENTS_APPENDED.labels("planner", envelope.type).inc()


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
    stores nothing twice (``rules`` is in no id)."""
    assert state.now is not None
    base = state.versions.get(stream, 0)
    envelopes = [
        new_event(
            RoundPlanned(through=state.through(), now=state.now, input_sha256=input_sha256, rules=rules),
            stream=stream,
            stream_version=base + 1,
            occurred_at=state.now,
            event_id=round_id,
            causation_id=state.last_input_id,
            correlation_id=correlation_id,
        )
    ]
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
