"""EventStore against a real Postgres: appends, optimistic concurrency, idempotency, reads."""

from __future__ import annotations

import asyncio
import re

import asyncpg
import pytest

from services.infra import store as store_module
from services.infra.database import asyncpg_url
from services.infra.store import ConcurrencyError, EventStore
from services.model.upcasting import PayloadDecoder
from services.replay.audit import audit_log
from tests.infra.store_helpers import batch, pod_action, unique_stream


async def test_appended_events_read_back_identical(event_store: EventStore) -> None:
    stream = unique_stream()
    events = batch(stream, 1, 3)
    result = await event_store.append(events, expected_version=0)
    assert (result.appended, result.skipped, result.stream_version) == (3, 0, 3)
    stored = await event_store.read_stream(stream)
    assert [s.envelope for s in stored] == events
    assert [s.envelope.stream_version for s in stored] == [1, 2, 3]
    positions = [s.global_position for s in stored]
    assert positions == sorted(positions) and result.last_position == positions[-1]
    assert await event_store.stream_version(stream) == 3
    assert [s.envelope for s in await event_store.read_stream(stream, from_version=2)] == events[1:]


async def test_read_streams_reads_each_stream_from_its_own_version_in_one_call(
    event_store: EventStore,
) -> None:
    # Named so that their sort order differs from the order asked for: the answer follows the request.
    first, second, empty = "CloneSet/test/z" + unique_stream()[-10:], unique_stream(), unique_stream()
    events = {first: batch(first, 1, 4), second: batch(second, 1, 3)}
    for stream_events in events.values():
        await event_store.append(stream_events, expected_version=0)
    answer = await event_store.read_streams([(first, 3), (empty, 1), (second, 1)])
    assert [[s.envelope for s in part] for part in answer] == [events[first][2:], [], events[second]]
    assert await event_store.read_streams([(second, 4)]) == [[]]


async def test_read_streams_reads_only_the_asked_range_of_each_stream(event_store: EventStore) -> None:
    # The planner's catch-up runs every round: it must cost the few new rows of its streams, not a scan of
    # the whole log (a join of the unnest was planned as a hash join over a sequential scan of events).
    # A workload's streams are most of the log (one big CloneSet): the case the plain join got wrong.
    stream, other = unique_stream(), unique_stream()
    await event_store.append_many([event for name in (stream, other) for event in batch(name, 1, 2000)])
    await event_store.query("ANALYZE events")
    plan = "\n".join(
        row[0]
        for row in await event_store.query(
            "EXPLAIN " + store_module._READ_STREAMS_SQL, [stream, other], [998, 1000]
        )
    )
    # ``events`` is partitioned by month: a partition with no rows may be "scanned" (nothing to read),
    # the ones holding the log must be read through the index.
    scanned = re.findall(r"Seq Scan on (\w+)", plan)
    for partition in scanned:
        rows = await event_store.query(
            "SELECT count(*) FROM events WHERE tableoid::regclass::text = $1", partition
        )
        assert rows[0][0] == 0, plan
    answer = await event_store.read_streams([(stream, 1998), (other, 2000)])
    assert [[s.envelope.stream_version for s in part] for part in answer] == [[1998, 1999, 2000], [2000]]


async def test_read_streams_lets_other_tasks_run_while_it_decodes_a_long_history(
    event_store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A planner rebuilding a big CloneSet reads its whole history at once; its Lease renewals and the
    # other workloads' rounds must get turns while that history is decoded, not only while it is fetched.
    stream = unique_stream()
    count = 3 * store_module.DECODE_SLICE
    await event_store.append(batch(stream, 1, count), expected_version=0)
    turns = 0

    async def other_task() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    decoder = PayloadDecoder()
    decode = decoder.decode_current
    turns_at_decode: list[int] = []

    def recording_decode(payload: bytes | str) -> object:
        turns_at_decode.append(turns)
        return decode(payload)

    monkeypatch.setattr(decoder, "decode_current", recording_decode)
    monkeypatch.setattr(event_store, "decoder", decoder)
    ticker = asyncio.create_task(other_task())
    try:
        [answer] = await event_store.read_streams([(stream, 1)])
    finally:
        ticker.cancel()
    assert [s.envelope.stream_version for s in answer] == list(range(1, count + 1))
    # The other task ran between the first and the last row decoded, at least once per slice.
    assert len(set(turns_at_decode)) >= 3, sorted(set(turns_at_decode))


async def test_empty_stream_is_at_version_zero(event_store: EventStore) -> None:
    stream = unique_stream()
    assert await event_store.stream_version(stream) == 0
    assert await event_store.read_stream(stream) == []


async def test_stale_expected_version_raises_and_stores_nothing(event_store: EventStore) -> None:
    stream = unique_stream()
    await event_store.append(batch(stream, 1, 2), expected_version=0)
    late = batch(stream, 2, 3)  # written by someone who believed the stream was at version 1
    with pytest.raises(ConcurrencyError) as caught:
        await event_store.append(late, expected_version=1)
    assert (caught.value.stream, caught.value.expected, caught.value.actual) == (stream, 1, 2)
    assert stream in str(caught.value) and "expected version 1" in str(caught.value)
    assert await event_store.stream_version(stream) == 2
    stored_ids = {s.envelope.event_id for s in await event_store.read_stream(stream)}
    assert not {e.event_id for e in late} & stored_ids


async def test_two_concurrent_appenders_at_one_version_exactly_one_wins(event_store: EventStore) -> None:
    for _ in range(15):
        stream = unique_stream()
        await event_store.append(batch(stream, 1, 2), expected_version=0)
        first, second = batch(stream, 3, 5), batch(stream, 3, 5)
        outcomes = await asyncio.gather(
            event_store.append(first, expected_version=2),
            event_store.append(second, expected_version=2),
            return_exceptions=True,
        )
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(errors) == 1 and isinstance(errors[0], ConcurrencyError), outcomes
        assert errors[0].expected == 2 and errors[0].actual == 7
        winner = first if not isinstance(outcomes[0], BaseException) else second
        stored = await event_store.read_stream(stream, from_version=3)
        assert [s.envelope for s in stored] == winner  # all of the winner, nothing of the loser
        assert await event_store.stream_version(stream) == 7


async def test_reappending_stored_events_stores_nothing(event_store: EventStore) -> None:
    stream = unique_stream()
    events = batch(stream, 1, 4)
    await event_store.append(events, expected_version=0)
    head = await event_store.head_position()

    again = await event_store.append(events, expected_version=0)  # a redelivery: stale version, same ids
    assert (again.appended, again.skipped, again.stream_version, again.events) == (0, 4, 4, [])
    unchecked = await event_store.append(events[1:3], expected_version=None)
    assert (unchecked.appended, unchecked.skipped) == (0, 2)
    assert await event_store.append_many(events) == 0

    assert await event_store.head_position() == head
    assert [s.envelope for s in await event_store.read_stream(stream)] == events


async def test_redelivered_prefix_is_skipped_and_the_rest_appended(event_store: EventStore) -> None:
    stream = unique_stream()
    events = batch(stream, 1, 3)
    await event_store.append(events[:1], expected_version=0)
    result = await event_store.append(events, expected_version=0)
    assert (result.appended, result.skipped, result.stream_version) == (2, 1, 3)
    assert [s.envelope for s in await event_store.read_stream(stream)] == events


async def test_concurrent_duplicate_appends_store_once(event_store: EventStore) -> None:
    stream = unique_stream()
    events = batch(stream, 1, 3)
    results = await asyncio.gather(*(event_store.append(events, expected_version=0) for _ in range(4)))
    assert sorted(r.appended for r in results) == [0, 0, 0, 3]
    assert [s.envelope for s in await event_store.read_stream(stream)] == events


async def test_unchecked_append_takes_the_next_versions(event_store: EventStore) -> None:
    stream = unique_stream()
    await event_store.append(batch(stream, 1, 2), expected_version=0)
    loose = [pod_action(stream, 1, index=9), pod_action(stream, 1, index=10)]  # versions are ignored
    result = await event_store.append(loose, expected_version=None)
    assert [e.stream_version for e in result.events] == [3, 4]
    stored = await event_store.read_stream(stream, from_version=3)
    assert [s.envelope.event_id for s in stored] == [e.event_id for e in loose]


async def test_concurrent_unchecked_appends_all_land_consecutively(event_store: EventStore) -> None:
    stream = unique_stream()
    await asyncio.gather(*(event_store.append(batch(stream, 1, 2), expected_version=None) for _ in range(6)))
    stored = await event_store.read_stream(stream)
    assert [s.envelope.stream_version for s in stored] == list(range(1, 13))


async def test_unversioned_append_stores_many_streams_in_one_statement(event_store: EventStore) -> None:
    # Two streams interleaved, one already at version 2: each takes its next versions in the order given.
    first, second = unique_stream(), unique_stream()
    await event_store.append(batch(first, 1, 2), expected_version=0)
    first_new = [pod_action(first, 1, index=i) for i in (10, 11, 12)]  # versions are ignored
    second_new = [pod_action(second, 1, index=i) for i in (20, 21)]
    interleaved = [first_new[0], second_new[0], first_new[1], second_new[1], first_new[2]]
    results = await event_store.append_unversioned(interleaved)
    assert [(r.stream, r.appended, r.skipped, r.stream_version) for r in results] == [
        (first, 3, 0, 5),
        (second, 2, 0, 2),
    ]
    assert [[e.stream_version for e in r.events] for r in results] == [[3, 4, 5], [1, 2]]
    for stream, given in ((first, first_new), (second, second_new)):
        stored = await event_store.read_stream(stream)
        assert [s.envelope.event_id for s in stored[-len(given) :]] == [e.event_id for e in given]
        assert [s.envelope.stream_version for s in stored] == list(range(1, len(stored) + 1))
    # Global positions follow the order given, across streams: what the relay publishes in.
    positions = {
        s.envelope.event_id: s.global_position
        for stream in (first, second)
        for s in await event_store.read_stream(stream)
    }
    assert [positions[e.event_id] for e in interleaved] == sorted(positions[e.event_id] for e in interleaved)
    assert results[0].last_position == positions[first_new[-1].event_id]


async def test_unversioned_append_skips_stored_and_repeated_events(event_store: EventStore) -> None:
    first, second, third = unique_stream(), unique_stream(), unique_stream()
    stored_before = batch(first, 1, 2)
    await event_store.append(stored_before, expected_version=0)
    fresh = [pod_action(first, 1, index=5), pod_action(second, 1, index=6)]
    # A redelivered stored event, a new one given twice, and a stream with nothing new.
    results = await event_store.append_unversioned(
        [stored_before[1], fresh[0], fresh[1], fresh[0], pod_action(third, 1, index=7)]
    )
    assert [(r.stream, r.appended, r.skipped) for r in results] == [
        (first, 1, 1),
        (second, 1, 0),
        (third, 1, 0),
    ]
    again = await event_store.append_unversioned([*fresh, stored_before[0]])
    assert [(r.stream, r.appended, r.skipped, r.stream_version, r.last_position) for r in again] == [
        (first, 0, 2, 3, None),
        (second, 0, 1, 1, None),
    ]
    assert [s.envelope.event_id for s in await event_store.read_stream(first)] == [
        *(e.event_id for e in stored_before),
        fresh[0].event_id,
    ]


async def test_concurrent_unversioned_appends_of_shared_streams_all_land_consecutively(
    event_store: EventStore,
) -> None:
    streams = [unique_stream() for _ in range(3)]
    writers = [
        [pod_action(stream, 1, index=writer * 10 + i) for i in range(2) for stream in streams]
        for writer in range(5)
    ]
    await asyncio.gather(*(event_store.append_unversioned(events) for events in writers))
    for stream in streams:
        stored = await event_store.read_stream(stream)
        assert [s.envelope.stream_version for s in stored] == list(range(1, 11))
        # Each writer's events of one stream stay in its order.
        for events in writers:
            mine = [e.event_id for e in events if e.stream == stream]
            assert [s.envelope.event_id for s in stored if s.envelope.event_id in mine] == mine
    report = await audit_log(event_store)  # the hash chain holds over rows stored many streams at once
    assert report.findings == []


async def test_bad_batches_are_refused_before_touching_the_database(event_store: EventStore) -> None:
    stream = unique_stream()
    with pytest.raises(ValueError, match="one stream"):
        await event_store.append([pod_action(stream, 1), pod_action(unique_stream(), 2)], expected_version=0)
    with pytest.raises(ValueError, match="expected 2"):
        await event_store.append([pod_action(stream, 1), pod_action(stream, 3)], expected_version=0)
    with pytest.raises(ValueError, match="twice"):
        event = pod_action(stream, 1)
        await event_store.append([event, event], expected_version=None)
    with pytest.raises(ValueError, match="at least one"):
        await event_store.append([], expected_version=0)
    with pytest.raises(ValueError, match="expected_version must be 0"):
        await event_store.append([pod_action(stream, 0)], expected_version=-1)
    with pytest.raises(ValueError, match="stream_version >= 1"):
        await event_store.append_many([pod_action(stream, 0)])
    assert await event_store.stream_version(stream) == 0


async def test_append_many_is_idempotent_and_refuses_a_taken_version(event_store: EventStore) -> None:
    streams = [unique_stream() for _ in range(3)]
    events = [e for s in streams for e in batch(s, 1, 4)]
    assert await event_store.append_many(events) == 12
    assert await event_store.append_many(events[::-1]) == 0
    usurper = pod_action(streams[1], 2, index=42)  # a different event claiming a taken version
    extra = pod_action(streams[0], 5)
    with pytest.raises(ConcurrencyError) as caught:
        await event_store.append_many([extra, usurper])
    assert caught.value.stream == streams[1] and "version 2 is already held" in str(caught.value)
    assert await event_store.stream_version(streams[0]) == 4  # all or nothing: `extra` was not stored


async def test_read_all_returns_everything_after_a_position_in_order(event_store: EventStore) -> None:
    start = await event_store.head_position()
    streams = [unique_stream() for _ in range(3)]
    for s in streams:
        await event_store.append(batch(s, 1, 5), expected_version=0)
    seen = [e async for e in event_store.read_all(start, batch_size=4)]
    mine = [e for e in seen if e.envelope.stream in streams]
    assert len(mine) == 15
    positions = [e.global_position for e in seen]
    assert positions == sorted(set(positions)) and positions[0] > start
    assert await event_store.head_position() == positions[-1]


async def test_read_all_batches_pages_through_everything(event_store: EventStore) -> None:
    start = await event_store.head_position()
    stream = unique_stream()
    await event_store.append(batch(stream, 1, 7), expected_version=0)
    pages = [page async for page in event_store.read_all_batches(start, batch_size=3)]
    mine = [e.envelope.stream_version for page in pages for e in page if e.envelope.stream == stream]
    assert mine == list(range(1, 8))
    assert all(len(page) <= 3 for page in pages) and len(pages) >= 3
    assert await event_store.read_batch(await event_store.head_position(), limit=10) == []


async def test_read_correlation_returns_one_rollout(event_store: EventStore) -> None:
    rollout = f"rollout-{unique_stream()}"
    stream = unique_stream()
    await event_store.append(batch(stream, 1, 2, rollout=rollout), expected_version=0)
    await event_store.append(batch(stream, 3, 1, rollout="other"), expected_version=2)
    assert [s.envelope.stream_version for s in await event_store.read_correlation(rollout)] == [1, 2]


async def test_the_database_refuses_update_delete_and_truncate(
    database_url: str, event_store: EventStore
) -> None:
    stream = unique_stream()
    await event_store.append(batch(stream, 1, 1), expected_version=0)
    conn = await asyncpg.connect(asyncpg_url(database_url))
    try:
        for statement in (
            "UPDATE events SET type = 'Forged' WHERE stream = $1",
            "DELETE FROM events WHERE stream = $1",
            "DELETE FROM events WHERE stream = $1 || 'no such stream'",
        ):
            with pytest.raises(asyncpg.PostgresError, match="append-only"):
                await conn.execute(statement, stream)
        with pytest.raises(asyncpg.PostgresError, match="append-only: TRUNCATE refused"):
            await conn.execute("TRUNCATE events")
        row = await conn.fetchrow("SELECT type, stream_version FROM events WHERE stream = $1", stream)
        assert tuple(row) == ("PodActionRequested", 1)
    finally:
        await conn.close()


async def test_store_recovers_after_its_connections_are_killed(database_url: str) -> None:
    """A Postgres restart or failover kills pooled connections; the next call must not fail on them."""
    store = await EventStore.connect(database_url)
    try:
        stream = unique_stream()
        warm_up = (store.append(batch(unique_stream(), 1, 1), expected_version=0) for _ in range(3))
        await asyncio.gather(*warm_up)  # three pooled connections to kill
        admin = await asyncpg.connect(asyncpg_url(database_url))
        try:
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND application_name = '' AND backend_type = 'client backend'"
            )
        finally:
            await admin.close()
        assert killed >= 1
        await asyncio.sleep(0.2)  # the client sees the server close the idle connections
        result = await store.append(batch(stream, 1, 2), expected_version=0)
        assert result.appended == 2
        assert len(await store.read_stream(stream)) == 2
    finally:
        await store.close()
