"""The hash-chain trigger of migration 0006 (one lookup per row when the previous row in global order is
the stream's previous version) writes exactly the chain `audit verify` recomputes, for every shape of
insert: one-stream batches, interleaved streams, version gaps, rows skipped by ON CONFLICT, COPY; and the
chain stays verifiable across the upgrade from 0004 and the downgrade back to it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from services.infra.database import asyncpg_url, downgrade, upgrade, upgrade_async
from services.infra.store import EventStore
from services.model.events import Envelope, PodActionSucceeded, new_event
from services.replay.audit import audit_log
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls

pytestmark = pytest.mark.asyncio(loop_scope="session")

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def event(stream: str, version: int, tag: str = "") -> Envelope:
    return new_event(
        PodActionSucceeded(action_id=f"{stream}-{version}{tag}"),
        stream=stream,
        stream_version=version,
        occurred_at=T0,
        correlation_id="prod/a@rev",
    )


async def verified_rows(store: EventStore) -> int:
    report = await audit_log(store, batch_size=7)
    assert report.clean, [f.describe() for f in report.findings]
    return report.rows


async def trigger_source(url: str) -> str:
    """The events_chain() function's body, whitespace normalised."""
    conn = await asyncpg.connect(asyncpg_url(url))
    try:
        source = await conn.fetchval("SELECT prosrc FROM pg_proc WHERE proname = 'events_chain'")
        return " ".join(str(source).split())
    finally:
        await conn.close()


@pytest.fixture
async def store(server_urls: ServerUrls) -> AsyncIterator[EventStore]:
    async with fresh_database(server_urls.database_url, prefix="rollbook_fast_chain") as url:
        await upgrade_async(url)
        store = await EventStore.connect(url)
        try:
            yield store
        finally:
            await store.close()


async def test_every_shape_of_insert_is_chained_verifiably(store: EventStore) -> None:
    # One stream, consecutive versions: the previous row in global order is the stream's previous version.
    await store.append([event("s/a", v) for v in range(1, 21)], expected_version=0)
    # Interleaved streams: the previous row in global order is another stream's.
    assert await store.append_many([event(f"s/m{i % 3}", i // 3 + 1) for i in range(30)]) == 30
    # A stream's first version right after another stream's row.
    assert await store.append_many([event("s/new", 1), event("s/new", 2), event("s/new", 3)]) == 3
    # Rows skipped by ON CONFLICT in the middle of a batch: they pass the trigger but are never stored.
    stored = [event("s/skip", v) for v in range(1, 4)]
    assert await store.append_many(stored[:2]) == 2
    assert await store.append_many([*stored[1:3], event("s/skip", 4), event("s/other", 1)]) == 3
    # COPY (bulk import), one stream continuing after another stream's row.
    assert await store.import_events([event("s/a", v) for v in range(21, 31)]) == 10
    # Unchecked appends take the next versions after whatever the stream holds.
    await store.append([event("s/new", 0, "-x"), event("s/new", 0, "-y")], expected_version=None)
    await store.append([event("s/m1", 11)], expected_version=10)
    assert await verified_rows(store) == 20 + 30 + 3 + (2 + 3) + 10 + 2 + 1


async def test_the_chain_stays_verifiable_across_upgrade_and_downgrade(server_urls: ServerUrls) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_fast_chain_up") as url:
        await asyncio.to_thread(upgrade, url, "0004_event_hash_chain")
        before = await trigger_source(url)
        store = await EventStore.connect(url)
        try:
            # import_events (COPY, every insert trigger runs): the store's other appends read tables of
            # later migrations (stream_heads and event_keys, 0028).
            await store.import_events([event("s/a", v) for v in range(1, 6)])
            await store.import_events([event(f"s/m{i % 2}", i // 2 + 1) for i in range(6)])
        finally:
            await store.close()

        await asyncio.to_thread(upgrade, url, "0006_fast_hash_chain")
        assert await trigger_source(url) != before
        store = await EventStore.connect(url)
        try:
            # The new trigger continues chains the old one started (one stream and interleaved).
            await store.import_events([event("s/a", v) for v in range(6, 11)])
            await store.import_events([event(f"s/m{i % 2}", i // 2 + 4) for i in range(6)])
            assert await verified_rows(store) == 22
        finally:
            await store.close()

        await asyncio.to_thread(downgrade, url, "0004_event_hash_chain")
        assert await trigger_source(url) == before, "the downgrade restores 0004's trigger exactly"
        store = await EventStore.connect(url)
        try:
            await store.import_events([event("s/a", 11, "-after-downgrade")])
            assert await verified_rows(store) == 23
        finally:
            await store.close()
