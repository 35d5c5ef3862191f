"""Which Postgres and NATS servers the tests use.

ROLLBOOK_DATABASE_URL / ROLLBOOK_NATS_URL when set (CI sets them to the machine's servers); otherwise
embedded servers (services.infra.embedded) started once for the session and stopped at its end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from services.infra.embedded import EmbeddedServers
from services.infra.settings import Settings


@dataclass(frozen=True)
class ServerUrls:
    database_url: str  # a database on the server the tests may use to CREATE DATABASE
    nats_url: str


def private_temp_dir(prefix: str) -> Iterator[Path]:
    """A temp dir of our own for server data. Not pytest's tmp_path: /tmp/pytest-of-<user> is shared by
    every pytest session of the user, and a concurrent session's cleanup can delete a running server's
    data under it."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server_data_dir() -> Iterator[Path]:
    """An empty directory for one test's embedded servers, removed afterwards."""
    yield from private_temp_dir("rollbook-test-")


@pytest_asyncio.fixture(scope="session")
async def server_urls() -> AsyncIterator[ServerUrls]:
    for data_dir in private_temp_dir("rollbook-test-session-"):
        wanted = Settings(
            database_url=os.environ.get("ROLLBOOK_DATABASE_URL", ""),
            nats_url=os.environ.get("ROLLBOOK_NATS_URL", ""),
            data_dir=str(data_dir),
        )
        # Migrations are the database fixture's business (a fresh database per session), not the server's.
        # The session's shared nats-server has no authentication, as CI's: each test has a stream and subject
        # prefix of its own, which one server's permissions do not name (tests/security/ runs servers with).
        async with EmbeddedServers(wanted, migrate=False, nats_auth=False) as resolved:
            # The owner's URL: a login that may CREATE DATABASE (embedded: the superuser, with its password).
            yield ServerUrls(database_url=resolved.url_for("owner"), nats_url=resolved.nats_url)


@pytest_asyncio.fixture(loop_scope="session")
async def restartable_postgres(server_data_dir: Path) -> AsyncIterator[EmbeddedServers]:
    """An embedded Postgres of this test's own (never the machine's), which the test may stop
    (``stop_postgres(immediate=True)``) and start again (``start_postgres()``); ``.resolved.database_url``
    is a migrated database on it. NATS stays the session's server."""
    nats_url = os.environ.get("ROLLBOOK_NATS_URL") or "nats://127.0.0.1:1"  # unused: only Postgres starts
    servers = EmbeddedServers(Settings(nats_url=nats_url, data_dir=str(server_data_dir)), migrate=True)
    async with servers:
        yield servers
