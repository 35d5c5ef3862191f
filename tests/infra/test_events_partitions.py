"""Migrations 0026 and 0028: events partitioned by month, uniqueness kept across partitions (by event_keys
and stream_heads, which outlive a partition), the services' roles kept out of the partitions and the keys,
and recorded trails carried through the conversion unchanged.

Each uniqueness attack is tried twice: with the check (refused with the constraint name the store knows)
and with the check's trigger disabled inside a transaction that is rolled back (the row goes in): the
trigger, not something else, is what refuses it."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

from services.infra.archive import keep_partitions_ahead
from services.infra.database import asyncpg_url, downgrade_async, upgrade_async
from services.infra.db_roles import assume_sql, role_sql
from services.infra.store import EventStore
from services.model.hashchain import content_bytes
from services.replay.audit import audit_log
from tests.infra.partition_helpers import (
    TRAILS,
    accepted_without_the_check,
    envelope,
    filler,
    fixture_trail,
    insert_recorded,
    month_start,
    old_partition,
)
from tests.plugins.database import fresh_database
from tests.plugins.servers import ServerUrls

pytestmark = [pytest.mark.servers, pytest.mark.asyncio(loop_scope="session")]


@pytest.fixture(scope="module")
async def partitioned_url(server_urls: ServerUrls) -> AsyncIterator[str]:
    """A database of this module's own: these tests forge archived heads, which would make the session
    database's log fail verification."""
    async with fresh_database(server_urls.database_url, prefix="rollbook_partitions") as url:
        await upgrade_async(url)
        yield url


@pytest.fixture
async def owner(partitioned_url: str) -> AsyncIterator[asyncpg.Connection]:
    """This module's database as its owner (the test's superuser login), with last month's partition."""
    connection = await asyncpg.connect(asyncpg_url(partitioned_url))
    await old_partition(connection, 1)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.mark.parametrize("key", ["event_id", "stream_version"])
async def test_a_duplicate_key_in_another_partition_is_refused(owner: asyncpg.Connection, key: str) -> None:
    first = filler(f"dup/{uuid.uuid4().hex[:8]}", 1)[0]
    again = dict(first)
    if key == "event_id":
        again["stream"] = first["stream"] + "-elsewhere"  # same id, a free slot: only the id repeats
    else:
        again["event_id"] = str(uuid.uuid4())  # another event at the same (stream, version)
    await insert_recorded(owner, [first], month_start(0) + timedelta(hours=1))
    with pytest.raises(asyncpg.UniqueViolationError) as refused:
        await insert_recorded(owner, [again], month_start(1) + timedelta(hours=2))
    assert refused.value.constraint_name == f"events_{key}_key"
    assert await accepted_without_the_check(owner, [again], month_start(1) + timedelta(hours=2))
    partitions = await owner.fetch(
        "SELECT DISTINCT tableoid::regclass::text FROM events WHERE event_id = $1::uuid OR stream = $2",
        first["event_id"],
        first["stream"],
    )
    assert len(partitions) == 1


async def test_a_stream_version_at_or_below_its_archived_head_is_refused(owner: asyncpg.Connection) -> None:
    stream_events = filler(f"archived/{uuid.uuid4().hex[:8]}", 1, start_version=3)
    stream = stream_events[0]["stream"]
    await owner.execute(
        "INSERT INTO stream_heads VALUES ($1, 5, $2)", stream, b"\x01" * 32
    )  # as `rollbook archive` leaves it: versions up to 5 are in files, the head stays
    with pytest.raises(asyncpg.UniqueViolationError) as refused:
        await insert_recorded(owner, stream_events, month_start(0) + timedelta(hours=1))
    assert refused.value.constraint_name == "events_stream_version_key"
    assert await accepted_without_the_check(owner, stream_events, month_start(0) + timedelta(hours=1))


async def test_the_store_skips_a_stored_id_and_continues_a_stream_after_its_archived_head(
    owner: asyncpg.Connection, partitioned_url: str
) -> None:
    """Redelivery stays a no-op across partitions, and a stream whose events were archived goes on from
    its archived version (its stream hash from the archived one)."""
    event_store = await EventStore.connect(partitioned_url)
    try:
        await _skips_and_continues(owner, event_store)
    finally:
        await event_store.close()


async def _skips_and_continues(owner: asyncpg.Connection, event_store: EventStore) -> None:
    old = filler(f"redeliver/{uuid.uuid4().hex[:8]}", 2)
    await insert_recorded(owner, old, month_start(1) + timedelta(hours=3))
    assert await event_store.append_many([envelope(e) for e in old]) == 0
    head_stream = f"CloneSet/archived/{uuid.uuid4().hex[:8]}/actions"
    await owner.execute("INSERT INTO stream_heads VALUES ($1, 7, $2)", head_stream, b"\x02" * 32)
    assert await event_store.stream_version(head_stream) == 7
    assert await event_store.stream_versions([head_stream]) == {head_stream: 7}
    nxt = filler("unused", 1)[0] | {"stream": head_stream, "stream_version": 8}
    result = await event_store.append([envelope(nxt)], expected_version=7)
    assert result.stream_version == 8
    unversioned = await event_store.append_unversioned(
        [envelope(filler("x", 1)[0] | {"stream": head_stream})]
    )
    assert unversioned[0].stream_version == 9
    row = await owner.fetchrow(
        "SELECT event_id, stream, stream_version, type, schema_version, occurred_at, recorded_at,"
        " causation_id, correlation_id, payload::text, stream_hash FROM events"
        " WHERE stream = $1 AND stream_version = 8",
        head_stream,
    )
    assert bytes(row[10]) == hashlib.sha256(b"\x02" * 32 + content_bytes(*row[:10])).digest()


SERVICE_ATTACKS = {
    # Straight into a partition: past the parent's statement trigger, so past the writers' lock.
    "insert-into-a-partition": "INSERT INTO {partition} (event_id, stream, stream_version, type,"
    " schema_version, occurred_at, payload, stream_hash, chain_hash)"
    " VALUES (gen_random_uuid(), 's', 1, 't', 1, now(), '{{}}', '\\x00', '\\x00')",
    "update-a-partition": "UPDATE {partition} SET payload = '{{}}'::jsonb",
    "delete-from-a-partition": "DELETE FROM {partition}",
    "truncate-a-partition": "TRUNCATE {partition}",
    "detach-a-partition": "ALTER TABLE events DETACH PARTITION {partition}",
    "drop-a-partition": "DROP TABLE {partition}",
    "attach-a-table": "ALTER TABLE events ATTACH PARTITION {partition} DEFAULT",
    "create-a-partition": "CREATE TABLE forged PARTITION OF events"
    " FOR VALUES FROM ('1999-01-01') TO ('1999-02-01')",
    "forge-an-archived-head": "INSERT INTO archived_stream_heads VALUES ('s', 1, '\\x00')",
    "forge-an-archive": "INSERT INTO event_archives VALUES (1, 1, 1, '\\x00', '\\x00', '{{}}', 'f', 's')",
    # The keys (0028): a deleted key lets a duplicate in, a forged one refuses an event to come.
    "delete-a-key": "DELETE FROM event_keys",
    "truncate-the-keys": "TRUNCATE event_keys",
    "forge-a-key": "INSERT INTO event_keys VALUES (gen_random_uuid())",
    # A lowered head lets a version in twice; a forged one bends a stream's chain.
    "lower-a-stream-head": "UPDATE stream_heads SET stream_version = 0",
    "delete-a-stream-head": "DELETE FROM stream_heads",
    "forge-a-stream-head": "INSERT INTO stream_heads VALUES ('s', 1, '\\x00')",
}


@pytest.mark.parametrize("duty", ["writer", "webhook", "reader"])
@pytest.mark.parametrize("attack", sorted(SERVICE_ATTACKS))
async def test_the_services_roles_cannot_touch_a_partition(
    owner: asyncpg.Connection, duty: str, attack: str
) -> None:
    partition = await old_partition(owner, 1)
    role = await owner.fetchval(f"SELECT {role_sql(duty)}")  # type: ignore[arg-type]
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        async with owner.transaction():
            await owner.execute(f'SET LOCAL ROLE "{role}"')
            await owner.execute(SERVICE_ATTACKS[attack].format(partition=partition))


REOPENINGS = {
    "delete-the-key": ("DELETE FROM event_keys WHERE event_id = $1::uuid", "event_id"),
    "lower-the-head": ("UPDATE stream_heads SET stream_version = 0 WHERE stream = $1", "stream_version"),
}


@pytest.mark.parametrize("reopening", sorted(REOPENINGS))
async def test_the_writer_cannot_reopen_a_key_to_store_a_duplicate(
    owner: asyncpg.Connection, reopening: str
) -> None:
    """The services' role tries to clear the way for a duplicate (the key of a stored event deleted, the
    head of its stream rolled back), then stores it: both steps are refused."""
    stored = filler(f"reopen/{uuid.uuid4().hex[:8]}", 1)[0]
    await insert_recorded(owner, [stored], month_start(1) + timedelta(hours=1))
    statement, key = REOPENINGS[reopening]
    again = dict(stored)
    if key == "stream_version":
        again["event_id"] = str(uuid.uuid4())
    writer = await owner.fetchval(f"SELECT {role_sql('writer')}")
    async with owner.transaction():
        await owner.execute(f'SET LOCAL ROLE "{writer}"')
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            async with owner.transaction():
                await owner.execute(statement, stored["event_id" if key == "event_id" else "stream"])
        with pytest.raises(asyncpg.UniqueViolationError) as refused:
            async with owner.transaction():
                await insert_recorded(owner, [again], month_start(0) + timedelta(hours=1))
    assert refused.value.constraint_name == f"events_{key}_key"


async def test_keys_outlive_their_partition(server_urls: ServerUrls) -> None:
    """A partition dropped as ``rollbook archive`` drops it: its event ids stay taken and its streams'
    versions go on from their heads, with the refusals the store recognises."""
    async with fresh_database(server_urls.database_url, prefix="rollbook_partitions") as url:
        await upgrade_async(url)
        connection = await asyncpg.connect(asyncpg_url(url))
        try:
            partition = await old_partition(connection, 2)
            workload = f"gone/{uuid.uuid4().hex[:8]}"
            old = filler(workload, 3)
            await insert_recorded(connection, old, month_start(2) + timedelta(hours=1))
            await connection.execute(f"ALTER TABLE events DETACH PARTITION {partition}")
            await connection.execute(f"DROP TABLE {partition}")
            assert await connection.fetchval("SELECT count(*) FROM events") == 0
            now = month_start(0) + timedelta(hours=1)
            moved = old[0] | {"stream": old[0]["stream"] + "-elsewhere"}  # the id alone repeats
            taken_slot = old[2] | {"event_id": str(uuid.uuid4())}  # the version alone repeats
            for event, key in ((moved, "event_id"), (taken_slot, "stream_version")):
                with pytest.raises(asyncpg.UniqueViolationError) as refused:
                    await insert_recorded(connection, [event], now)
                assert refused.value.constraint_name == f"events_{key}_key"
            await insert_recorded(connection, filler(workload, 1, start_version=4), now)
            store = await EventStore.connect(url)
            try:
                assert await store.stream_version(old[0]["stream"]) == 4
                assert await store.stored_ids([uuid.UUID(e["event_id"]) for e in old]) == {
                    uuid.UUID(e["event_id"]) for e in old
                }
            finally:
                await store.close()
        finally:
            await connection.close()


async def test_the_downgrade_of_0028_restores_the_checks_of_0026(server_urls: ServerUrls) -> None:
    """0028's downgrade puts 0026's trigger functions back exactly; a stream goes on across both changes
    and the log verifies."""
    functions = (
        "SELECT p.proname, pg_get_functiondef(p.oid), obj_description(p.oid, 'pg_proc') FROM pg_proc p"
        " WHERE p.proname IN ('events_chain', 'events_unique_keys') ORDER BY 1"
    )
    workload = f"down/{uuid.uuid4().hex[:8]}"
    at = month_start(0) + timedelta(hours=1)
    async with fresh_database(server_urls.database_url, prefix="rollbook_partitions") as url:
        await upgrade_async(url, "0026_events_partitioned")
        connection = await asyncpg.connect(asyncpg_url(url))
        try:
            before = await connection.fetch(functions)
            await insert_recorded(connection, filler(workload, 2), at)
            await upgrade_async(url)
            assert await connection.fetch(functions) != before
            await insert_recorded(connection, filler(workload, 1, start_version=3), at)
            await downgrade_async(url, "0026_events_partitioned")
            assert await connection.fetch(functions) == before
            assert await connection.fetchval("SELECT to_regclass('event_keys') IS NULL")
            await insert_recorded(connection, filler(workload, 1, start_version=4), at)
            with pytest.raises(asyncpg.UniqueViolationError) as refused:
                await insert_recorded(connection, filler(workload, 1, start_version=4), at)
            assert refused.value.constraint_name == "events_stream_version_key"
            store = await EventStore.connect(url)
            try:
                report = await audit_log(store)
                assert report.clean and report.rows == 4, [f.describe() for f in report.findings]
            finally:
                await store.close()
        finally:
            await connection.close()


async def test_only_the_writer_adds_partitions_and_only_by_whole_months(owner: asyncpg.Connection) -> None:
    for duty in ("reader", "webhook"):
        role = await owner.fetchval(f"SELECT {role_sql(duty)}")  # type: ignore[arg-type]
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            async with owner.transaction():
                await owner.execute(f'SET LOCAL ROLE "{role}"')
                await owner.execute("SELECT events_add_partitions(1)")
    writer = await owner.fetchval(f"SELECT {role_sql('writer')}")
    async with owner.transaction():
        await owner.execute(f'SET LOCAL ROLE "{writer}"')
        await owner.fetchval("SELECT events_add_partitions(1)")
        with pytest.raises(asyncpg.InvalidParameterValueError):
            await owner.execute("SELECT events_add_partitions(5)")
    uppers = await owner.fetchval("SELECT max(upper_bound) FROM event_partitions WHERE NOT is_default")
    assert uppers >= month_start(-2)


async def test_a_row_no_partition_covers_lands_in_the_default_partition(owner: asyncpg.Connection) -> None:
    event = filler(f"ancient/{uuid.uuid4().hex[:8]}", 1)[0]
    await insert_recorded(owner, [event], month_start(12 * 30))
    where = await owner.fetchval(
        "SELECT tableoid::regclass::text FROM events WHERE event_id = $1::uuid", event["event_id"]
    )
    assert where == "events_default"


@pytest.mark.parametrize("trail", sorted(p.name for p in TRAILS.glob("rules-v*.json.gz")))
async def test_a_recorded_trail_is_carried_through_the_conversion(
    server_urls: ServerUrls, trail: str
) -> None:
    """A trail stored before 0026, at its old schema versions: after the upgrade every row, hash, view row,
    grant and comment is as it was; at the head (0028's keys taken from its rows) it verifies and the
    store appends on; the downgrade keeps it too."""
    async with fresh_database(server_urls.database_url, prefix="rollbook_partitions") as url:
        await upgrade_async(url, "0025_native_sidecar_actions")
        workload, events = fixture_trail(trail)
        connection = await asyncpg.connect(asyncpg_url(url))
        try:
            await insert_recorded(connection, events[: len(events) // 2], month_start(3))
            await insert_recorded(connection, events[len(events) // 2 :], month_start(2))
            snapshot = (
                "SELECT global_position, event_id, recorded_at, payload::text, stream_hash, chain_hash"
                " FROM events ORDER BY global_position"
            )
            rows = await connection.fetch(snapshot)
            views = {
                view: await connection.fetch(f"SELECT * FROM {view} ORDER BY 1")
                for view in ("rollouts", "pod_actions", "partition_steps", "revisions")
            }
            grants = await connection.fetchval("SELECT relacl::text FROM pg_class WHERE relname = 'events'")
            comment = await connection.fetchval("SELECT obj_description('events'::regclass, 'pg_class')")
            await upgrade_async(url, "0026_events_partitioned")
            assert await connection.fetch(snapshot) == rows
            for view, before in views.items():
                assert await connection.fetch(f"SELECT * FROM {view} ORDER BY 1") == before, view
            assert (
                await connection.fetchval("SELECT relacl::text FROM pg_class WHERE relname = 'events'")
                == grants
            )
            assert (
                await connection.fetchval("SELECT obj_description('events'::regclass, 'pg_class')") == comment
            )
            months = await connection.fetch("SELECT DISTINCT tableoid::regclass::text FROM events ORDER BY 1")
            assert [m[0] for m in months] == [
                f"events_y{month_start(n).year:04d}m{month_start(n).month:02d}" for n in (3, 2)
            ]
            # On to the head: 0028's keys are taken from the rows (every id, each stream's last version
            # and hash), the rows stay as they are, and the store appends on.
            await upgrade_async(url)
            assert await connection.fetch(snapshot) == rows
            assert (
                await connection.fetchval("SELECT count(*) FROM event_keys k JOIN events e USING (event_id)")
                == len(events)
                == await connection.fetchval("SELECT count(*) FROM event_keys")
            )
            heads = (
                "SELECT stream, stream_version, stream_hash FROM events e WHERE stream_version ="
                " (SELECT max(stream_version) FROM events m WHERE m.stream = e.stream) ORDER BY stream"
            )
            assert await connection.fetch(heads) == await connection.fetch(
                "SELECT stream, stream_version, stream_hash FROM stream_heads ORDER BY stream"
            )
            store = await EventStore.connect(url)
            try:
                report = await audit_log(store)
                assert report.clean and report.rows == len(events), [f.describe() for f in report.findings]
                await store.append_unversioned([envelope(filler(workload, 1)[0])])
                assert (await audit_log(store)).clean
            finally:
                await store.close()
            await downgrade_async(url, "0025_native_sidecar_actions")
            assert await connection.fetch(snapshot + " LIMIT $1", len(rows)) == rows
            assert await connection.fetchval("SELECT relkind FROM pg_class WHERE relname = 'events'") == b"r"
        finally:
            await connection.close()


async def test_the_auditors_upkeep_makes_the_partitions_ahead_again(server_urls: ServerUrls) -> None:
    """Partitions ahead of now that are missing (a long stop of the auditor) are made again, as the owner's
    and out of the services' reach, by the upkeep the auditor runs with the services' store."""
    async with fresh_database(server_urls.database_url, prefix="rollbook_partitions") as url:
        await upgrade_async(url)
        connection = await asyncpg.connect(asyncpg_url(url))
        store = await EventStore.connect(url)
        try:
            ahead = await connection.fetch(
                "SELECT name FROM event_partitions WHERE lower_bound > now() ORDER BY lower_bound"
            )
            assert len(ahead) == 2
            await connection.execute(assume_sql("owner"))
            for (name,) in ahead:
                await connection.execute(f"DROP TABLE {name}")
            stopping = asyncio.Event()
            upkeep = asyncio.create_task(keep_partitions_ahead(store, 1, stopping))
            try:
                for _ in range(200):
                    if await connection.fetchval(
                        "SELECT count(*) FROM event_partitions WHERE lower_bound > now()"
                    ):
                        break
                    await asyncio.sleep(0.05)
            finally:
                stopping.set()
                await upkeep
            assert (
                await connection.fetch(
                    "SELECT name FROM event_partitions WHERE lower_bound > now() ORDER BY lower_bound"
                )
                == ahead
            )
            owner_role = await connection.fetchval(f"SELECT {role_sql('owner')}")
            owners = await connection.fetch(
                "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class WHERE relname = ANY($1::text[])",
                [r[0] for r in ahead],
            )
            assert [r[0] for r in owners] == [owner_role]
            assert await store.add_partitions(1) == 0, "nothing more to make"
        finally:
            await store.close()
            await connection.close()


async def test_the_chain_follows_the_rows_a_transaction_kept(
    partitioned_url: str, owner: asyncpg.Connection
) -> None:
    """The chain trigger remembers the last row its transaction stored: a row rolled back to a savepoint,
    and a statement that failed, are forgotten with it, and the log still verifies."""
    stream = f"CloneSet/memo/{uuid.uuid4().hex[:8]}/actions"
    rows = [e | {"stream": stream} for e in filler("memo", 4)]
    recorded = month_start(0) + timedelta(hours=5)
    async with owner.transaction():
        await insert_recorded(owner, rows[:1], recorded)
        with pytest.raises(asyncpg.UniqueViolationError):
            async with owner.transaction():  # a savepoint
                await insert_recorded(owner, rows[1:2], recorded)
                await insert_recorded(owner, rows[:1], recorded)  # fails: its id is stored
        await insert_recorded(owner, rows[1:3], recorded)
        async with owner.transaction():
            await insert_recorded(owner, rows[3:4], recorded)
            await owner.execute("SELECT 1")
    store = await EventStore.connect(partitioned_url)
    try:
        kept = await store.read_stream(stream)
        assert [e.envelope.stream_version for e in kept] == [1, 2, 3, 4]
        # Other tests of this module forge archived heads: only this stream's rows are judged.
        positions = {e.global_position for e in kept}
        report = await audit_log(store)
        assert not [f.describe() for f in report.findings if f.global_position in positions]
    finally:
        await store.close()
