"""A failover to a standby that never received this process's last appends: the store says so, and the
watch stops the process (its successor starts from the record as it is)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest

from services.infra.database import asyncpg_url, upgrade_async
from services.infra.store import EventStore, StoreWentBack
from tests.infra.store_helpers import batch, unique_stream
from tests.plugins.database import fresh_database, lose_events_sql
from tests.plugins.servers import ServerUrls


async def forget_from(database_url: str, position: int) -> None:
    """What the promoted standby lacks: every event from ``position`` on (as the database's superuser)."""
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        await connection.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        for statement in lose_events_sql(f"global_position >= {position}"):
            await connection.execute(statement)
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


async def test_after_a_lost_connection_a_process_whose_appends_were_lost_appends_nothing(
    server_urls: ServerUrls,
) -> None:
    """Appending on the new primary would take the versions of this process's own lost events, which the
    relay could put back from the bus: the first append after a lost connection checks, and refuses."""
    async with own_database(server_urls) as database_url:
        store = await EventStore.connect(database_url)
        stream = unique_stream()
        try:
            result = await store.append(batch(stream, 1, 3), expected_version=None)
            assert result.last_position is not None
            await forget_from(database_url, result.last_position)
            await drop_connections(database_url)
            with pytest.raises(StoreWentBack, match=str(result.events[-1].event_id)):
                await store.append_unversioned(batch(stream, 4, 1))
            assert await store.stream_version(stream) == 2  # its lost version 3 stays free
        finally:
            await store.close()


async def test_after_a_lost_connection_a_process_whose_appends_are_stored_goes_on(
    server_urls: ServerUrls,
) -> None:
    async with own_database(server_urls) as database_url:
        store = await EventStore.connect(database_url)
        stream = unique_stream()
        try:
            await store.append(batch(stream, 1, 2), expected_version=0)
            await drop_connections(database_url)
            await store.append(batch(stream, 3, 1), expected_version=2)
            assert await store.stream_version(stream) == 3
        finally:
            await store.close()


@contextlib.asynccontextmanager
async def own_database(server_urls: ServerUrls) -> AsyncIterator[str]:
    """A database of the test's own: its connections are dropped."""
    async with fresh_database(server_urls.database_url, "rollbook_failover") as url:
        await upgrade_async(url)
        yield url


async def drop_connections(database_url: str) -> None:
    """Every other connection to the database ends, as a primary's do when it is lost."""
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        await connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await connection.close()
