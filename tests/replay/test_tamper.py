"""Tamper evidence: edits, deletions and reorderings made by a database superuser with the append-only
trigger disabled are each detected by `audit verify` and named; a rewrite that recomputes every hash is
caught by a checkpoint kept outside the database."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import msgspec
import nats.js.errors
import pytest

from services.infra.bus import Bus
from services.infra.checkpoints import (
    checkpoint_stream,
    file_checkpoints,
    published_checkpoints,
    take_checkpoint,
)
from services.infra.database import asyncpg_url, upgrade, upgrade_async
from services.infra.store import EventStore
from services.infra.transparency import (
    checkpoint_loop,
    checkpointer_for,
    directory_checkpoints,
    file_notes,
    published_notes,
    trusted_verifiers,
)
from services.model.events import PodActionFailed, PodActionSucceeded, new_event
from services.model.signed_note import SignedCheckpoint
from services.replay.audit import audit_log
from tests.plugins.database import fresh_database, lose_events_sql
from tests.plugins.servers import ServerUrls

pytestmark = pytest.mark.asyncio(loop_scope="session")

CONTENT = (
    "event_id, stream, stream_version, type, schema_version, occurred_at, recorded_at, causation_id,"
    " correlation_id, payload"
)
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
async def store(server_urls: ServerUrls) -> AsyncIterator[tuple[EventStore, str]]:
    async with fresh_database(server_urls.database_url, prefix="rollbook_tamper") as url:
        await upgrade_async(url)
        store = await EventStore.connect(url)
        try:
            for stream in ("CloneSet/prod/a/actions", "CloneSet/prod/b/actions"):
                for version in range(1, 6):
                    payload = (
                        PodActionFailed(
                            action_id=f"{stream}-{version}", reason="409 Conflict", retryable=True
                        )
                        if version == 3
                        else PodActionSucceeded(action_id=f"{stream}-{version}")
                    )
                    event = new_event(
                        payload,
                        stream=stream,
                        stream_version=version,
                        occurred_at=T0 + timedelta(seconds=version),
                        correlation_id="prod/a@rev",
                    )
                    await store.append([event], expected_version=version - 1)
            yield store, url
        finally:
            await store.close()


async def superuser(url: str, *statements: str) -> None:
    """What an attacker with superuser rights does: disable the guard triggers, change rows."""
    conn = await asyncpg.connect(asyncpg_url(url))
    try:
        async with conn.transaction():
            await conn.execute("SET session_replication_role = replica")  # no trigger fires at all
            for statement in statements:
                await conn.execute(statement)
    finally:
        await conn.close()


async def row(url: str, stream: str, version: int) -> asyncpg.Record:
    conn = await asyncpg.connect(asyncpg_url(url))
    try:
        return await conn.fetchrow(
            "SELECT global_position, event_id FROM events WHERE stream = $1 AND stream_version = $2",
            stream,
            version,
        )
    finally:
        await conn.close()


async def test_a_clean_log_verifies_clean(store: tuple[EventStore, str]) -> None:
    report = await audit_log(store[0])
    assert report.clean, [f.describe() for f in report.findings]
    assert report.rows == 10


async def test_an_edited_payload_is_detected_and_named(store: tuple[EventStore, str]) -> None:
    events, url = store
    target = await row(url, "CloneSet/prod/a/actions", 3)
    await superuser(
        url,
        "UPDATE events SET payload = jsonb_set(payload, '{reason}', '\"all good\"')"
        f" WHERE global_position = {target['global_position']}",
    )
    report = await audit_log(events)
    assert [(f.kind, f.global_position, f.event_id) for f in report.findings] == [
        ("edited", target["global_position"], str(target["event_id"]))
    ]
    assert "CloneSet/prod/a/actions v3" in report.findings[0].describe()


async def test_events_with_awkward_text_verify_clean(store: tuple[EventStore, str]) -> None:
    """Tabs, newlines, backslashes, quotes and non-ASCII text in the stream, payload and correlation id,
    and a causation id, hash in verify exactly as the chain trigger hashed them."""
    events, _ = store
    stream = "CloneSet/prod/ä\tb\\c/actions"
    cause = uuid.uuid4()
    for version in (1, 2):
        event = new_event(
            PodActionFailed(
                action_id=f'tab\t new\n line \\ "quoted" ü {version}', reason="r\r\x0b", retryable=False
            ),
            stream=stream,
            stream_version=version,
            occurred_at=T0 - timedelta(days=365 * 40, microseconds=1),  # before 2000
            causation_id=cause if version == 2 else None,
            correlation_id="prod/ä\t@rev\\" if version == 2 else None,
        )
        await events.append([event], expected_version=version - 1)
    report = await audit_log(events)
    assert report.clean, [f.describe() for f in report.findings]
    assert report.rows == 12


@pytest.mark.parametrize("stored", ["sha256('forged')", "'\\x0102'::bytea", "''::bytea"])
async def test_an_edited_stream_hash_is_detected_and_named(
    store: tuple[EventStore, str], stored: str
) -> None:
    events, url = store
    target = await row(url, "CloneSet/prod/b/actions", 4)
    await superuser(
        url, f"UPDATE events SET stream_hash = {stored} WHERE global_position = {target['global_position']}"
    )
    report = await audit_log(events)
    assert report.findings, "an edited hash must not verify"
    first = report.findings[0]
    assert (first.kind, first.global_position, first.event_id) == (
        "edited",
        target["global_position"],
        str(target["event_id"]),
    ), [f.describe() for f in report.findings]
    assert "CloneSet/prod/b/actions v4" in first.describe()
    assert "PodActionSucceeded" in first.detail


async def test_a_deleted_row_is_detected_and_named(store: tuple[EventStore, str]) -> None:
    events, url = store
    target = await row(url, "CloneSet/prod/b/actions", 2)
    await superuser(url, f"DELETE FROM events WHERE global_position = {target['global_position']}")
    report = await audit_log(events)
    removed = [f for f in report.findings if f.kind == "removed"]
    assert [(f.stream, f.stream_version) for f in removed] == [("CloneSet/prod/b/actions", 2)]
    # The global chain breaks at the row that followed it.
    assert any(
        f.kind == "chain-broken" and f.global_position == target["global_position"] + 1
        for f in report.findings
    )


async def test_two_swapped_rows_are_detected_and_named(store: tuple[EventStore, str]) -> None:
    events, url = store
    first = await row(url, "CloneSet/prod/a/actions", 2)
    second = await row(url, "CloneSet/prod/a/actions", 3)
    p1, p2 = first["global_position"], second["global_position"]
    # Swap the two rows' places in the log: every column moves with its row, only the positions exchange.
    columns = (
        "event_id, stream, stream_version, type, schema_version, occurred_at, recorded_at,"
        " causation_id, correlation_id, payload, stream_hash, chain_hash"
    )
    await superuser(
        url,
        f"CREATE TEMP TABLE moved AS SELECT * FROM events WHERE global_position IN ({p1}, {p2})",
        f"DELETE FROM events WHERE global_position IN ({p1}, {p2})",
        f"INSERT INTO events (global_position, {columns}) OVERRIDING SYSTEM VALUE"
        f" SELECT CASE global_position WHEN {p1} THEN {p2} ELSE {p1} END, {columns} FROM moved",
    )
    report = await audit_log(events)
    kinds = {(f.kind, f.global_position) for f in report.findings}
    assert ("reordered", p2) in kinds, [f.describe() for f in report.findings]
    assert any(f.global_position == p1 for f in report.findings)


async def test_a_rewritten_chain_is_caught_by_the_checkpoint_kept_outside(
    store: tuple[EventStore, str], tmp_path: Path
) -> None:
    events, url = store
    checkpoint_file = tmp_path / "checkpoints.jsonl"
    checkpoint = await take_checkpoint(events, file=checkpoint_file)
    assert checkpoint is not None
    target = await row(url, "CloneSet/prod/a/actions", 3)
    # A careful attacker edits a row and then recomputes every hash from it onwards with the database's
    # own trigger function, so the chain inside the database is consistent again.
    conn = await asyncpg.connect(asyncpg_url(url))
    try:
        async with conn.transaction():
            await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
            await conn.execute(
                "CREATE TEMP TABLE rest AS SELECT * FROM events"
                f" WHERE global_position >= {target['global_position']} ORDER BY global_position"
            )
            for statement in lose_events_sql(f"global_position >= {target['global_position']}"):
                await conn.execute(statement)
            await conn.execute(
                "UPDATE rest SET payload = jsonb_set(payload, '{reason}', '\"all good\"')"
                f" WHERE global_position = {target['global_position']}"
            )
            # Re-inserted with the chain trigger on: every hash is recomputed from the edited row on.
            await conn.execute(
                f"INSERT INTO events (global_position, {CONTENT}) OVERRIDING SYSTEM VALUE"
                f" SELECT global_position, {CONTENT} FROM rest ORDER BY global_position"
            )
            await conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    finally:
        await conn.close()
    inside = await audit_log(events)
    assert inside.clean, "the rewrite is consistent inside the database"
    outside = await audit_log(events, [("file", cp) for cp in file_checkpoints(checkpoint_file)])
    assert [(f.kind, f.global_position) for f in outside.findings] == [
        ("checkpoint-mismatch", checkpoint.global_position)
    ]


async def test_the_chain_continues_across_appends_by_every_path(store: tuple[EventStore, str]) -> None:
    events, _ = store
    batch = [
        new_event(
            PodActionSucceeded(action_id=f"many-{i}"),
            stream=f"CloneSet/prod/m{i % 3}/actions",
            stream_version=i // 3 + 1,
            occurred_at=T0,
            event_id=uuid.uuid4(),
        )
        for i in range(30)
    ]
    assert await events.append_many(batch) == 30
    unchecked = new_event(
        PodActionSucceeded(action_id="x"), stream="CloneSet/prod/a/actions", stream_version=0, occurred_at=T0
    )
    await events.append([unchecked], expected_version=None)
    report = await audit_log(events, batch_size=7)
    assert report.clean, [f.describe() for f in report.findings]
    assert report.rows == 41


async def test_checkpoints_on_jetstream_cannot_be_deleted_and_catch_a_truncated_log(
    store: tuple[EventStore, str], bus: Bus
) -> None:
    events, url = store
    try:
        checkpoint = await take_checkpoint(events, bus=bus)
        assert checkpoint is not None
        published = await published_checkpoints(bus)
        assert published[-1] == checkpoint
        info = await bus.js.stream_info(checkpoint_stream(bus))
        with pytest.raises(nats.js.errors.Error):
            await bus.js.delete_msg(checkpoint_stream(bus), info.state.last_seq)
        with pytest.raises(nats.js.errors.Error):
            await bus.js.purge_stream(checkpoint_stream(bus))
        # The newest event removed: nothing inside the database points at it any more, the checkpoint does.
        await superuser(url, f"DELETE FROM events WHERE global_position = {checkpoint.global_position}")
        report = await audit_log(events, [("JetStream", cp) for cp in await published_checkpoints(bus)])
        assert ("checkpoint-missing-row", checkpoint.global_position) in {
            (f.kind, f.global_position) for f in report.findings
        }
    finally:
        await bus.js.delete_stream(checkpoint_stream(bus))  # streams can go, messages cannot


async def test_the_auditor_signs_checkpoints_periodically_and_every_n_events(
    store: tuple[EventStore, str], bus: Bus, tmp_path: Path
) -> None:
    events, _ = store
    file = tmp_path / "checkpoints.jsonl"
    settings = msgspec.structs.replace(
        bus.settings,
        data_dir=str(tmp_path),
        audit_checkpoint_dir=str(tmp_path / "audit" / "checkpoints"),
        checkpoint_interval=3600.0,  # by count only, after the first at start
        checkpoint_every_events=3,
        checkpoint_file=str(file),
    )
    checkpointer = checkpointer_for(events, settings, bus)
    stopping = asyncio.Event()
    loop = asyncio.create_task(checkpoint_loop(checkpointer, settings, stopping))

    async def sizes_in_file(count: int) -> list[int]:
        for _ in range(600):  # 30 s: a loaded CI worker can take seconds to run the loop's round
            taken = [SignedCheckpoint.unchecked(note).body.tree_size for note in file_notes(file)]
            if len(taken) >= count:
                return taken
            await asyncio.sleep(0.05)
        raise AssertionError(f"{count} checkpoints expected, found {file_notes(file)}")

    async def append(version: int) -> None:
        more = new_event(
            PodActionSucceeded(action_id=f"later-{version}"),
            stream="CloneSet/prod/a/actions",
            stream_version=version,
            occurred_at=T0,
        )
        await events.append([more], expected_version=version - 1)

    try:
        assert await sizes_in_file(1) == [10]  # at start, over what is stored
        await append(6)
        await append(7)
        await asyncio.sleep(1.5)  # two events: below the count, and the interval is an hour
        assert [SignedCheckpoint.unchecked(n).body.tree_size for n in file_notes(file)] == [10]
        await append(8)
        assert await sizes_in_file(2) == [10, 13]
        await append(9)
        stopping.set()
        await loop
        assert await sizes_in_file(3) == [10, 13, 14], "a last checkpoint on the way out"
        published = await published_notes(bus)
    finally:
        stopping.set()
        await loop
        await bus.js.delete_stream(checkpoint_stream(bus))
    assert published == file_notes(file)
    trusted = trusted_verifiers(settings)
    assert [SignedCheckpoint.open(note, trusted).body.tree_size for note in published] == [10, 13, 14]
    assert directory_checkpoints(tmp_path / "audit" / "checkpoints") == published


async def test_the_upgrade_chains_events_recorded_before_it(server_urls: ServerUrls) -> None:
    async with fresh_database(server_urls.database_url, prefix="rollbook_chain_upgrade") as url:
        await asyncio.to_thread(upgrade, url, "0003_sidecarset_audit_views")  # the schema before the chain
        conn = await asyncpg.connect(asyncpg_url(url))
        try:  # rows as the code before the hash chain wrote them
            for version in range(1, 4):
                await conn.execute(
                    "INSERT INTO events (event_id, stream, stream_version, type, schema_version, occurred_at,"
                    " payload) VALUES ($1, $2, $3, 'PodActionSucceeded', 1, $4, $5::jsonb)",
                    uuid.uuid4(),
                    "CloneSet/prod/old/actions",
                    version,
                    T0,
                    f'{{"type": "PodActionSucceeded", "action_id": "old-{version}"}}',
                )
        finally:
            await conn.close()
        await asyncio.to_thread(upgrade, url, "head")
        store = await EventStore.connect(url)
        try:
            new = new_event(
                PodActionSucceeded(action_id="new"),
                stream="CloneSet/prod/old/actions",
                stream_version=4,
                occurred_at=T0,
            )
            await store.append([new], expected_version=3)
            report = await audit_log(store)
            assert report.clean and report.rows == 4, [f.describe() for f in report.findings]
        finally:
            await store.close()
