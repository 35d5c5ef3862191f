"""A catch-up reader polling read_batch while many writers append concurrently sees every event exactly
once, in increasing global position: the gap problem (a lower position committing after a higher one is
already visible) must never make it skip an event."""

from __future__ import annotations

import asyncio
import random
import uuid

from services.infra.store import EventStore
from tests.infra.store_helpers import batch, unique_stream

WRITERS = 8
APPENDS_PER_WRITER = 40
STREAMS_PER_WRITER = 3


async def test_catch_up_reader_sees_every_event_exactly_once(event_store: EventStore) -> None:
    start = await event_store.head_position()
    appended: set[uuid.UUID] = set()
    writers_done = asyncio.Event()

    async def writer(seed: int) -> None:
        rng = random.Random(seed)
        versions = {unique_stream(f"Catchup{seed}"): 0 for _ in range(STREAMS_PER_WRITER)}
        for _ in range(APPENDS_PER_WRITER):
            stream = rng.choice(list(versions))
            events = batch(stream, versions[stream] + 1, rng.randint(1, 6))
            if rng.random() < 0.3:
                await event_store.append_many(events)
            else:
                await event_store.append(events, expected_version=versions[stream])
            versions[stream] += len(events)
            appended.update(e.event_id for e in events)

    seen: list[uuid.UUID] = []
    positions: list[int] = []

    async def reader() -> None:
        position = start
        while True:
            finished = writers_done.is_set()  # read before polling, so the last poll follows the last commit
            page = await event_store.read_batch(position, limit=25)
            for stored in page:
                positions.append(stored.global_position)
                seen.append(stored.envelope.event_id)
            if page:
                position = page[-1].global_position
            elif finished:
                return
            else:
                await asyncio.sleep(0)

    async def all_writers() -> None:
        await asyncio.gather(*(writer(seed) for seed in range(WRITERS)))
        writers_done.set()

    await asyncio.gather(all_writers(), reader())

    assert positions == sorted(set(positions)), "positions must strictly increase"
    assert len(seen) == len(set(seen)), "an event was delivered twice"
    missing = appended - set(seen)
    assert not missing, f"the reader skipped {len(missing)} of {len(appended)} events"
