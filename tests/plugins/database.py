"""Database fixtures: a fresh, uniquely named, migrated database per test session, and an EventStore on it.

Helpers here (``fresh_database``) are also used by tests that need their own empty database, such as the
migration round-trip test.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import asyncpg
import pytest

from services.infra.database import asyncpg_url, drop_database, upgrade_async
from services.infra.db_roles import DUTIES, role_name
from services.infra.store import EventStore
from tests.plugins.servers import ServerUrls


def password_inline(url: str, default: str | None = None) -> str:
    """``url`` with its login's password written into it: from the file its ``passfile`` names (the
    embedded Postgres's URLs), else ``default`` where it carries none (a server that trusts its local
    logins ignores it). For a process that cannot read this machine's files: a pod, whose /tmp is its own."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    passfile = query.pop("passfile", None)
    password = parts.password and unquote(parts.password)
    user = unquote(parts.username or "")
    if passfile is not None:
        entries = [line.split(":") for line in Path(passfile).read_text().splitlines()]
        password = next(f[4] for f in entries if len(f) == 5 and f[3] in ("*", user))
    password = password or default
    if password is None:
        return url
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{parts.hostname}:{parts.port or 5432}"
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), parts.fragment))


def with_database(url: str, name: str) -> str:
    """The same server URL with the database name replaced."""
    parts = urlsplit(asyncpg_url(url))
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def lose_events_sql(where: str) -> list[str]:
    """Statements that take out the events matching ``where`` (a condition on ``events``' columns) as a
    failover that lost their commits would, or an attacker who owns the database: their ids leave
    ``event_keys`` and their streams' heads in ``stream_heads`` go back to the newest events left (0028).
    Run as the owner, with ``events_append_only`` off."""
    return [
        f"DELETE FROM event_keys k USING events e WHERE k.event_id = e.event_id AND ({where})",
        f"DELETE FROM events WHERE {where}",
        "DELETE FROM stream_heads",
        "INSERT INTO stream_heads (stream, stream_version, stream_hash)"
        " SELECT DISTINCT ON (stream) stream, stream_version, stream_hash"
        " FROM (SELECT stream, stream_version, stream_hash FROM events UNION ALL"
        " SELECT stream, stream_version, stream_hash FROM archived_stream_heads) AS heads"
        " ORDER BY stream, stream_version DESC",
    ]


@asynccontextmanager
async def fresh_database(server_url: str, prefix: str = "rollbook_test") -> AsyncIterator[str]:
    """Create an empty database with a unique name on the server; drop it (even if in use) afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(asyncpg_url(server_url))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield with_database(server_url, name)
    finally:
        for attempt in range(2):
            try:
                await drop_database_and_roles(server_url, name)
                break
            except (asyncpg.ConnectionDoesNotExistError, ConnectionResetError):
                # A server just promoted (a failover test) may drop the connection once: connect again.
                if attempt:
                    raise


async def drop_database_and_roles(server_url: str, name: str) -> None:
    """Drop database ``name`` (even if in use) and the roles migration 0016 made for it: they are the
    server's, named after the database, and nobody else uses them (left behind, they pile up)."""
    await drop_database(server_url, name, tuple(role_name(name, duty) for duty in DUTIES))


@pytest.fixture(scope="session")
async def database_url(server_urls: ServerUrls) -> AsyncIterator[str]:
    """A fresh database migrated to head (alembic upgrade head), dropped at the end of the session."""
    async with fresh_database(server_urls.database_url) as url:
        await upgrade_async(url)
        yield url


@pytest.fixture(scope="session")
async def event_store(database_url: str) -> AsyncIterator[EventStore]:
    store = await EventStore.connect(database_url)
    try:
        yield store
    finally:
        await store.close()
