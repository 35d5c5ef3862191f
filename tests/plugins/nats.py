"""Bus fixtures: `settings` (Settings naming this session's own stream and subjects) and `bus`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import nats.js.errors
import pytest_asyncio

from services.infra.bus import Bus
from services.infra.settings import Settings
from tests.plugins.servers import ServerUrls


@pytest_asyncio.fixture(scope="session")
async def settings(server_urls: ServerUrls, database_url: str) -> Settings:
    suffix = uuid.uuid4().hex[:10]
    # database_url: this session's fresh, migrated database (tests/plugins/database.py).
    return Settings(
        database_url=database_url,
        nats_url=server_urls.nats_url,
        stream_name=f"RBTEST_{suffix}",
        subject_prefix=f"rbtest{suffix}",
        max_deliver=3,
    )


@pytest_asyncio.fixture(scope="session")
async def bus(settings: Settings) -> AsyncIterator[Bus]:
    bus = await Bus.connect(settings, name="rollbook-tests")
    await bus.ensure_stream()
    yield bus
    try:
        await bus.js.delete_stream(settings.stream_name)
    except nats.js.errors.NotFoundError:
        pass
    await bus.close()
