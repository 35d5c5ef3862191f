"""The injection events' destination: the Postgres event store, the truth. The webhook never publishes
on the bus: the auditor's relay publishes what is stored, as for every other service, and the bus
carries no event the store does not hold (docs/security-bus.md).

Appends use ``expected_version=None``: injections of one SidecarSet come from many admission calls,
several webhook replicas and any order, and none of them decides anything from the stream's state,
so there is nothing to check; the store gives each event the next version and its unique event id
drops repeats. The store is connected lazily, so the webhook starts and admits pods while it is down;
the recorder retries until it is back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from services.infra.store import EventStore
from services.model.events import Envelope, new_event
from services.webhook.recorder import PendingEvent

StoreFactory = Callable[[], Awaitable[EventStore]]


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
    """``EventSink`` appending to the event store (the relay publishes what was stored)."""

    def __init__(self, connect_store: StoreFactory) -> None:
        self._connect_store = connect_store
        self._store: EventStore | None = None

    async def append(self, event: PendingEvent) -> None:
        if self._store is None:
            self._store = await self._connect_store()
        await self._store.append([to_envelope(event)], expected_version=None)

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
