"""The auditor's relay (store -> bus): publishes every stored event once, in order, resumes where the
bus says it stopped, and waits out a Postgres restart instead of giving up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, cast

import asyncpg
import nats.js.errors
import pytest

import services.auditor.service as auditor
from services.auditor.service import POSITION_HEADER, Relay, partition_key
from services.infra.appended import LISTENER_NAME, AppendNotifications
from services.infra.bus import Bus
from services.infra.database import asyncpg_url
from services.infra.embedded import EmbeddedServers
from services.infra.store import EventStore
from services.model.events import decode
from tests.auditor.helpers import relay_settings
from tests.e2e.audit import published_event_ids
from tests.infra.store_helpers import batch, unique_stream
from tests.plugins.database import lose_events_sql
from tests.plugins.servers import ServerUrls
from tests.plugins.stack import wait_for

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def stored_ids(store: EventStore) -> list[str]:
    return [str(e.envelope.event_id) async for e in store.read_all()]


async def relaying(relay: Relay) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stopping = asyncio.Event()
    return stopping, asyncio.create_task(relay.run(stopping), name="relay")


async def stop(stopping: asyncio.Event, task: asyncio.Task[None]) -> None:
    stopping.set()
    await asyncio.wait_for(task, 30)


async def test_publishes_every_event_once_in_order_with_its_position(
    own_store: EventStore, own_bus: Bus
) -> None:
    stream = unique_stream()
    await own_store.append(batch(stream, 1, 30), expected_version=0)
    relay = Relay(own_store, own_bus)
    stopping, task = await relaying(relay)
    try:
        await wait_for(relay.caught_up.wait, within=30, what="the relay caught up")
        assert await published_event_ids(own_bus) == await stored_ids(own_store)
        last = await own_bus.js.get_last_msg(own_bus.stream, f"{own_bus.prefix}.ev.>")
        assert int((last.headers or {})[POSITION_HEADER]) == await own_store.head_position()
        # Each message decodes as the stored event (its payload went on as the store's JSON).
        messages = [await own_bus.js.get_msg(own_bus.stream, seq) for seq in range(1, 31)]
        assert [decode(m.data) for m in messages] == [e.envelope for e in await own_store.read_batch(0, 30)]
        assert [m.subject for m in messages] == [
            own_bus.subject_for(e.envelope, partition_key=partition_key(e.envelope.stream))
            for e in await own_store.read_batch(0, 30)
        ]
    finally:
        await stop(stopping, task)


async def test_resumes_after_a_restart_without_publishing_twice(own_store: EventStore, own_bus: Bus) -> None:
    stream = unique_stream()
    await own_store.append(batch(stream, 1, 10), expected_version=0)
    first = Relay(own_store, own_bus)
    stopping, task = await relaying(first)
    await wait_for(first.caught_up.wait, within=30, what="the first relay caught up")
    await stop(stopping, task)

    await own_store.append(batch(stream, 11, 10), expected_version=10)
    second = Relay(own_store, own_bus)
    stopping, task = await relaying(second)
    try:
        await wait_for(second.caught_up.wait, within=30, what="the second relay caught up")
        assert second.position == await own_store.head_position()
        published = await published_event_ids(own_bus)
        assert published == await stored_ids(own_store)  # each once, in store order
    finally:
        await stop(stopping, task)


async def test_waits_out_a_postgres_restart_and_publishes_what_was_stored_around_it(
    restartable_postgres: EmbeddedServers, server_urls: ServerUrls
) -> None:
    database_url = restartable_postgres.resolved.database_url  # type: ignore[union-attr]
    store = await EventStore.connect(database_url)
    bus = await Bus.connect(relay_settings(database_url, server_urls.nats_url), name="rollbook-relay-test")
    await bus.ensure_stream()
    relay = Relay(store, bus)
    stopping, task = await relaying(relay)
    try:
        stream = unique_stream()
        await store.append(batch(stream, 1, 20), expected_version=0)
        await wait_for(lambda: _published(relay, store), within=30, what="the first 20 events relayed")

        await restartable_postgres.stop_postgres(immediate=True)  # as pg_ctl stop -m immediate
        await wait_for(lambda: _is_retrying(relay), within=30, what="the relay noticed the outage")
        assert not task.done()
        await restartable_postgres.start_postgres()

        await store.append(batch(stream, 21, 20), expected_version=20)
        await wait_for(lambda: _published(relay, store), within=60, what="the relay recovered")
        assert relay.retrying is None
        published = await published_event_ids(bus)
        assert published == await stored_ids(store)
        assert len(published) == 40
        assert not task.done()
    finally:
        await stop(stopping, task)
        try:
            await bus.js.delete_stream(bus.stream)
        finally:
            await bus.close()
            await store.close()


async def _published(relay: Relay, store: EventStore) -> bool:
    return relay.position > 0 and relay.position == await store.head_position()


async def _is_retrying(relay: Relay) -> bool:
    return relay.retrying is not None


@contextlib.contextmanager
def publishing_through(bus: Bus, replacement: Callable[..., Awaitable[None]]) -> Iterator[None]:
    """Every message the bus's connection publishes goes through ``replacement`` (given the real
    ``publish``, then its arguments), standing in for a network that loses or delays them."""
    original = bus.nc.publish

    async def publish(*args: Any, **kwargs: Any) -> None:
        await replacement(original, *args, **kwargs)

    bus.nc.publish = publish  # type: ignore[method-assign]
    try:
        yield
    finally:
        bus.nc.publish = original  # type: ignore[method-assign]


@contextlib.contextmanager
def ack_stall(seconds: float) -> Iterator[None]:
    saved, auditor.PUBLISH_ACK_STALL = auditor.PUBLISH_ACK_STALL, seconds
    try:
        yield
    finally:
        auditor.PUBLISH_ACK_STALL = saved


async def test_an_unacknowledged_publish_is_published_again(own_store: EventStore, own_bus: Bus) -> None:
    """A publish lost with its ack (the connection dropped): the relay does not move past it, and
    publishes it again (deduplicated by event id) instead of waiting for its ack forever."""
    stream = unique_stream()
    await own_store.append(batch(stream, 1, 5), expected_version=0)
    relay = Relay(own_store, own_bus)
    relay.position = await own_store.head_position() - 5
    events = await own_store.read_batch_json(relay.position, 5)
    calls = 0

    async def first_one_lost(publish: Callable[..., Awaitable[None]], *args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls > 1:
            await publish(*args, **kwargs)

    with ack_stall(0.5):
        with publishing_through(own_bus, first_one_lost), pytest.raises(TimeoutError):
            await relay.publish(events)
        assert relay.position == events[0].global_position - 1  # nothing acknowledged before it
        await relay.publish(events)
        assert relay.position == events[-1].global_position
    ids = await published_event_ids(own_bus)
    wanted = [str(e.envelope.event_id) for e in events]
    # The four acknowledged at the first try, then the one that was lost; each stored once.
    assert ids[-5:] == wanted[1:] + wanted[:1]
    assert all(ids.count(event_id) == 1 for event_id in wanted)


async def test_a_publish_jetstream_refuses_stops_the_position_before_it(
    own_store: EventStore, own_bus: Bus
) -> None:
    """An error ack in the middle of the window: the position moves over the messages before it only,
    the error is raised, and the next try stores it (the ones after it are duplicates, dropped)."""
    stream = unique_stream()
    await own_store.append(batch(stream, 1, 5), expected_version=0)
    relay = Relay(own_store, own_bus)
    relay.position = await own_store.head_position() - 5
    events = await own_store.read_batch_json(relay.position, 5)
    calls = 0

    async def third_one_for_another_stream(
        publish: Callable[..., Awaitable[None]], *args: Any, **kwargs: Any
    ) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            kwargs["headers"] = {**kwargs["headers"], "Nats-Expected-Stream": "NOT_THIS_ONE"}
        await publish(*args, **kwargs)

    with publishing_through(own_bus, third_one_for_another_stream):
        with pytest.raises(nats.js.errors.APIError):
            await relay.publish(events)
    assert relay.position == events[1].global_position
    await relay.publish(events)
    assert relay.position == events[-1].global_position
    ids = await published_event_ids(own_bus)
    wanted = [str(e.envelope.event_id) for e in events]
    assert ids[-5:] == wanted[:2] + wanted[3:] + wanted[2:3]


async def test_a_refused_publish_is_retried_and_the_relay_goes_on(
    own_store: EventStore, own_bus: Bus
) -> None:
    """JetStream refusing publishes for a while (an error ack for each) is waited out like an outage: the
    relay keeps running, and once the refusals stop every event is on the bus once."""
    stream = unique_stream()
    await own_store.append(batch(stream, 1, 4), expected_version=0)
    refusals = 0

    async def refused_three_times(publish: Callable[..., Awaitable[None]], *args: Any, **kwargs: Any) -> None:
        nonlocal refusals
        if refusals < 3 and kwargs.get("headers"):  # an event, not the flush of the connection
            refusals += 1
            kwargs["headers"] = {**kwargs["headers"], "Nats-Expected-Stream": "NOT_THIS_ONE"}
        await publish(*args, **kwargs)

    relay = Relay(own_store, own_bus)
    with publishing_through(own_bus, refused_three_times):
        stopping, task = await relaying(relay)
        try:
            await asyncio.wait_for(relay.caught_up.wait(), 30)
            assert not task.done()
            assert refusals == 3
        finally:
            await stop(stopping, task)
    # Each once; a refused event goes on after those acked behind it (deduplicated, not repeated).
    published = await published_event_ids(own_bus)
    assert sorted(published) == sorted(await stored_ids(own_store)) and len(set(published)) == len(published)


async def test_a_crash_in_the_middle_of_a_window_loses_and_repeats_nothing_on_the_bus(
    own_store: EventStore, own_bus: Bus
) -> None:
    """The relay dies (its connection with it) after handing half of a 400-event window to the bus, with
    no ack read; a new relay, on a connection of its own, resumes from the bus: every stored event is on
    the bus once, in store order."""
    await own_store.append(batch(unique_stream(), 1, 400), expected_version=0)
    doomed = await Bus.connect(own_bus.settings, name="rollbook-relay-doomed")
    relay = Relay(own_store, doomed)
    relay.position = await own_store.head_position() - 400
    events = await own_store.read_batch_json(relay.position, 400)
    sent = 0
    half_sent = asyncio.Event()

    async def then_die(publish: Callable[..., Awaitable[None]], *args: Any, **kwargs: Any) -> None:
        nonlocal sent
        sent += 1
        if sent == 200:
            half_sent.set()
            await asyncio.Event().wait()  # the process dies here
        await publish(*args, **kwargs)

    with publishing_through(doomed, then_die):
        task = asyncio.create_task(relay.publish(events))
        await asyncio.wait_for(half_sent.wait(), 30)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await doomed.close()
    assert relay.position == events[0].global_position - 1

    successor = Relay(own_store, own_bus)
    stopping, running = await relaying(successor)
    try:
        await wait_for(successor.caught_up.wait, within=30, what="the successor caught up")
    finally:
        await stop(stopping, running)
    assert await published_event_ids(own_bus) == await stored_ids(own_store)


async def test_acks_that_keep_coming_are_waited_for_however_long_the_batch_takes(
    own_store: EventStore, own_bus: Bus
) -> None:
    """Only a stall counts: a batch whose acks arrive one by one, each within the stall bound but all
    together past it (a busy machine), is acknowledged in full, not published again."""
    stream = unique_stream()
    await own_store.append(batch(stream, 1, 4), expected_version=0)
    relay = Relay(own_store, own_bus)
    relay.position = await own_store.head_position() - 4
    events = await own_store.read_batch_json(relay.position, 4)
    sent = 0
    delayed: list[asyncio.Task[None]] = []

    async def one_every_0_3s(publish: Callable[..., Awaitable[None]], *args: Any, **kwargs: Any) -> None:
        nonlocal sent
        sent += 1

        async def later(after: float) -> None:
            await asyncio.sleep(after)
            await publish(*args, **kwargs)

        delayed.append(asyncio.create_task(later(0.3 * sent)))

    with ack_stall(0.5), publishing_through(own_bus, one_every_0_3s):
        await relay.publish(events)  # 1.2 s in all, an ack every 0.3 s
    assert relay.position == events[-1].global_position
    assert all(task.done() for task in delayed)


async def test_a_stream_lost_behind_the_store_is_made_again_with_the_original_events(
    own_store: EventStore, own_bus: Bus
) -> None:
    """The bus loses everything (its storage wiped): the relay makes the stream again and publishes every
    event it held as itself (same id, same bytes), reporting the gap until it is closed."""
    stream = unique_stream()
    await own_store.append(batch(stream, 1, 12), expected_version=0)
    reports: list[str | None] = []
    relay = Relay(own_store, own_bus, on_gap=reports.append)
    stopping, task = await relaying(relay)
    try:
        await wait_for(relay.caught_up.wait, within=30, what="the relay caught up")
        await wait_for(
            lambda: _true(relay.held_from == 1), within=30, what="the relay saw what the bus holds"
        )
        before = [await own_bus.js.get_msg(own_bus.stream, seq) for seq in range(1, 13)]
        await own_bus.js.delete_stream(own_bus.stream)
        await own_store.append(batch(stream, 13, 3), expected_version=12)

        async def published_again() -> bool:
            try:
                return await published_event_ids(own_bus) == await stored_ids(own_store)
            except nats.js.errors.NotFoundError:
                return False  # not made again yet

        await wait_for(published_again, within=30, what="every stored event on the new stream")
        after = [await own_bus.js.get_msg(own_bus.stream, seq) for seq in range(1, 13)]
        assert [m.data for m in after] == [m.data for m in before]
        assert [(m.headers or {})["Nats-Msg-Id"] for m in after] == [
            (m.headers or {})["Nats-Msg-Id"] for m in before
        ]
        await wait_for(lambda: _true(reports[-1:] == [None]), within=30, what="the gap closed")
        opened = reports[0]
        assert opened is not None and opened.startswith("the bus lost events 1..") and "stream" in opened
        assert relay.detail()["bus_gap"] is None
    finally:
        await stop(stopping, task)


async def _true(value: bool) -> bool:
    return value


async def test_events_a_failover_lost_from_the_store_are_named_and_what_follows_is_published(
    own_store: EventStore, own_bus: Bus
) -> None:
    """The store goes back behind the bus (a standby promoted without the primary's last commits, here
    those commits deleted): the relay names each published event the store lost and publishes what the
    new primary commits, though its positions may be ones the relay had passed."""
    stream, other = unique_stream(), unique_stream()
    await own_store.append(batch(stream, 1, 6), expected_version=0)
    relay = Relay(own_store, own_bus)
    stopping, task = await relaying(relay)
    try:
        await wait_for(relay.caught_up.wait, within=30, what="the relay caught up")
        lost = [e async for e in own_store.read_all()][-2:]
        # As the database's superuser: the store's own connections act as the writer, who may not.
        url = own_store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        connection = await asyncpg.connect(url)
        try:
            await connection.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
            for statement in lose_events_sql(f"global_position >= {lost[0].global_position}"):
                await connection.execute(statement)
            await connection.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
        finally:
            await connection.close()
        await own_store.append(batch(other, 1, 3), expected_version=0)

        async def carried_again() -> bool:
            try:
                message = await own_bus.js.get_last_msg(
                    own_bus.stream, own_bus.subject_for(lost[-1].envelope)
                )
            except nats.js.errors.NotFoundError:
                return False
            return (message.headers or {}).get(POSITION_HEADER) == str(again.global_position)

        async def named_and_published() -> bool:
            return relay.detail()["store_lost"] is not None and set(await stored_ids(own_store)) <= set(
                await published_event_ids(own_bus)
            )

        await wait_for(named_and_published, within=30, what="the lost named, the new primary's published")
        named = relay.detail()["store_lost"]
        assert named["count"] == 2
        assert [e["event_id"] for e in named["events"]] == [str(e.envelope.event_id) for e in lost]
        assert {e["stream"] for e in named["events"]} == {stream}
        # Nothing took their versions: the relay put both back from the bus as themselves, at new
        # positions, where the bus must carry them again, not drop them as duplicates.
        back = await own_store.read_stream(stream, lost[0].envelope.stream_version)
        assert [e.envelope for e in back] == [e.envelope for e in lost]
        again = back[-1]
        await wait_for(carried_again, within=30, what="the lost event stored anew, on the bus again")
    finally:
        await stop(stopping, task)


async def test_a_position_on_a_subject_other_than_the_relays_does_not_make_it_skip_events(
    own_store: EventStore, own_bus: Bus
) -> None:
    """Attack: an identity that may publish on the stream's dead-letter subjects publishes a message with
    a position header at the store's head; a relay restarting must not resume after it, leaving the
    events it had yet to publish unpublished. Only the relay publishes on event subjects."""
    stream = unique_stream()
    await own_store.append(batch(stream, 1, 3), expected_version=0)
    relay = Relay(own_store, own_bus)
    stopping, task = await relaying(relay)
    await wait_for(relay.caught_up.wait, within=30, what="the relay caught up")
    await stop(stopping, task)
    published = relay.position
    await own_store.append(batch(stream, 4, 6), expected_version=3)
    await own_bus.js.publish(
        own_bus.dead_letter_subject("executor"),
        b"{}",
        stream=own_bus.stream,
        headers={POSITION_HEADER: str(await own_store.head_position())},
    )

    assert await Relay(own_store, own_bus).resume_position() == published


@contextlib.asynccontextmanager
async def notified_relay(
    database_url: str, store: EventStore, bus: Bus, pace_interval: float = 0.0
) -> AsyncIterator[AppendNotifications]:
    """A relay told of appends by a listener LISTENing before it starts, caught up: from its first read
    on, it reads only when told (or after an hour)."""
    notifications = AppendNotifications(database_url)
    listener_stopping = asyncio.Event()
    listener = asyncio.create_task(notifications.run(listener_stopping), name="append-listener")
    try:
        await wait_for(lambda: _true(notifications.listening), within=30, what="the listener LISTENs")
        relay = Relay(store, bus, notifications=notifications, idle_poll=3600, pace_interval=pace_interval)
        stopping, task = await relaying(relay)
        try:
            await wait_for(relay.caught_up.wait, within=30, what="the relay caught up")
            yield notifications
        finally:
            await stop(stopping, task)
    finally:
        await stop(listener_stopping, listener)


async def _true(value: bool) -> bool:
    return value


async def published(bus: Bus, event_id: str) -> bool:
    return event_id in await published_event_ids(bus)


async def test_an_appended_event_is_published_when_its_commit_is_notified_not_at_a_poll(
    own_database_url: str, own_store: EventStore, own_bus: Bus
) -> None:
    async with notified_relay(own_database_url, own_store, own_bus) as notifications:
        stream = unique_stream()
        for version in (1, 2):
            event = batch(stream, version, 1)[0]
            await own_store.append([event], expected_version=version - 1)
            await wait_for(
                lambda e=event: published(own_bus, str(e.event_id)), within=30, what="the event published"
            )
        assert notifications.notifications >= 2
        assert notifications.connections == 1  # never reconnected: no catch-up read explains it
        assert await published_event_ids(own_bus) == await stored_ids(own_store)


async def test_the_relay_catches_up_and_listens_again_when_the_listening_connection_is_dropped(
    own_database_url: str, own_store: EventStore, own_bus: Bus
) -> None:
    async with notified_relay(own_database_url, own_store, own_bus) as notifications:
        admin = await asyncpg.connect(asyncpg_url(own_database_url))
        try:
            # The listening session is killed (as a Postgres restart or a failover would end it), and events
            # are appended while it is gone or coming back: none of them may wait for the hourly poll.
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = $1",
                LISTENER_NAME,
            )
            assert killed == 1
            stream = unique_stream()
            first = batch(stream, 1, 3)
            await own_store.append(first, expected_version=0)
            await wait_for(
                lambda: published(own_bus, str(first[-1].event_id)), within=30, what="caught up again"
            )
            await wait_for(
                lambda: _true(notifications.listening and notifications.connections == 2),
                within=30,
                what="the listener LISTENs again",
            )
            later = batch(stream, 4, 1)
            await own_store.append(later, expected_version=3)
            await wait_for(
                lambda: published(own_bus, str(later[0].event_id)), within=30, what="the next event published"
            )
            assert await published_event_ids(own_bus) == await stored_ids(own_store)
        finally:
            await admin.close()


class CountingReads:
    """The event store, counting the relay's reads that found events (one that finds none, after a
    notification that came late, is not what pacing is about)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.reads = 0

    async def read_batch_json(self, *args: Any, **kwargs: Any) -> Any:
        batch = await self.store.read_batch_json(*args, **kwargs)
        self.reads += bool(batch)
        return batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def trickle_reads(
    database_url: str, store: EventStore, bus: Bus, pace_interval: float, spacing: float
) -> tuple[int, bool]:
    """Four appends ``spacing`` seconds apart (a rollout held to the API rate): how many reads of the relay
    found them, and whether the first was read before the pace interval had passed; all are published."""
    counting = CountingReads(store)
    relayed = cast(EventStore, counting)
    async with notified_relay(database_url, relayed, bus, pace_interval=pace_interval):
        await asyncio.sleep(pace_interval)  # a quiet spell since the relay caught up
        before = counting.reads
        stream = unique_stream()
        events = [batch(stream, version, 1)[0] for version in range(1, 5)]
        first_on_time = False
        for version, event in enumerate(events, start=1):
            await store.append([event], expected_version=version - 1)
            if version == 1:
                # Read at once (the relay's reads are counted as they return; the bus is slower to ask).
                with contextlib.suppress(AssertionError):
                    await wait_for(
                        lambda: _true(counting.reads > before),
                        within=pace_interval * 0.75 if pace_interval else 30,
                        interval=0.01,
                        what="the first event read",
                    )
                    first_on_time = True
            else:
                await asyncio.sleep(spacing)
            if not pace_interval:  # unpaced, each is read before the next is stored, however slow the host
                await wait_for(
                    lambda v=version: _true(counting.reads - before >= v),
                    interval=0.01,
                    what="the event read",
                )
        await wait_for(
            lambda: published(bus, str(events[-1].event_id)), within=30, what="the last event published"
        )
        return counting.reads - before, first_on_time


async def test_appends_trickling_in_within_the_pace_interval_are_one_read_a_lone_one_waits_for_none(
    own_database_url: str, own_store: EventStore, own_bus: Bus
) -> None:
    paced, first_on_time = await trickle_reads(own_database_url, own_store, own_bus, 1.0, spacing=0.1)
    assert first_on_time
    assert paced == 2
    unpaced, _ = await trickle_reads(own_database_url, own_store, own_bus, 0.0, spacing=0.1)
    assert unpaced == 4
    assert await published_event_ids(own_bus) == await stored_ids(own_store)
