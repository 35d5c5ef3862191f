"""The bus against a real NATS JetStream: dedup by event id, durable consumers, dead letters, ordering."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import nats.errors
import nats.js.errors
import pytest
from nats.aio.msg import Msg
from nats.js.api import ConsumerInfo
from nats.js.client import JetStreamContext

from services.infra.bus import MSG_ID, Bus, PublishAck, in_progress_due, pull, subject_matches
from services.infra.settings import Settings
from services.model.events import Envelope, RolloutResumed, decode, encode, new_event
from tests.infra.bus_helpers import T0, eventually, paused, unique
from tests.plugins.stack import wait_for


async def test_republished_event_id_is_dropped_by_jetstream(bus: Bus) -> None:
    stream = f"CloneSet/dedup/{unique('web')}"
    event = paused(stream, 1)
    assert await bus.publish(event) is False
    assert await bus.publish(event) is True  # same event_id: the server drops it
    batch = [paused(stream, 2), event, paused(stream, 3)]
    assert await bus.publish_many(batch) == [False, True, False]

    seen: list[Envelope] = []

    async def handle(envelope: Envelope, msg: Msg) -> None:
        seen.append(envelope)

    consumer = bus.consumer(unique("dedup"), bus.event_filter(name=stream.split("/")[2]), handle)
    task = asyncio.create_task(consumer.run())
    # Delivery follows the stream's order: once version 3 (published after every duplicate) is handled, a
    # duplicate the server had stored would have been handled before it.
    await eventually(lambda: any(e.stream_version == 3 for e in seen), what="version 3")
    consumer.stop()
    await task
    assert [e.stream_version for e in seen] == [1, 2, 3]


async def test_a_pipelined_publish_answers_each_message_with_its_own_ack(bus: Bus) -> None:
    """Outcomes in publish order: where each was stored, a duplicate flagged, a subject no stream stores
    refused; and the late ack of a message an earlier call gave up on is not taken for another's."""
    stream = f"CloneSet/pipeline/{unique('web')}"
    first, second, third = (paused(stream, version) for version in (1, 2, 3))

    def message(envelope: Envelope) -> tuple[str, bytes, dict[str, str]]:
        data, headers = bus.event_message(envelope)
        return bus.subject_for(envelope), data, headers

    original = bus.nc.publish
    sends: list[asyncio.Task[None]] = []

    async def a_second_late(*args: Any, **kwargs: Any) -> None:
        async def later() -> None:
            await asyncio.sleep(1.0)
            await original(*args, **kwargs)

        sends.append(asyncio.create_task(later()))

    bus.nc.publish = a_second_late  # type: ignore[method-assign]
    try:
        assert await bus.publish_pipelined([message(first)], stall=0.2) == [None]  # its ack comes later
    finally:
        bus.nc.publish = original  # type: ignore[method-assign]
    await asyncio.wait_for(sends[0], 5)  # sent now: its ack is on its way to the same inbox
    outcomes = await bus.publish_pipelined(
        [message(second), message(first), ("nowhere.stored", b"{}", {}), message(third)], stall=5.0
    )
    acks = [outcome for outcome in outcomes if isinstance(outcome, PublishAck)]
    assert [type(outcome) for outcome in outcomes] == [
        PublishAck,
        PublishAck,
        nats.js.errors.NoStreamResponseError,
        PublishAck,
    ]
    assert [ack.duplicate for ack in acks] == [False, True, False]
    stored = {ack.seq: (await bus.js.get_msg(bus.stream, ack.seq)).headers or {} for ack in acks}
    assert [stored[ack.seq][MSG_ID] for ack in acks] == [str(e.event_id) for e in (second, first, third)]


async def test_closing_after_a_window_given_up_on_does_not_wait_for_its_acks(
    bus: Bus, settings: Settings
) -> None:
    """Acks that come after their window was given up on sit in the ack subscription's queue; closing
    the connection must not wait for someone to take them (nats-py's drain waits 30 s for that)."""
    publisher = await Bus.connect(settings, name="rollbook-tests-late-acks")
    stream = f"CloneSet/late-acks/{unique('web')}"
    envelopes = [paused(stream, version) for version in (1, 2, 3)]
    messages = [(publisher.subject_for(e), *publisher.event_message(e)) for e in envelopes]
    # Given up on at once: every ack arrives after the call returned.
    assert await publisher.publish_pipelined(messages, stall=1e-6) == [None, None, None]
    await eventually(
        lambda: publisher._acks is not None and publisher._acks._pending_queue.qsize() == 3,
        what="the late acks queued",
    )
    began = time.monotonic()
    await publisher.close()  # (a timeout around it would be swallowed: nats-py's drain catches the cancel)
    assert time.monotonic() - began < 5 and publisher.nc.is_closed


async def test_pull_hands_over_what_is_there_in_order_and_waits_for_what_comes_next(bus: Bus) -> None:
    name = unique("pull")
    stream = f"CloneSet/default/{name}"
    await bus.publish_many([paused(stream, version) for version in range(1, 6)])

    async def unused(envelope: Envelope, msg: Msg) -> None:
        raise AssertionError("only pulled here")

    durable = unique("pull")
    await bus.consumer(durable, bus.event_filter(name=name), unused).ensure()
    sub = await bus.js.pull_subscribe_bind(durable, stream=bus.stream)

    async def versions(batch: int, wait: float) -> list[int]:
        msgs = await pull(sub, batch, wait)
        for msg in msgs:
            await msg.ack()
        return [decode(msg.data).stream_version for msg in msgs]

    try:
        assert await versions(3, 5.0) == [1, 2, 3]  # at most the batch
        assert await versions(100, 5.0) == [4, 5]  # what is there, without waiting for a full batch
        with pytest.raises(nats.errors.TimeoutError):
            await versions(100, 0.5)
        # An event published while a pull waits is handed over by that pull (or, if it came after the
        # pull gave up, by the next one): nothing is lost in between.
        later = asyncio.get_running_loop().call_later(0.2, lambda: asyncio.ensure_future(
            bus.publish(paused(stream, 6))
        ))  # fmt: skip
        received: list[int] = []
        for _ in range(10):
            with contextlib.suppress(nats.errors.TimeoutError):
                received += await versions(100, 2.0)
            if received:
                break
        later.cancel()
        assert received == [6]
    finally:
        await sub.unsubscribe()


async def pull_subscription(
    bus: Bus, name: str, *, via: Bus | None = None
) -> tuple[str, JetStreamContext.PullSubscription]:
    """A durable for the events of ``name`` and a pull subscription bound to it on ``via``'s connection
    (``bus``'s by default), pulled here only."""

    async def unused(envelope: Envelope, msg: Msg) -> None:
        raise AssertionError("only pulled here")

    durable = unique("pull")
    await bus.consumer(durable, bus.event_filter(name=name), unused).ensure()
    return durable, await (via or bus).js.pull_subscribe_bind(durable, stream=bus.stream)


async def waiting_requests(bus: Bus, durable: str, count: int) -> None:
    """Returns once the durable holds ``count`` pull requests waiting for messages."""
    for _ in range(300):
        if (await bus.js.consumer_info(bus.stream, durable)).num_waiting >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{count} pull requests never waited on {durable}")


async def test_what_a_pull_took_leaves_its_subscription_free_to_drain(bus: Bus) -> None:
    # A subscription's drain (and so the bus's close) waits until every message queued for it is marked
    # done, as nats-py's next_msg does for each one it hands over.
    name = unique("pull")
    stream = f"CloneSet/default/{name}"
    await bus.publish_many([paused(stream, version) for version in (1, 2)])
    _, sub = await pull_subscription(bus, name)
    queue = sub._sub._pending_queue
    try:
        assert len(await pull(sub, 100, 5.0)) == 2
        with pytest.raises(nats.errors.TimeoutError):
            await pull(sub, 100, 0.3)  # takes the statuses that end its requests
        assert queue._unfinished_tasks == queue.qsize()  # only what nothing took yet is still pending
    finally:
        await sub.unsubscribe()


async def test_statuses_left_by_earlier_requests_do_not_end_a_waiting_pull(bus: Bus) -> None:
    name = unique("pull")
    stream = f"CloneSet/default/{name}"
    durable, sub = await pull_subscription(bus, name)
    try:
        pulling = asyncio.create_task(pull(sub, 1, 30.0))
        await waiting_requests(bus, durable, 1)
        # An earlier request's end reaching the inbox late (after the call that sent it gave up): it ends
        # this pull's first request; its waiting request outlasts the rest (a 404 answers only a no-wait
        # request, a 408 comes at the expiry).
        for status in ("408", "404", "408"):
            await bus.nc.publish(sub._deliver, b"", headers={"Status": status})
        await waiting_requests(bus, durable, 2)
        await bus.publish(paused(stream, 1))
        msgs = await pulling
        assert [decode(msg.data).stream_version for msg in msgs] == [1]
        await msgs[0].ack()
    finally:
        await sub.unsubscribe()


async def test_a_pull_on_a_closed_connection_says_so(bus: Bus) -> None:
    own = await Bus.connect(bus.settings, name="rollbook-tests-closing")
    durable, sub = await pull_subscription(bus, unique("pull"), via=own)
    pulling = asyncio.create_task(pull(sub, 10, 1.0))
    await waiting_requests(bus, durable, 1)
    await own.nc.close()
    # Not a timeout: the consumer's loop stops on a closed connection instead of pulling again.
    with pytest.raises(nats.errors.ConnectionClosedError):
        await pulling
    with pytest.raises(nats.errors.ConnectionClosedError):
        await pull(sub, 10, 1.0)


async def test_messages_taken_before_an_error_status_are_handed_over(bus: Bus) -> None:
    name = unique("pull")
    stream = f"CloneSet/default/{name}"
    durable, sub = await pull_subscription(bus, name)
    try:
        # A request that outlived the fetch that sent it brings a message into the subscription's queue...
        fetching = asyncio.create_task(sub.fetch(1, timeout=30.0))
        await waiting_requests(bus, durable, 1)
        fetching.cancel()
        await bus.publish(paused(stream, 1))
        await eventually(lambda: sub.pending_msgs == 1, what="message queued")
        # ...and the durable is deleted: the next pull takes that message, then its request is answered
        # with an error status (here the 503 a request with no responder gets).
        await bus.js.delete_consumer(bus.stream, durable)
        pulling = asyncio.create_task(pull(sub, 10, 30.0))
        await eventually(lambda: sub.pending_msgs == 0, what="queued message taken")
        await bus.nc.publish(sub._deliver, b"", headers={"Status": "503"})
        msgs = await pulling
        assert [decode(msg.data).stream_version for msg in msgs] == [1]
        pulling = asyncio.create_task(pull(sub, 10, 30.0))
        await asyncio.sleep(0)  # the pull starts: the status below answers its request
        await bus.nc.publish(sub._deliver, b"", headers={"Status": "503"})
        with pytest.raises(nats.js.errors.ServiceUnavailableError):
            await pulling  # nothing came before the status: its error
    finally:
        await sub.unsubscribe()


async def test_poison_message_is_dead_lettered_and_consumer_keeps_going(bus: Bus) -> None:
    name = unique("poison")
    stream = f"CloneSet/default/{name}"
    good_before, good_after = paused(stream, 1), paused(stream, 2)
    await bus.publish(good_before)
    garbage = b'{"event_id": "not-a-uuid", "type": 42}'
    await bus.js.publish(bus.subject_for(good_before), garbage, headers={"Nats-Msg-Id": "garbage-" + name})
    await bus.publish(good_after)

    handled: list[uuid.UUID] = []

    async def handle(envelope: Envelope, msg: Msg) -> None:
        handled.append(envelope.event_id)

    durable = unique("auditor")
    consumer = bus.consumer(durable, bus.event_filter(name=name), handle)
    task = asyncio.create_task(consumer.run())
    await eventually(lambda: len(handled) == 2 and consumer.stats.dead_lettered == 1, what="both handled")
    consumer.stop()
    await task

    assert handled == [good_before.event_id, good_after.event_id]
    [letter] = await bus.dead_letters(durable)
    assert letter.data == garbage  # the original bytes, untouched
    assert letter.reason.startswith("undecodable:") and "event_id" in letter.reason
    assert letter.original_subject == bus.subject_for(good_before)
    assert letter.deliveries == 1  # undecodable: no pointless retries
    assert letter.consumer == durable and letter.msg_id == "garbage-" + name
    assert letter.stream_sequence > 0


async def test_handler_failing_every_time_is_dead_lettered_after_max_deliver(bus: Bus) -> None:
    name = unique("failing")
    stream = f"CloneSet/default/{name}"
    events = [paused(stream, v) for v in (1, 2, 3)]
    doomed = events[1]
    attempts: dict[uuid.UUID, int] = {}
    handled: list[int] = []

    async def handle(envelope: Envelope, msg: Msg) -> None:
        attempts[envelope.event_id] = attempts.get(envelope.event_id, 0) + 1
        if envelope.event_id == doomed.event_id:
            raise RuntimeError("replicas must be >= 0")
        handled.append(envelope.stream_version)

    await bus.publish_many(events)
    durable = unique("planner")
    consumer = bus.consumer(durable, bus.event_filter(name=name), handle, retry_backoff=[0.05])
    task = asyncio.create_task(consumer.run())
    await eventually(lambda: consumer.stats.dead_lettered == 1, what="dead letter")
    await eventually(lambda: sorted(handled) == [1, 3], what="the others handled")
    consumer.stop()
    await task

    max_deliver = bus.settings.max_deliver
    assert attempts[doomed.event_id] == max_deliver
    [letter] = await bus.dead_letters(durable)
    assert letter.data == encode(doomed)
    assert "RuntimeError: replicas must be >= 0" in letter.reason
    assert letter.deliveries == max_deliver
    assert letter.msg_id == str(doomed.event_id)


async def test_a_transient_failure_is_retried_not_dead_lettered(bus: Bus) -> None:
    name = unique("flaky")
    event = paused(f"CloneSet/default/{name}", 1)
    calls = 0

    async def handle(envelope: Envelope, msg: Msg) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("postgres restarting")

    await bus.publish(event)
    durable = unique("executor")
    consumer = bus.consumer(durable, bus.event_filter(name=name), handle, retry_backoff=[0.05])
    task = asyncio.create_task(consumer.run())
    await eventually(lambda: consumer.stats.handled == 1, what="handled on retry")
    consumer.stop()
    await task
    assert calls == 2 and consumer.stats.retried == 1 and consumer.stats.dead_lettered == 0
    assert await bus.dead_letters(durable, wait=0.3) == []


async def test_workers_sharing_a_durable_split_the_work(bus: Bus) -> None:
    name = unique("shared")
    events = [paused(f"CloneSet/default/{name}", v) for v in range(1, 201)]
    await bus.publish_many(events)
    by_worker: dict[int, list[uuid.UUID]] = {0: [], 1: []}

    def handler_for(worker: int):  # type: ignore[no-untyped-def]
        async def handle(envelope: Envelope, msg: Msg) -> None:
            by_worker[worker].append(envelope.event_id)
            await asyncio.sleep(0.001)  # let the other worker fetch too

        return handle

    durable = unique("executors")
    workers = [bus.consumer(durable, bus.event_filter(name=name), handler_for(i), batch=10) for i in (0, 1)]
    await workers[0].ensure()
    tasks = [asyncio.create_task(w.run()) for w in workers]
    await eventually(lambda: len(by_worker[0]) + len(by_worker[1]) >= 200, what="all events handled")
    for worker in workers:
        worker.stop()
    await asyncio.gather(*tasks)

    everything = by_worker[0] + by_worker[1]
    assert sorted(everything) == sorted(e.event_id for e in events)  # each exactly once
    assert by_worker[0] and by_worker[1]


async def test_ordered_consumer_keeps_a_workloads_order_through_a_retry(bus: Bus) -> None:
    name = unique("ordered")
    stream = f"CloneSet/default/{name}"
    events = [paused(stream, v) for v in range(1, 7)]
    failed_once = False
    order: list[int] = []

    async def handle(envelope: Envelope, msg: Msg) -> None:
        nonlocal failed_once
        if envelope.stream_version == 3 and not failed_once:
            failed_once = True
            raise TimeoutError("kubernetes API slow")
        order.append(envelope.stream_version)

    await bus.publish_many(events)
    partition = bus.partition_of(stream)
    consumer = bus.consumer(
        unique(f"planner-p{partition}"),
        bus.event_filter(partition=partition, name=name),
        handle,
        ordered=True,
        retry_backoff=[0.2],
    )
    task = asyncio.create_task(consumer.run())
    await eventually(lambda: len(order) == 6, what="all six in order")
    consumer.stop()
    await task
    assert order == [1, 2, 3, 4, 5, 6]


async def test_stop_returns_promptly_and_leaves_unhandled_messages_for_others(bus: Bus) -> None:
    name = unique("stop")
    events = [paused(f"CloneSet/default/{name}", v) for v in range(1, 21)]
    await bus.publish_many(events)
    first: list[int] = []
    durable = unique("stopping")

    async def handle_then_stop(envelope: Envelope, msg: Msg) -> None:
        first.append(envelope.stream_version)
        if len(first) == 5:
            consumer.stop()

    consumer = bus.consumer(durable, bus.event_filter(name=name), handle_then_stop, batch=20)
    await asyncio.wait_for(consumer.run(), timeout=5)
    assert first == [1, 2, 3, 4, 5]

    rest: list[int] = []

    async def handle_rest(envelope: Envelope, msg: Msg) -> None:
        rest.append(envelope.stream_version)

    successor = bus.consumer(durable, bus.event_filter(name=name), handle_rest)
    task = asyncio.create_task(successor.run())
    # The stopped worker gave its fetched-but-unhandled messages back at once (no ack_wait to sit out).
    await eventually(lambda: len(rest) == 15, within=5, what="the rest handled by a successor")
    successor.stop()
    await task
    assert sorted(rest) == list(range(6, 21))


async def test_an_idle_consumer_is_handed_what_comes_at_once_and_stops_without_waiting_out_its_pull(
    bus: Bus,
) -> None:
    """A pull request waits on the server for an hour: a message published meanwhile is handed over as it
    comes, and ``stop()`` ends the wait (an hour would pass the test's bound otherwise)."""
    name = unique("idle")
    handled: list[int] = []

    async def handle(envelope: Envelope, msg: Msg) -> None:
        handled.append(envelope.stream_version)

    consumer = bus.consumer(unique("idle"), bus.event_filter(name=name), handle, fetch_timeout=3600)
    task = asyncio.create_task(consumer.run())
    await wait_for(lambda: _has_consumer(bus, consumer.durable), within=30, what="the durable made")
    for version in (1, 2):
        await bus.publish(paused(f"CloneSet/default/{name}", version))
        await eventually(lambda v=version: v in handled, within=30, what=f"event {version} handled")
    consumer.stop()
    await asyncio.wait_for(task, timeout=30)
    assert handled == [1, 2]


async def _has_consumer(bus: Bus, durable: str) -> bool:
    try:
        await bus.js.consumer_info(bus.stream, durable)
    except nats.js.errors.NotFoundError:
        return False
    return True


def test_subject_matching_follows_nats_wildcards() -> None:
    assert subject_matches("a.*.c", "a.b.c")
    assert not subject_matches("a.*.c", "a.b.d")
    assert not subject_matches("a.*", "a.b.c")
    assert subject_matches("a.>", "a.b.c")
    assert not subject_matches("a.>", "a")
    assert not subject_matches("a.b", "a.b.c")


async def test_a_consumer_with_several_filters_hands_over_only_those_events(bus: Bus) -> None:
    # The machine's NATS 2.9 ignores several filter subjects and delivers everything; 2.10+ filters.
    name = unique("several")
    stream = f"CloneSet/default/{name}"
    resumed = new_event(RolloutResumed(rollout_id="r1"), stream=stream, stream_version=2, occurred_at=T0)
    await bus.publish_many([paused(stream, 1), resumed, paused(stream, 3)])
    seen: list[str] = []

    async def handle(envelope: Envelope, msg: Msg) -> None:
        seen.append(envelope.type)

    filters = [bus.event_filter(event_type=t, name=name) for t in ("RolloutPaused", "RevisionsPruned")]
    consumer = bus.consumer(unique("several"), filters, handle)
    task = asyncio.create_task(consumer.run())
    # In stream order the resumption (version 2) comes before the second pause (version 3): had it been
    # handed over, it would be in ``seen`` by the time version 3 is.
    await eventually(lambda: len(seen) >= 2, what="the two paused events")
    consumer.stop()
    await task
    assert seen == ["RolloutPaused", "RolloutPaused"]


class _Delivered:
    """A delivered message as the consumer sees it, outside the filters (what NATS < 2.10 hands over)."""

    def __init__(self, subject: str) -> None:
        self.subject = subject
        self.acked = False

    async def ack(self) -> None:
        self.acked = True


async def test_events_outside_several_filters_are_acked_without_reaching_the_handler(bus: Bus) -> None:
    handled: list[Envelope] = []

    async def handle(envelope: Envelope, msg: Msg) -> None:
        handled.append(envelope)

    filters = [bus.event_filter(event_type=t) for t in ("RolloutPaused", "RevisionsPruned")]
    consumer = bus.consumer(unique("outside"), filters, handle)
    stray = _Delivered(bus.subject_for(paused("CloneSet/default/web", 1)).replace("RolloutPaused", "Other"))
    await consumer._handle(stray)  # type: ignore[arg-type]
    assert stray.acked and handled == [] and consumer.stats.filtered == 1


async def test_a_store_outage_longer_than_max_deliver_is_waited_out_not_dead_lettered(bus: Bus) -> None:
    import asyncpg

    name = unique("outage")
    event = paused(f"CloneSet/default/{name}", 1)
    calls = 0
    deliveries: list[int] = []

    async def handle(envelope: Envelope, msg: Msg) -> None:
        nonlocal calls
        calls += 1
        deliveries.append(msg.metadata.num_delivered)
        if calls <= bus.settings.max_deliver + 2:
            raise asyncpg.CannotConnectNowError("the database system is starting up")

    await bus.publish(event)
    durable = unique("planner")
    consumer = bus.consumer(durable, bus.event_filter(name=name), handle, retry_backoff=[0.05])
    task = asyncio.create_task(consumer.run())
    await eventually(lambda: consumer.stats.handled == 1, within=30, what="handled once the store is back")
    consumer.stop()
    await task
    assert consumer.stats.dead_lettered == 0
    assert set(deliveries) == {1}  # retried in place: the outage spent none of the message's deliveries
    assert await bus.dead_letters(durable, wait=0.3) == []


async def test_a_handler_slower_than_ack_wait_keeps_its_message_in_progress(bus: Bus) -> None:
    name = unique("slow")
    await bus.publish(paused(f"CloneSet/default/{name}", 1))
    durable = unique("executor")
    handled: list[tuple[str, int]] = []

    def handler_for(worker: str, seconds: float):  # type: ignore[no-untyped-def]
        async def handle(envelope: Envelope, msg: Msg) -> None:
            await asyncio.sleep(seconds)
            handled.append((worker, msg.metadata.num_delivered))

        return handle

    # ack_wait 3 s, the handler 6 s: without in-progress signals JetStream would hand the message to
    # the second worker after 3 s. (The signals go out every ack_wait / 3, so a loaded machine has two
    # seconds of slack before a late one lets the message go; with one second it lost it at load 15.)
    slow = bus.consumer(durable, bus.event_filter(name=name), handler_for("slow", 6.0), ack_wait=3.0)
    await slow.ensure()
    tasks = [asyncio.create_task(slow.run())]
    await eventually(lambda: slow._held != {}, what="the message in hand")
    other = bus.consumer(durable, bus.event_filter(name=name), handler_for("other", 0.0), ack_wait=3.0)
    tasks.append(asyncio.create_task(other.run()))
    await eventually(lambda: slow.stats.handled == 1, within=15, what="the slow handler done")

    async def settled() -> ConsumerInfo | None:
        # The ack is a publish the server applies a moment later; a message not acked would be delivered
        # again after ack_wait instead, which the assertion below catches.
        info = await bus.js.consumer_info(bus.stream, durable)
        return info if info.num_ack_pending == 0 or info.num_redelivered else None

    info = await wait_for(settled, within=10, interval=0.05, what="the message acked or delivered again")
    for consumer in (slow, other):
        consumer.stop()
    await asyncio.gather(*tasks)
    assert info.num_redelivered == 0 and info.num_ack_pending == 0
    assert handled == [("slow", 1)]


def test_messages_are_reported_in_progress_once_not_heard_of_for_a_period() -> None:
    heard = {1: 10.0, 2: 11.5, 3: 12.0}
    assert in_progress_due(heard, now=12.0, period=1.0) == [1]
    assert in_progress_due(heard, now=12.0, period=0.5) == [1, 2]
    assert in_progress_due(heard, now=12.0, period=3.0) == []
    assert in_progress_due({}, now=12.0, period=1.0) == []


def test_a_message_held_past_the_limit_is_no_longer_reported_in_progress() -> None:
    """A hung handler's message stops being covered once held ``max_held`` seconds since its fetch, so
    JetStream delivers it again after ack_wait instead of never."""
    heard = {1: 10.0, 2: 10.0}
    fetched = {1: 0.0, 2: 9.0}
    assert in_progress_due(heard, now=12.0, period=1.0, fetched=fetched, max_held=5.0) == [2]
    assert in_progress_due(heard, now=12.0, period=1.0, fetched=fetched, max_held=20.0) == [1, 2]


async def test_a_consumer_whose_stream_was_lost_makes_its_durable_again_and_goes_on(
    settings: Settings,
) -> None:
    """The bus lost its storage (the stream and every durable with it): the consumer does not wait for
    ever on a durable that no longer exists; once the stream is back it makes the durable again and
    handles what is published there."""
    suffix = uuid.uuid4().hex[:8]
    own = Settings(
        nats_url=settings.nats_url,
        nats_credentials_dir=settings.nats_credentials_dir,
        stream_name=f"RBLOST_{suffix}",
        subject_prefix=f"rblost{suffix}",
    )
    bus = await Bus.connect(own, name="rollbook-test-lost")
    await bus.ensure_stream()
    handled: list[uuid.UUID] = []

    async def handle(envelope: Envelope, msg: Msg) -> None:
        handled.append(envelope.event_id)

    consumer = bus.consumer("lost", bus.event_filter(), handle, fetch_timeout=0.2)
    task = asyncio.create_task(consumer.run())
    try:
        first = paused("CloneSet/default/lost", 1)
        await bus.publish(first)
        await eventually(lambda: handled == [first.event_id], what="the first event handled")
        await bus.js.delete_stream(own.stream_name)
        await bus.ensure_stream()
        again = paused("CloneSet/default/lost", 2)
        await bus.publish(again)
        await eventually(
            lambda: handled == [first.event_id, again.event_id], what="handled on the new stream"
        )
        assert not task.done()
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 30)
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await bus.js.delete_stream(own.stream_name)
        await bus.close()
