"""Group commit: events that many concurrent tasks append to one stream, written as one append.

Writers of a store-versioned stream (``expected_version=None``) that append one event each at the same
time race for the same next version; all but one lose, retry, and race again (the executor's 64
concurrent actions all report to their workload's actions stream). ``GroupCommit.append(event)`` queues
the event; one task per stream takes everything queued, appends it in a single ``store.append`` and
wakes every writer whose event was in it. While that append runs, new events queue up for the next one,
so the number of appends adapts to the load: one per event when idle, one per burst when busy.
An event queued twice (the same ``event_id``) is written once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from services.infra.store import EventStore
from services.model.events import Envelope

# Events in one append at most (one statement; keeps a single append's transaction short).
MAX_BATCH = 500


@dataclass
class _Queue:
    events: list[tuple[Envelope, asyncio.Future[bool]]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


@dataclass
class GroupCommit:
    store: EventStore
    appends: int = 0  # store appends made
    events: int = 0  # events handed in
    _queues: dict[str, _Queue] = field(default_factory=dict)

    async def append(self, event: Envelope) -> bool:
        """Store ``event`` (store-assigned version) together with whatever else is queued for its stream;
        returns once it is stored: True when this append stored it, False when it was stored already.
        Raises the append's error otherwise."""
        self.events += 1
        queue = self._queues.get(event.stream)
        if queue is None:
            queue = self._queues[event.stream] = _Queue()
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        queue.events.append((event, future))
        if queue.task is None:
            queue.task = asyncio.create_task(self._write(event.stream, queue))
        return await asyncio.shield(future)

    async def _write(self, stream: str, queue: _Queue) -> None:
        batch: list[tuple[Envelope, asyncio.Future[bool]]] = []
        try:
            while queue.events:
                batch, queue.events = queue.events[:MAX_BATCH], queue.events[MAX_BATCH:]
                unique: dict[object, Envelope] = {}
                for event, _ in batch:
                    unique.setdefault(event.event_id, event)
                self.appends += 1
                try:
                    result = await self.store.append(list(unique.values()), expected_version=None)
                except Exception as error:
                    for _, future in batch:
                        future.set_exception(error)
                        future.exception()  # retrieved: its writer may have been cancelled
                else:
                    stored = {e.event_id for e in result.events}
                    for event, future in batch:
                        future.set_result(event.event_id in stored)
                        stored.discard(event.event_id)  # a duplicate in the batch was not stored again
        finally:
            queue.task = None
            for _, future in [*batch, *queue.events]:  # cancelled: no writer may hang
                if not future.done():
                    future.cancel()
            del self._queues[stream]
