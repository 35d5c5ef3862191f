"""An insider holding the services' database credential tries to rewrite the trail; a reader tries to write.

Each attack runs inside a transaction that is always rolled back, so an attack that succeeds (as it did
before migration 0016, when the services ran as the owner of ``events``) fails the test without damaging
the session's database. Two ways in are tried: the services' own connection (``EventStore.connect``, which
acts as the writer role whatever its login) and the writer's own login, with a password, where SET ROLE
cannot be undone by RESET ROLE.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import pytest

from services.infra.database import asyncpg_url, downgrade_async, upgrade_async
from services.infra.db_roles import Duty, role_sql
from services.infra.stack import connect_database
from services.infra.store import EventStore
from services.model.events import Envelope
from services.replay.audit import audit_log
from tests.infra.store_helpers import pod_action, unique_stream
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls

pytestmark = [pytest.mark.servers, pytest.mark.asyncio(loop_scope="session")]

ATTACKS = {
    "update": "UPDATE events SET payload = '{}'::jsonb",
    "delete": "DELETE FROM events",
    "truncate": "TRUNCATE events",
    "alter-table": "ALTER TABLE events ADD COLUMN forged text",
    "disable-trigger": "ALTER TABLE events DISABLE TRIGGER events_append_only",
    "disable-all-triggers": "ALTER TABLE events DISABLE TRIGGER ALL",
    "drop-trigger": "DROP TRIGGER events_chain ON events",
    "drop-view": "DROP VIEW rollouts",
    "replace-view": "CREATE OR REPLACE VIEW rollouts AS SELECT * FROM rollouts",
    "create-role": "CREATE ROLE forged_superuser SUPERUSER LOGIN",
    "grant-self-owner": "GRANT {owner} TO CURRENT_USER",
    "delete-checkpoints": "DELETE FROM event_checkpoints",
    # A stored round input is checked against its round's hash before use; still, none is rewritten.
    "update-round-input": "UPDATE round_inputs SET input = '\\x00'",
    "delete-round-input": "DELETE FROM round_inputs",
    # The audit's cursor may be moved by the auditor (the writer), never dropped or emptied.
    "delete-audit-cursor": "DELETE FROM audit_cursor",
    "truncate-audit-cursor": "TRUNCATE audit_cursor",
    "drop-audit-cursor": "DROP TABLE audit_cursor",
    "create-table": "CREATE TABLE shadow_events (LIKE events)",
}


async def _refused(connection: asyncpg.Connection, statement: str) -> None:
    """``statement`` must be refused for lack of privilege (not by the append-only trigger)."""
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        async with connection.transaction():
            await connection.execute(statement)
            raise AssertionError(f"not refused: {statement}")  # rolls the attack back


async def _role(connection: asyncpg.Connection, duty: Duty) -> str:
    name: str = await connection.fetchval(f"SELECT {role_sql(duty)}")
    return name


@pytest.fixture(scope="session")
async def login_urls(database_url: str) -> AsyncIterator[dict[str, str]]:
    """A URL per login role of the session's database, each with a fresh password set by the admin."""
    admin = await asyncpg.connect(asyncpg_url(database_url))
    urls: dict[str, str] = {}
    try:
        parts = urlsplit(asyncpg_url(database_url))
        for duty in ("writer", "reader", "webhook"):
            role = await _role(admin, duty)  # type: ignore[arg-type]
            password = secrets.token_urlsafe(24)
            await admin.execute(f"ALTER ROLE \"{role}\" PASSWORD '{password}'")
            netloc = f"{quote(role)}:{password}@{parts.hostname}:{parts.port or 5432}"
            urls[duty] = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
        urls["owner"] = await _role(admin, "owner")
    finally:
        await admin.close()
    yield urls


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_the_services_connection_cannot_rewrite_the_trail(event_store: EventStore, attack: str) -> None:
    async with event_store._driver() as connection:
        owner = await _role(connection, "owner")
        await _refused(connection, ATTACKS[attack].replace("{owner}", f'"{owner}"'))


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_the_writer_login_cannot_rewrite_the_trail(login_urls: dict[str, str], attack: str) -> None:
    connection = await asyncpg.connect(login_urls["writer"])
    try:
        assert (
            await connection.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user") is False
        )
        await _refused(connection, ATTACKS[attack].replace("{owner}", f'"{login_urls["owner"]}"'))
    finally:
        await connection.close()


async def test_the_writer_owns_nothing(login_urls: dict[str, str], database_url: str) -> None:
    admin = await asyncpg.connect(asyncpg_url(database_url))
    try:
        owners = await admin.fetch(
            "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class"
            " WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'v', 'S')"
        )
    finally:
        await admin.close()
    assert [row[0] for row in owners] == [login_urls["owner"]]


def _event() -> Envelope:
    return pod_action(unique_stream(), 1)


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO events (event_id, stream, stream_version, type, schema_version, occurred_at, payload)"
        " VALUES (gen_random_uuid(), 'Probe/x/y', 1, 'Forged', 1, now(), '{}')",
        "INSERT INTO event_checkpoints (global_position, chain_hash) VALUES (1, '\\x00')",
        "UPDATE event_checkpoints SET chain_hash = '\\x00'",
    ],
    ids=["events", "checkpoints", "update-checkpoints"],
)
async def test_the_reader_cannot_write(login_urls: dict[str, str], database_url: str, statement: str) -> None:
    as_login = await asyncpg.connect(login_urls["reader"])
    # Read commands given the services' (here: the admin's) URL act as the reader too.
    as_duty = await connect_database(database_url, duty="reader")
    try:
        for connection in (as_login, as_duty):
            assert await connection.fetchval("SELECT count(*) FROM rollouts") >= 0  # it can read the views
            await _refused(connection, statement)
    finally:
        await as_login.close()
        await as_duty.close()


async def test_the_webhook_only_appends_events(login_urls: dict[str, str]) -> None:
    connection = await asyncpg.connect(login_urls["webhook"])
    try:
        await _refused(
            connection, "INSERT INTO event_checkpoints (global_position, chain_hash) VALUES (1, '')"
        )
        await _refused(connection, "SELECT * FROM rollouts")
        await _refused(connection, ATTACKS["update"])
    finally:
        await connection.close()
    store = await EventStore.connect(login_urls["webhook"], pool_size=1, duty="webhook")
    try:
        result = await store.append([_event()], expected_version=0)
        assert result.appended == 1
    finally:
        await store.close()


async def test_the_writer_login_appends_reads_and_checkpoints(login_urls: dict[str, str]) -> None:
    """Every statement the services run works as the writer: appends of each kind, reads, the auditor's
    checkpoint (INSERT ... ON CONFLICT DO UPDATE on event_checkpoints), the audit views."""
    store = await EventStore.connect(login_urls["writer"], pool_size=2)
    try:
        first, second = _event(), _event()
        assert (await store.append([first], expected_version=0)).appended == 1
        assert (await store.append([first], expected_version=0)).appended == 0  # idempotent
        assert await store.append_many([second]) == 1
        assert [s.envelope.event_id for s in await store.read_stream(first.stream)] == [first.event_id]
        assert await store.write_checkpoint() is not None
        assert await store.write_checkpoint() is not None  # the same head again: ON CONFLICT DO UPDATE
        async with store._driver() as connection:
            assert await connection.fetchval("SELECT current_user") == urlsplit(login_urls["writer"]).username
            await connection.fetch("SELECT * FROM pod_actions LIMIT 1")
    finally:
        await store.close()


async def test_what_later_migrations_create_gets_the_default_grants(database_url: str) -> None:
    """A table or view a later migration creates (as the owner: migrations/env.py) is readable by the
    writer and the reader and insertable by the writer only; nobody but the owner may change it."""
    admin = await asyncpg.connect(asyncpg_url(database_url))
    try:
        owner, writer, reader = [await _role(admin, d) for d in ("owner", "writer", "reader")]
        transaction = admin.transaction()
        await transaction.start()
        try:
            await admin.execute(f'SET LOCAL ROLE "{owner}"')
            await admin.execute("CREATE TABLE later_probe (id bigint)")
            await admin.execute("CREATE VIEW later_probe_view AS SELECT id FROM later_probe")
            check = "SELECT has_table_privilege($1, $2, $3)"
            for name in ("later_probe", "later_probe_view"):
                assert await admin.fetchval(check, reader, name, "SELECT")
                assert await admin.fetchval(check, writer, name, "SELECT")
                assert not await admin.fetchval(check, reader, name, "INSERT")
            assert await admin.fetchval(check, writer, "later_probe", "INSERT")
            for privilege in ("UPDATE", "DELETE", "TRUNCATE"):
                assert not await admin.fetchval(check, writer, "later_probe", privilege)
        finally:
            await transaction.rollback()
    finally:
        await admin.close()


async def test_a_trail_recorded_before_the_roles_still_verifies_and_grows(server_urls: ServerUrls) -> None:
    """Migration 0016 on a database holding events: they keep their hashes, verify, and the writer's
    next appends chain on; the downgrade gives everything back and the events stay."""
    async with fresh_database(server_urls.database_url, prefix="rollbook_roles_upgrade") as url:
        await upgrade_async(url, "0013_inplace_mark_of_its_own")
        before = await EventStore.connect(url)
        try:
            stream = unique_stream()
            # COPY: the store's versioned appends read tables of later migrations (0026).
            await before.import_events([pod_action(stream, v, index=v) for v in (1, 2, 3)])
            hashes = [row async for row in _chain(before)]
        finally:
            await before.close()
        await upgrade_async(url)
        store = await EventStore.connect(url)
        try:
            assert [row async for row in _chain(store)] == hashes
            await store.append([pod_action(stream, 4, index=4)], expected_version=3)
            report = await audit_log(store)
            assert report.clean and report.rows == 4, report.findings
        finally:
            await store.close()
        await downgrade_async(url, "0013_inplace_mark_of_its_own")
        admin = await asyncpg.connect(asyncpg_url(url))
        try:
            assert await admin.fetchval("SELECT count(*) FROM events") == 4
            assert (
                await admin.fetchval(f"SELECT count(*) FROM pg_roles WHERE rolname = {role_sql('writer')}")
                == 0
            )
        finally:
            await admin.close()


async def _chain(store: EventStore) -> AsyncIterator[tuple[int, bytes]]:
    async with store._driver() as connection:
        for row in await connection.fetch("SELECT global_position, chain_hash FROM events ORDER BY 1"):
            yield int(row[0]), bytes(row[1])
