"""Which Postgres and NATS servers the tests use.

ROLLBOOK_DATABASE_URL / ROLLBOOK_NATS_URL when set (CI sets them to the machine's servers); otherwise
embedded servers (services.domain.embedded) started once for the session and stopped at its end.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio

from services.domain.embedded import EmbeddedServers
from services.domain.settings import Settings


@dataclass(frozen=True)
class ServerUrls:
    database_url: str  # a database on the server the tests may use to CREATE DATABASE
    nats_url: str


@pytest_asyncio.fixture(scope="session")
async def server_urls(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ServerUrls]:
    wanted = Settings(
        database_url=os.environ.get("ROLLBOOK_DATABASE_URL", ""),
        nats_url=os.environ.get("ROLLBOOK_NATS_URL", ""),
        data_dir=str(tmp_path_factory.mktemp("embedded")),
    )
    # Migrations are the database fixture's business (a fresh database per session), not the server's.
    async with EmbeddedServers(wanted, migrate=False) as resolved:
        yield ServerUrls(database_url=resolved.database_url, nats_url=resolved.nats_url)
