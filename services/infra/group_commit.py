"""Group commit: events that many concurrent tasks append to store-versioned streams, written together.

Writers of store-versioned streams (``expected_version=None``) that append one event each at the same
time would each take the store's writers' lock and wait for their own commit (the executor's 64
concurrent actions report to their workloads' actions streams; with many workloads nearly every append
would be one row). ``GroupCommit.append(event)`` queues the event; one task takes everything queued,
of every stream, appends it in a single ``store.append_unversioned`` (one statement, one lock, one
commit; each stream's events in the order they were queued) and wakes every writer whose event was in
it. While that append runs, new events queue up for the next one, so the number of appends adapts to
the load: one per event when idle, one per burst when busy. An event queued twice (the same
``event_id``) is written once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from services.infra.store import AppendResult, EventStore
from services.model.events import Envelope

# Events in one append at most (one statement; keeps a single append's transaction, and the lock, short).
MAX_BATCH = 500


@dataclass
class GroupCommit:
    store: EventStore
    appends: int = 0  # store appends made
    events: int = 0  # events handed in
    _queued: list[tuple[Envelope, asyncio.Future[bool]]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def append(self, event: Envelope) -> bool:
        """Store ``event`` (store-assigned version) together with whatever else is queued; returns once it
        is stored: True when this append stored it, False when it was stored already. Raises the
        append's error otherwise."""
        self.events += 1
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queued.append((event, future))
        if self._task is None:
            self._task = asyncio.create_task(self._write())
        return await asyncio.shield(future)

    async def _write(self) -> None:
        batch: list[tuple[Envelope, asyncio.Future[bool]]] = []
        try:
            while self._queued:
                batch, self._queued = self._queued[:MAX_BATCH], self._queued[MAX_BATCH:]
                self.appends += 1
                try:
                    results = await self.store.append_unversioned([event for event, _ in batch])
                except Exception as error:
                    await self._per_stream(batch, error)
                else:
                    _settle(batch, results)
        finally:
            self._task = None
            cancelled, self._queued = [*batch, *self._queued], []
            for _, future in cancelled:  # cancelled: no writer may hang
                if not future.done():
                    future.cancel()

    async def _per_stream(self, batch: list[tuple[Envelope, asyncio.Future[bool]]], error: Exception) -> None:
        """The batch's append failed: append each stream's events on its own, so an error one stream's
        events cause (a row the store refuses) fails only that stream's writers, not every workload's."""
        streams: dict[str, list[tuple[Envelope, asyncio.Future[bool]]]] = {}
        for item in batch:
            streams.setdefault(item[0].stream, []).append(item)
        if len(streams) == 1:
            _fail(batch, error)
            return
        for part in streams.values():
            self.appends += 1
            try:
                results = await self.store.append_unversioned([event for event, _ in part])
            except Exception as part_error:
                _fail(part, part_error)
            else:
                _settle(part, results)


def _settle(batch: list[tuple[Envelope, asyncio.Future[bool]]], results: list[AppendResult]) -> None:
    stored = {event.event_id for result in results for event in result.events}
    for event, future in batch:
        future.set_result(event.event_id in stored)
        stored.discard(event.event_id)  # a duplicate in the batch was not stored again


def _fail(batch: list[tuple[Envelope, asyncio.Future[bool]]], error: Exception) -> None:
    for _, future in batch:
        future.set_exception(error)
        future.exception()  # retrieved: its writer may have been cancelled
