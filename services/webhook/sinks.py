"""The injection events' destination: the Postgres event store first (the truth), then the bus.

Appends use ``expected_version=None``: injections of one SidecarSet come from many admission calls,
several webhook replicas and any order, and none of them decides anything from the stream's state,
so there is nothing to check; the store gives each event the next version and its unique event id
drops repeats. The stored envelope (with its final version) is then published on the bus for the
planner and the auditor (which skips it, already stored). Store and bus are connected lazily, so the
webhook starts and admits pods while either is down; the recorder retries until they are back.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from services.infra.bus import Bus
from services.infra.store import EventStore
from services.model.events import Envelope, new_event
from services.webhook.recorder import PendingEvent

StoreFactory = Callable[[], Awaitable[EventStore]]
BusFactory = Callable[[], Awaitable[Bus]]


def to_envelope(event: PendingEvent) -> Envelope:
    # stream_version 0: a placeholder, the store assigns the real one (expected_version=None).
    return new_event(
        event.payload,
        stream=event.stream,
        stream_version=0,
        occurred_at=event.occurred_at,
        event_id=event.event_id,
        correlation_id=event.correlation_id,
    )


class EventStoreSink:
    """``EventSink`` writing to the event store and, when a bus is given, publishing what was stored."""

    def __init__(self, connect_store: StoreFactory, connect_bus: BusFactory | None = None) -> None:
        self._connect_store = connect_store
        self._connect_bus = connect_bus
        self._store: EventStore | None = None
        self._bus: Bus | None = None
        # Stored but not yet published (a bus outage): publish these on the retry, don't append again.
        self._unpublished: dict[uuid.UUID, Envelope] = {}

    async def append(self, event: PendingEvent) -> None:
        envelope = self._unpublished.get(event.event_id)
        if envelope is None:
            if self._store is None:
                self._store = await self._connect_store()
            result = await self._store.append([to_envelope(event)], expected_version=None)
            if not result.events:
                return  # already stored by another replica or an earlier attempt, which published it
            envelope = result.events[0]
        if self._connect_bus is not None:
            self._unpublished[event.event_id] = envelope
            if self._bus is None:
                bus = await self._connect_bus()
                await bus.ensure_stream()
                self._bus = bus
            await self._bus.publish(envelope)
            del self._unpublished[event.event_id]

    async def close(self) -> None:
        if self._bus is not None:
            await self._bus.close()
        if self._store is not None:
            await self._store.close()
