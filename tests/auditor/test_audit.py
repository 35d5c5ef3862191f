"""The auditor's audit consumer (bus -> store): every event on the bus ends up stored. A message the relay
published (it carries the store position) is settled without writing only when that very event is stored
there; an event published directly, or one the store no longer has, is stored; a different event claiming
a stored (stream, version) is dead-lettered with the reason."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from services.auditor.service import POSITION_HEADER, Audit, KnownStored, Relay
from services.infra.bus import MSG_ID, Bus, Consumer
from services.infra.store import EventStore
from services.model.events import Envelope, encode
from tests.infra.store_helpers import batch, pod_action, unique_stream
from tests.plugins.stack import wait_for

pytestmark = pytest.mark.asyncio(loop_scope="session")


@asynccontextmanager
async def auditing(store: EventStore, bus: Bus, known: KnownStored | None = None) -> AsyncIterator[Consumer]:
    """The audit consumer running as in the auditor (with a quick retry, so a conflict is dead-lettered
    on its second delivery within a second)."""
    audit = Audit(store, bus, known)
    durable = f"audit-{uuid.uuid4().hex[:8]}"
    consumer = bus.consumer(durable, bus.event_filter(), audit.handle, batch=256, retry_backoff=(0.2,))
    task = asyncio.create_task(consumer.run(), name="audit-consumer")
    try:
        yield consumer
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 30)


async def publish_as_relayed(bus: Bus, envelope: Envelope, position: int) -> None:
    """A message as the relay sends it: event id as Nats-Msg-Id, the store position in its header."""
    await bus.js.publish(
        bus.subject_for(envelope),
        encode(envelope),
        stream=bus.stream,
        headers={MSG_ID: str(envelope.event_id), POSITION_HEADER: str(position)},
    )


async def relay_everything(store: EventStore, bus: Bus) -> None:
    await Relay(store, bus).publish(await store.read_batch_json(0, 1000))


async def settled(consumer: Consumer, count: int) -> bool:
    return consumer.stats.handled + consumer.stats.dead_lettered >= count


async def test_an_event_published_directly_is_stored(own_store: EventStore, own_bus: Bus) -> None:
    stream = unique_stream()
    stored = batch(stream, 1, 3)
    await own_store.append(stored, expected_version=0)
    await relay_everything(own_store, own_bus)
    direct = pod_action(stream, 4, index=4)
    await own_bus.publish(direct)  # not through the store: no position header

    async with auditing(own_store, own_bus) as consumer:
        await wait_for(lambda: settled(consumer, 4), within=30, what="the audit settled 4 messages")
    assert [e.envelope.event_id for e in await own_store.read_stream(stream)] == [
        *(e.event_id for e in stored),
        direct.event_id,
    ]
    assert consumer.stats.dead_lettered == 0


async def test_relayed_messages_whose_events_the_store_lacks_are_stored(
    own_store: EventStore, own_bus: Bus
) -> None:
    """A batch of relayed messages, some of them for events the store does not hold at the position they
    carry (a store restored from a backup older than the bus): those are stored, the rest left alone."""
    stream, lost = unique_stream(), unique_stream()
    stored = batch(stream, 1, 6)
    await own_store.append(stored, expected_version=0)
    await relay_everything(own_store, own_bus)
    head = await own_store.head_position()
    claims_a_taken_position = pod_action(lost, 1, index=1)
    beyond_the_head = [pod_action(lost, 2, index=2), pod_action(lost, 3, index=3)]
    await publish_as_relayed(own_bus, claims_a_taken_position, head - 3)
    for offset, envelope in enumerate(beyond_the_head, start=1):
        await publish_as_relayed(own_bus, envelope, head + offset)

    async with auditing(own_store, own_bus) as consumer:
        await wait_for(lambda: settled(consumer, 9), within=30, what="the audit settled 9 messages")
    assert [e.envelope.event_id for e in await own_store.read_stream(lost)] == [
        claims_a_taken_position.event_id,
        *(e.event_id for e in beyond_the_head),
    ]
    assert [e.envelope.event_id for e in await own_store.read_stream(stream)] == [e.event_id for e in stored]
    assert await own_store.head_position() == head + 3  # the relayed six were not written again
    assert consumer.stats.dead_lettered == 0


async def test_a_different_event_claiming_a_stored_version_is_dead_lettered(
    own_store: EventStore, own_bus: Bus
) -> None:
    """Whether it comes with no header or with the header of the position that version is stored at."""
    stream = unique_stream()
    stored = batch(stream, 1, 3)
    await own_store.append(stored, expected_version=0)
    await relay_everything(own_store, own_bus)
    position_of_version_2 = (await own_store.read_stream(stream, 2))[0].global_position
    direct, relayed = pod_action(stream, 2, index=7), pod_action(stream, 2, index=8)
    await own_bus.publish(direct)
    await publish_as_relayed(own_bus, relayed, position_of_version_2)

    async with auditing(own_store, own_bus) as consumer:
        await wait_for(lambda: settled(consumer, 5), within=30, what="the audit settled 5 messages")
    letters = await own_bus.dead_letters(consumer.durable)
    wanted = sorted(str(e.event_id) for e in (direct, relayed))
    assert sorted(letter.msg_id or "" for letter in letters) == wanted
    assert all("ConcurrencyError" in letter.reason for letter in letters)
    assert [e.envelope.event_id for e in await own_store.read_stream(stream)] == [e.event_id for e in stored]


async def test_the_relay_and_the_audit_beside_it_settle_everything_without_a_write(
    own_store: EventStore, own_bus: Bus
) -> None:
    stream = unique_stream()
    await own_store.append(batch(stream, 1, 40), expected_version=0)
    head = await own_store.head_position()
    known = KnownStored()
    relay = Relay(own_store, own_bus, known)
    stopping = asyncio.Event()
    task = asyncio.create_task(relay.run(stopping))
    try:
        async with auditing(own_store, own_bus, known) as consumer:
            await wait_for(lambda: settled(consumer, 40), within=30, what="the audit settled 40 messages")
    finally:
        stopping.set()
        await asyncio.wait_for(task, 30)
    assert consumer.stats.dead_lettered == 0
    assert len(known) == 0  # each identity the relay recorded was taken by the audit
    assert await own_store.head_position() == head
