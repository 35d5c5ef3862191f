"""Several auditor replicas: one walks the stream at a time (a Postgres advisory lock held by a session of
its own), the others only relay. When the walker's session ends, another replica takes the walk up where
the saved cursor says, so no message is audited by none of them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import asyncpg
import pytest

from services.auditor.service import Audit, KnownStored, Relay
from services.infra.bus import Bus
from services.infra.database import asyncpg_url
from services.infra.session_lock import SessionLock
from services.infra.store import EventStore
from tests.infra.store_helpers import batch, unique_stream
from tests.plugins.stack import wait_for

pytestmark = pytest.mark.asyncio(loop_scope="session")


@asynccontextmanager
async def replica(
    database_url: str, store: EventStore, bus: Bus
) -> AsyncIterator[tuple[Audit, SessionLock, asyncio.Event]]:
    """One auditor replica's audit and its lock, as the auditor runs them (looks every 0.1 s), and the
    event that stops it."""
    lock = SessionLock(database_url, f"rollbook-audit {bus.stream}", check_interval=0.1)
    audit = Audit(store, bus, KnownStored(), lock=lock, look_interval=0.1)
    stopping = asyncio.Event()
    tasks = [asyncio.create_task(lock.run(stopping)), asyncio.create_task(audit.run(stopping))]
    try:
        yield audit, lock, stopping
    finally:
        stopping.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)


async def relay_all(store: EventStore, bus: Bus, relay: Relay) -> None:
    await relay.publish(await store.read_batch_json(relay.position, 1000))


async def test_one_replica_walks_and_another_takes_over_where_it_stopped(
    own_database_url: str, own_store: EventStore, own_bus: Bus
) -> None:
    stream = unique_stream()
    stored = batch(stream, 1, 15)
    relay = Relay(own_store, own_bus)  # another replica's relay: the walker reads its messages
    async with AsyncExitStack() as replicas:
        one = await replicas.enter_async_context(replica(own_database_url, own_store, own_bus))
        two = await replicas.enter_async_context(replica(own_database_url, own_store, own_bus))

        async def one_holds() -> bool:
            return [one[1].held, two[1].held].count(True) == 1

        await wait_for(one_holds, within=30, what="one replica holds the audit's lock")
        first, second = (one, two) if one[1].held else (two, one)
        (walker, walker_lock, walker_stopping), (other, other_lock, _) = first, second
        await own_store.append(stored[:10], expected_version=0)
        await relay_all(own_store, own_bus, relay)

        async def walked(audit: Audit, count: int) -> bool:
            return audit.stats.walked >= count

        await wait_for(lambda: walked(walker, 10), within=30, what="the walker audited 10 messages")

        async def saved_through(count: int) -> bool:
            saved = await own_store.audit_cursor(own_bus.stream)
            return saved is not None and saved[1] == count

        await wait_for(lambda: saved_through(10), within=30, what="the walker saved its cursor at 10")
        assert other.stats.walked == 0

        # The walker's session ends (its pod killed, its connection cut): the other takes the walk up.
        admin = await asyncpg.connect(asyncpg_url(own_database_url))
        try:
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_locks"
                " WHERE locktype = 'advisory' AND granted AND objid = ($1::bigint & 4294967295)::oid",
                walker_lock.key,
            )
        finally:
            await admin.close()
        assert killed == 1
        walker_stopping.set()  # and it does not come back: the other must take the walk up
        await wait_for(lambda: _true(other_lock.held), within=30, what="the other replica took the lock")
        await own_store.append(stored[10:], expected_version=10)
        await relay_all(own_store, own_bus, relay)
        await wait_for(lambda: walked(other, 5), within=30, what="the other audited the 5 new messages")
        await asyncio.sleep(0.3)  # three more looks: nothing audited twice
        assert (walker.stats.walked, other.stats.walked) == (10, 5)
        assert other.detail() == {"walking": True, "audited_through": 15, "lag": 0}


async def _true(value: bool) -> bool:
    return value
