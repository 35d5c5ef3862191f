"""Anyone who may log in LISTENs on the appends' channel and then sits idle in an open transaction, reading
nothing: Postgres keeps every notification for that session, and a full queue would fail every commit that
notifies, that is every append. Migration 0029's trigger stops notifying at a half-full queue instead, and
the relay's poll finds what was appended meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest

from services.infra.appended import APPENDED_CHANNEL, AppendNotifications
from services.infra.embedded import EmbeddedServers
from services.infra.settings import Settings
from services.infra.store import EventStore
from tests.infra.bus_helpers import eventually, paused
from tests.infra.store_helpers import unique_stream

pytestmark = [pytest.mark.servers, pytest.mark.asyncio(loop_scope="session")]

# The smallest queue Postgres (17 and later) allows: 64 pages of 8 KB, so it fills within seconds.
QUEUE_PAGES = 64
# Commits that wait for no disk flush: tens of thousands of them, on a server thrown away afterwards.
FAST_COMMITS = ("synchronous_commit=off", "fsync=off")
# Appenders at once, each its own stream, each append its own transaction (one notification each).
APPENDERS = 4
# How far past the queue's capacity the flood goes: without the guard, commits fail from 1.0 on.
FLOOD_FACTOR = 1.15


async def _append_until(
    store: EventStore, streams: list[str], versions: list[int], done: asyncio.Event, stop_at: int
) -> int:
    """Append one event per transaction on each stream until ``stop_at`` appends in all or ``done``."""
    appended = 0

    async def appender(index: int) -> None:
        nonlocal appended
        while appended < stop_at and not done.is_set():
            versions[index] += 1
            result = await store.append([paused(streams[index], versions[index])], versions[index] - 1)
            assert result.appended == 1
            appended += 1

    await asyncio.gather(*(appender(index) for index in range(len(streams))))
    return appended


async def _usage_until(
    connection: asyncpg.Connection, reached: Callable[[float], bool], within: float = 60.0
) -> None:
    """Wait until the notification queue's usage, as ``connection`` sees it, has ``reached`` what is asked."""
    deadline = asyncio.get_running_loop().time() + within
    while not reached(value := await connection.fetchval("SELECT pg_catalog.pg_notification_queue_usage()")):
        assert asyncio.get_running_loop().time() < deadline, f"the queue's usage stayed at {value}"
        await asyncio.sleep(0.02)


async def test_a_listener_that_never_reads_cannot_stop_appends(server_data_dir: Path) -> None:
    settings = Settings(data_dir=str(server_data_dir), nats_url="nats://127.0.0.1:1")  # only Postgres
    async with EmbeddedServers(
        settings, postgres_options=[f"max_notify_queue_pages={QUEUE_PAGES}", *FAST_COMMITS]
    ) as running:
        # The attacker: the narrowest login (the reader) may LISTEN; in a transaction it is sent nothing.
        idle = await asyncpg.connect(running.database_reader_url)
        await idle.execute(f"LISTEN {APPENDED_CHANNEL}")
        await idle.execute("BEGIN")
        relay = AppendNotifications(running.database_url)
        stopping = asyncio.Event()
        relay_task = asyncio.ensure_future(relay.run(stopping))
        store = await EventStore.connect(running.database_url, pool_size=APPENDERS)
        observer = await asyncpg.connect(running.database_reader_url)
        try:
            await eventually(lambda: relay.listening, what="the relay listens")
            assert await observer.fetchval("SHOW max_notify_queue_pages") == str(QUEUE_PAGES)
            usage = "SELECT pg_catalog.pg_notification_queue_usage()"
            streams = [unique_stream() for _ in range(APPENDERS)]
            versions = [0] * APPENDERS

            # How many notifications the queue holds: the appends that fill a quarter of it, times four.
            quarter = asyncio.Event()

            async def watch_quarter() -> None:
                try:
                    await _usage_until(observer, lambda used: used >= 0.25)
                finally:
                    quarter.set()  # stops the appenders

            watching = asyncio.ensure_future(watch_quarter())
            sent = await _append_until(store, streams, versions, quarter, stop_at=10**9)
            await watching
            filled = await observer.fetchval(usage)
            capacity = round(sent / filled)
            flood = round(capacity * FLOOD_FACTOR)
            print(f"queue: {QUEUE_PAGES} pages hold ~{capacity} notifications; appending {flood} in all")

            sent += await _append_until(store, streams, versions, asyncio.Event(), stop_at=flood - sent)
            assert sent >= flood > capacity  # every append committed, far past what the queue holds
            final_usage = await observer.fetchval(usage)
            print(f"queue usage after {sent} appends: {final_usage:.3f}")
            assert final_usage <= 0.5 + 2 / QUEUE_PAGES  # a page in progress, appends racing at the check

            # Nothing is lost: every append is in the store, for the relay's poll or anyone reading.
            reader = await EventStore.connect(running.database_reader_url, pool_size=1, duty="reader")
            try:
                stored = {(e.envelope.stream, e.envelope.stream_version) async for e in reader.read_all()}
            finally:
                await reader.close()
            assert stored == {
                (s, v) for s, last in zip(streams, versions, strict=True) for v in range(1, last + 1)
            }
            assert relay.listening

            # Once the session reads again the queue drains, and appends are notified again.
            await idle.execute("ROLLBACK")
            await idle.execute("SELECT 1")  # the server sends what was queued for it when it is idle
            await _usage_until(observer, lambda used: used < 0.5)
            heard = relay.notifications
            versions[0] += 1
            await store.append([paused(streams[0], versions[0])], versions[0] - 1)
            await eventually(lambda: relay.notifications > heard, what="the relay is notified again")
        finally:
            stopping.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(relay_task, 10)
            await store.close()
            await observer.close()
            await idle.close()
