"""Fixtures of the auditor's tests: a scratch JetStream stream and an event store of their own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats.js.errors
import pytest_asyncio

from services.infra.bus import Bus
from services.infra.database import upgrade_async
from services.infra.store import EventStore
from tests.auditor.helpers import relay_settings
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls


@pytest_asyncio.fixture(loop_scope="session")
async def own_bus(server_urls: ServerUrls) -> AsyncIterator[Bus]:
    bus = await Bus.connect(relay_settings("", server_urls.nats_url), name="rollbook-relay-test")
    await bus.ensure_stream()
    try:
        yield bus
    finally:
        try:
            await bus.js.delete_stream(bus.stream)
        except nats.js.errors.NotFoundError:
            pass
        await bus.close()


@pytest_asyncio.fixture(loop_scope="session")
async def own_database_url(server_urls: ServerUrls) -> AsyncIterator[str]:
    """A database of its own, migrated: the relay publishes everything in it."""
    async with fresh_database(server_urls.database_url, "rollbook_relay") as url:
        await upgrade_async(url)
        yield url


@pytest_asyncio.fixture(loop_scope="session")
async def own_store(own_database_url: str) -> AsyncIterator[EventStore]:
    """The store on ``own_database_url``, acting as the services' writer role."""
    store = await EventStore.connect(own_database_url)
    try:
        yield store
    finally:
        await store.close()
