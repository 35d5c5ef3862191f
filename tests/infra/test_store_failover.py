"""A failover to a standby that never received this process's last appends: the store says so, and the
watch stops the process (its successor starts from the record as it is)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from services.infra.database import asyncpg_url
from services.infra.store import EventStore, StoreWentBack
from tests.infra.store_helpers import batch, unique_stream


async def forget_from(database_url: str, position: int) -> None:
    """What the promoted standby lacks: every event from ``position`` on (as the database's superuser)."""
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        await connection.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        await connection.execute("DELETE FROM events WHERE global_position >= $1", position)
        await connection.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    finally:
        await connection.close()


async def test_the_watch_stops_a_process_whose_appends_the_store_lost(database_url: str) -> None:
    store = await EventStore.connect(database_url)
    stopping = asyncio.Event()
    try:
        result = await store.append(batch(unique_stream(), 1, 3), expected_version=0)
        assert await store.lost_appends() is None
        watch = asyncio.create_task(store.watch_appends(stopping, interval=0.1))
        assert result.last_position is not None
        await forget_from(database_url, result.last_position)
        with pytest.raises(StoreWentBack, match=str(result.events[-1].event_id)):
            await asyncio.wait_for(watch, 10)
    finally:
        stopping.set()
        await store.close()


async def test_a_process_that_appended_nothing_has_nothing_to_lose(database_url: str) -> None:
    store = await EventStore.connect(database_url)
    try:
        assert await store.lost_appends() is None
    finally:
        await store.close()
