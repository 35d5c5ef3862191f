"""The auditor's audit of the bus (bus -> store): the store is the authority, the audit never writes an
event. It walks the stream's sequences: what the relay beside it published is settled unread, without the
bus delivering it again; every other message is read. A message the relay published (it carries the store
position) is settled when that very event is stored there; any other message is settled when the store
holds that exact event, and otherwise quarantined (``bus_quarantine``) with the reason: an event published
directly, one the store does not have, a different event claiming a stored (stream, version)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import msgspec
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from services.auditor.bus_loss import Sent
from services.auditor.service import AUDIT_NAME, POSITION_HEADER, Audit, KnownStored, Relay
from services.infra.bus import MSG_ID, Bus
from services.infra.database import asyncpg_url
from services.infra.session_lock import SessionLock, lock_key
from services.infra.store import EventStore
from services.model.events import Envelope, encode
from tests.infra.store_helpers import batch, pod_action, unique_stream
from tests.plugins.stack import wait_for

pytestmark = pytest.mark.asyncio(loop_scope="session")


@asynccontextmanager
async def auditing(store: EventStore, bus: Bus, known: KnownStored | None = None) -> AsyncIterator[Audit]:
    """The audit running as in the auditor (looking at the stream every 0.1 s rather than every second)."""
    audit = Audit(store, bus, known, look_interval=0.1)
    stopping = asyncio.Event()
    task = asyncio.create_task(audit.run(stopping), name="audit")
    try:
        yield audit
    finally:
        stopping.set()
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


async def settled(audit: Audit, count: int) -> bool:
    return audit.stats.walked >= count


async def quarantined(store: EventStore, bus: Bus) -> list[tuple[str, str]]:
    """(event id, reason) of the messages of this bus's subjects the audit quarantined."""
    rows = await store.query(
        "SELECT event_id::text, reason FROM bus_quarantine WHERE subject LIKE $1 ORDER BY id",
        f"{bus.prefix}.%",
    )
    return [(row[0], row[1]) for row in rows]


async def test_an_event_published_directly_is_quarantined_not_stored(
    own_store: EventStore, own_bus: Bus
) -> None:
    stream = unique_stream()
    stored = batch(stream, 1, 3)
    await own_store.append(stored, expected_version=0)
    await relay_everything(own_store, own_bus)
    direct = pod_action(stream, 4, index=4)
    await own_bus.publish(direct)  # not through the store: no position header
    # A stored event, sent again without a position (nor the event id that JetStream would deduplicate):
    # it is what it says, nothing to do.
    await own_bus.js.publish(own_bus.subject_for(stored[0]), encode(stored[0]), stream=own_bus.stream)

    async with auditing(own_store, own_bus) as audit:
        await wait_for(lambda: settled(audit, 5), within=30, what="the audit settled 5 messages")
    assert [e.envelope.event_id for e in await own_store.read_stream(stream)] == [e.event_id for e in stored]
    assert await quarantined(own_store, own_bus) == [
        (str(direct.event_id), "no event with this id in the store (not published by the relay)")
    ]
    assert audit.stats.dead_lettered == 0


async def test_relayed_messages_whose_events_the_store_lacks_are_quarantined(
    own_store: EventStore, own_bus: Bus
) -> None:
    """Messages with a position header for events the store does not hold at that position (forged, or a
    store restored from a backup older than the bus): quarantined for an operator, never stored."""
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

    async with auditing(own_store, own_bus) as audit:
        await wait_for(lambda: settled(audit, 9), within=30, what="the audit settled 9 messages")
    assert await own_store.read_stream(lost) == []
    assert [event_id for event_id, _ in await quarantined(own_store, own_bus)] == [
        str(e.event_id) for e in (claims_a_taken_position, *beyond_the_head)
    ]
    assert [e.envelope.event_id for e in await own_store.read_stream(stream)] == [e.event_id for e in stored]
    assert await own_store.head_position() == head
    assert audit.stats.dead_lettered == 0


async def test_a_different_event_claiming_a_stored_event_id_is_quarantined(
    own_store: EventStore, own_bus: Bus
) -> None:
    """A message reusing a stored event's id with another payload: quarantined, the stored event stands.
    With the header of the position that event is stored at, it passes the relay's quick check (id,
    stream, version, position: only the relay's identity may publish event subjects at all) and is not
    quarantined; it is stored no more than the other, and the executor compares payloads itself."""
    stream = unique_stream()
    stored = batch(stream, 1, 3)
    await own_store.append(stored, expected_version=0)
    await relay_everything(own_store, own_bus)
    position_of_version_2 = (await own_store.read_stream(stream, 2))[0].global_position
    original = stored[1]
    forged = msgspec.structs.replace(pod_action(stream, 2, index=8), event_id=original.event_id)
    # Without the event id as Nats-Msg-Id, which JetStream would drop as a duplicate of the original.
    for headers in ({}, {POSITION_HEADER: str(position_of_version_2)}):
        await own_bus.js.publish(
            own_bus.subject_for(forged), encode(forged), stream=own_bus.stream, headers=headers
        )

    async with auditing(own_store, own_bus) as audit:
        await wait_for(lambda: settled(audit, 5), within=30, what="the audit settled 5 messages")
    found = await quarantined(own_store, own_bus)
    assert [event_id for event_id, _ in found] == [str(original.event_id)]
    assert all(reason.startswith("differs from the event stored") for _, reason in found)
    assert [e.envelope for e in await own_store.read_stream(stream)] == stored


async def test_the_audit_receives_nothing_its_relay_published_and_writes_no_event(
    own_store: EventStore, own_bus: Bus
) -> None:
    """The relay beside the audit publishes 40 events: the audit settles every one unread, by the sequence
    JetStream gave each publish. The bus delivers them to no consumer of the audit (none exists), and the
    store gains no event."""
    stream = unique_stream()
    await own_store.append(batch(stream, 1, 40), expected_version=0)
    head = await own_store.head_position()
    known = KnownStored()
    relay = Relay(own_store, own_bus, known)
    stopping = asyncio.Event()
    task = asyncio.create_task(relay.run(stopping))
    try:
        async with auditing(own_store, own_bus, known) as audit:
            await wait_for(lambda: settled(audit, 40), within=30, what="the audit settled 40 messages")
    finally:
        stopping.set()
        await asyncio.wait_for(task, 30)
    assert (audit.stats.relayed, audit.stats.read, audit.stats.dead_lettered) == (40, 0, 0)
    assert await own_bus.js.consumers_info(own_bus.stream) == []
    assert len(known) == 0  # each identity the relay recorded was taken by the audit
    assert await own_store.head_position() == head
    assert await own_store.audit_cursor(own_bus.stream) == (
        (await own_bus.js.stream_info(own_bus.stream)).created,
        40,
    )


async def test_what_the_relay_beside_it_published_is_settled_unread_and_the_rest_audited(
    own_store: EventStore, own_bus: Bus
) -> None:
    """The messages JetStream stored for the relay's own publishes (by the sequence each ack gave) are
    settled without decoding or a store read; a message published directly among them is still audited
    and quarantined."""
    stream = unique_stream()
    stored = batch(stream, 1, 6)
    await own_store.append(stored[:3], expected_version=0)
    known = KnownStored()
    relay = Relay(own_store, own_bus, known)
    await relay.publish(await own_store.read_batch_json(0, 1000))
    direct = pod_action(stream, 7, index=7)
    await own_bus.publish(direct)
    await own_store.append(stored[3:], expected_version=3)
    await relay.publish(await own_store.read_batch_json(relay.position, 1000))

    async with auditing(own_store, own_bus, known) as audit:
        await wait_for(lambda: settled(audit, 7), within=30, what="the audit settled 7 messages")
    assert audit.stats.relayed == 6
    assert audit.stats.read == 1
    assert [event_id for event_id, _ in await quarantined(own_store, own_bus)] == [str(direct.event_id)]
    assert len(known) == 0  # the relay's identities were taken with the messages


async def test_a_message_published_ahead_of_the_relay_with_its_event_id_is_still_audited(
    own_store: EventStore, own_bus: Bus
) -> None:
    """An attacker publishes, before the relay, a forged message with the id (and subject) of an event
    about to be stored: JetStream drops the relay's publish as its duplicate and acks it with the
    forged message's sequence. That sequence is not the relay's message, so the audit reads it and
    quarantines it."""
    stream = unique_stream()
    event = pod_action(stream, 1, index=1)
    forged = msgspec.structs.replace(pod_action(stream, 1, index=9), event_id=event.event_id)
    await own_bus.js.publish(
        own_bus.subject_for(event),
        encode(forged),
        stream=own_bus.stream,
        headers={MSG_ID: str(event.event_id)},
    )
    await own_store.append([event], expected_version=0)
    known = KnownStored()
    await Relay(own_store, own_bus, known).publish(await own_store.read_batch_json(0, 1000))

    async with auditing(own_store, own_bus, known) as audit:
        await wait_for(lambda: settled(audit, 1), within=30, what="the audit settled the message")
    assert audit.stats.relayed == 0
    assert [event_id for event_id, _ in await quarantined(own_store, own_bus)] == [str(event.event_id)]


async def test_after_the_stream_was_made_anew_its_reused_sequences_are_audited(
    own_store: EventStore, own_bus: Bus
) -> None:
    """The stream lost and made anew gives its sequences again: a forged message at a sequence the old
    stream gave the relay is audited, not taken for the relay's message, though the relay's note of that
    sequence is still there."""
    stream = unique_stream()
    async with auditing(own_store, own_bus) as audit:  # the cursor is saved for the old stream
        await wait_for(lambda: own_store.audit_cursor(own_bus.stream), within=30, what="a saved cursor")
    event = pod_action(stream, 1, index=1)
    await own_store.append([event], expected_version=0)
    known = KnownStored()
    await Relay(own_store, own_bus, known).publish(await own_store.read_batch_json(0, 1000))
    assert 1 in known.published_sequences()
    await own_bus.js.delete_stream(own_bus.stream)
    await own_bus.ensure_stream()
    forged = msgspec.structs.replace(pod_action(stream, 1, index=9), event_id=event.event_id)
    await own_bus.js.publish(
        own_bus.subject_for(event),
        encode(forged),
        stream=own_bus.stream,
        headers={MSG_ID: str(event.event_id)},
    )

    async with auditing(own_store, own_bus, known) as audit:
        await wait_for(lambda: settled(audit, 1), within=30, what="the audit settled the message")
    assert audit.stats.relayed == 0
    assert [event_id for event_id, _ in await quarantined(own_store, own_bus)] == [str(event.event_id)]


async def test_a_restarted_audit_reads_only_what_came_after_its_saved_cursor(
    own_store: EventStore, own_bus: Bus
) -> None:
    """An audit stopped after settling 3 events saves where it was; a new one (a restart: it knows nothing
    the relay published) reads only the messages published after that, a forged one among them."""
    stream = unique_stream()
    stored = batch(stream, 1, 5)
    await own_store.append(stored[:3], expected_version=0)
    known = KnownStored()
    relay = Relay(own_store, own_bus, known)
    await relay.publish(await own_store.read_batch_json(0, 1000))
    async with auditing(own_store, own_bus, known) as first:
        await wait_for(lambda: settled(first, 3), within=30, what="the first audit settled 3 messages")
    assert first.stats.relayed == 3
    await own_store.append(stored[3:], expected_version=3)
    await relay.publish(await own_store.read_batch_json(relay.position, 1000))
    direct = pod_action(stream, 6, index=6)
    await own_bus.publish(direct)

    async with auditing(own_store, own_bus) as second:
        await wait_for(lambda: settled(second, 3), within=30, what="the second audit settled 3 messages")
        await asyncio.sleep(0.3)  # three looks at the stream: nothing more is walked
    assert (second.stats.relayed, second.stats.read, second.stats.walked) == (0, 3, 3)
    assert [event_id for event_id, _ in await quarantined(own_store, own_bus)] == [str(direct.event_id)]


async def test_the_durable_consumer_of_earlier_versions_hands_over_its_ack_floor(
    own_store: EventStore, own_bus: Bus
) -> None:
    """An install upgraded from the audit's durable consumer: the first 4 messages were acked through it.
    The audit starts after them (none is read twice), and the durable is deleted."""
    stream = unique_stream()
    stored = batch(stream, 1, 6)
    await own_store.append(stored, expected_version=0)
    await relay_everything(own_store, own_bus)
    await own_bus.js.add_consumer(
        own_bus.stream, ConsumerConfig(durable_name=AUDIT_NAME, ack_policy=AckPolicy.EXPLICIT)
    )
    subscription = await own_bus.js.pull_subscribe_bind(AUDIT_NAME, stream=own_bus.stream)
    for message in await subscription.fetch(4, timeout=5):
        await message.ack_sync()
    await subscription.unsubscribe()

    async with auditing(own_store, own_bus) as audit:
        await wait_for(lambda: settled(audit, 2), within=30, what="the audit settled 2 messages")
        await asyncio.sleep(0.3)
    assert (audit.stats.read, audit.stats.walked) == (2, 2)
    assert await own_bus.js.consumers_info(own_bus.stream) == []


async def test_a_message_the_audit_cannot_decode_is_dead_lettered_and_the_walk_goes_on(
    own_store: EventStore, own_bus: Bus
) -> None:
    stream = unique_stream()
    stored = batch(stream, 1, 2)
    await own_store.append(stored, expected_version=0)
    await relay_everything(own_store, own_bus)
    await own_bus.js.publish(own_bus.subject_for(stored[0]), b"not an event", stream=own_bus.stream)
    await own_bus.js.publish(own_bus.subject_for(stored[0]), b"[" * 1100 + b"]" * 1100, stream=own_bus.stream)
    later = pod_action(stream, 3, index=3)
    await own_bus.publish(later)

    async with auditing(own_store, own_bus) as audit:
        await wait_for(lambda: settled(audit, 5), within=30, what="the audit settled 5 messages")
    assert audit.stats.dead_lettered == 2
    letters = await own_bus.dead_letters(AUDIT_NAME)
    assert [letter.data for letter in letters] == [b"not an event", b"[" * 1100 + b"]" * 1100]
    assert all(letter.reason.startswith("undecodable") for letter in letters)
    assert [event_id for event_id, _ in await quarantined(own_store, own_bus)] == [str(later.event_id)]


async def test_a_message_dressed_as_a_server_error_neither_stalls_nor_crashes_the_audit(
    own_store: EventStore, own_bus: Bus
) -> None:
    """A direct get answers with the message itself, and nats-py reads an empty body with a Status header
    as the server's own answer (not found, unavailable...). Messages forged that way are read again through
    the stream API, dead-lettered as undecodable, and the walk goes on to a forgery after them."""
    stream = unique_stream()
    stored = batch(stream, 1, 1)
    await own_store.append(stored, expected_version=0)
    subject = own_bus.subject_for(stored[0])
    for status in ("404", "503", "400", "x"):
        await own_bus.js.publish(subject, b"", stream=own_bus.stream, headers={"Status": status})
    later = pod_action(stream, 2, index=2)
    await own_bus.publish(later)

    async with auditing(own_store, own_bus) as audit:
        await wait_for(lambda: settled(audit, 5), within=30, what="the audit settled 5 messages")
    assert (audit.stats.dead_lettered, audit.stats.gone) == (4, 0)
    assert [event_id for event_id, _ in await quarantined(own_store, own_bus)] == [str(later.event_id)]


async def test_a_message_the_store_cannot_even_look_up_is_quarantined_and_the_walk_goes_on(
    own_store: EventStore, own_bus: Bus
) -> None:
    """A well-formed event whose stream version no bigint holds: looking it up fails on its own merits,
    not for an outage. It is quarantined with the reason (it is no stored event), not retried for ever,
    and the auditor does not stop."""
    stream = unique_stream()
    huge = msgspec.structs.replace(pod_action(stream, 1, index=1), stream_version=2**63 + 5)
    await own_bus.js.publish(own_bus.subject_for(huge), encode(huge), stream=own_bus.stream)
    later = pod_action(stream, 2, index=2)
    await own_bus.publish(later)

    async with auditing(own_store, own_bus) as audit:
        await wait_for(lambda: settled(audit, 2), within=30, what="the audit settled 2 messages")
    [refused, forged] = await quarantined(own_store, own_bus)
    assert refused[0] is None and refused[1].startswith("the store cannot look it up: DataError")
    assert forged[0] == str(later.event_id)
    assert audit.stats.dead_lettered == 0


async def test_a_backlog_longer_than_one_read_is_audited_once_each(
    own_store: EventStore, own_bus: Bus
) -> None:
    """150 messages no relay beside the audit published (a restart behind the bus): read 64 at a time,
    each audited once, the forgery among them quarantined, and nothing left to audit."""
    stream = unique_stream()
    stored = batch(stream, 1, 150)
    await own_store.append(stored[:100], expected_version=0)
    await relay_everything(own_store, own_bus)
    direct = pod_action(stream, 200, index=200)
    await own_bus.publish(direct)
    await own_store.append(stored[100:], expected_version=100)
    await Relay(own_store, own_bus).publish(await own_store.read_batch_json(0, 1000))

    async with auditing(own_store, own_bus) as audit:
        await wait_for(lambda: settled(audit, 151), within=30, what="the audit settled 151 messages")
        await asyncio.sleep(0.3)
    assert (audit.stats.read, audit.stats.walked, audit.stats.relayed) == (151, 151, 0)
    assert [event_id for event_id, _ in await quarantined(own_store, own_bus)] == [str(direct.event_id)]
    assert audit.detail()["lag"] == 0


async def test_an_undecodable_message_with_a_huge_id_is_dead_lettered_within_one_message(
    own_store: EventStore, own_bus: Bus
) -> None:
    """A forgery whose Nats-Msg-Id fills most of what JetStream takes of headers (64 KiB): its dead letter
    (which names the original's id) must still be taken, or the walk would retry it for ever."""
    stream = unique_stream()
    later = pod_action(stream, 1, index=1)
    huge_id = "i" * (64 * 1024 - 200)
    await own_bus.js.publish(
        own_bus.subject_for(later), b"not an event", stream=own_bus.stream, headers={MSG_ID: huge_id}
    )
    await own_bus.publish(later)

    async with auditing(own_store, own_bus) as audit:
        await wait_for(lambda: settled(audit, 2), within=30, what="the audit settled 2 messages")
    [letter] = await own_bus.dead_letters(AUDIT_NAME)
    assert letter.data == b"not an event" and letter.reason.startswith("undecodable")
    assert [event_id for event_id, _ in await quarantined(own_store, own_bus)] == [str(later.event_id)]


async def test_acks_of_publishes_sent_before_the_notes_were_forgotten_are_not_noted(
    own_store: EventStore, own_bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream is found made anew while a batch of the relay's publishes is in flight: their acks may
    name sequences of the stream that is gone, so they must not become notes the audit settles unread."""
    stream = unique_stream()
    await own_store.append(batch(stream, 1, 3), expected_version=0)
    known = KnownStored()
    relay = Relay(own_store, own_bus, known)
    publish = own_bus.publish_pipelined

    async def stream_changed_meanwhile(*args: Any, **kwargs: Any) -> Any:
        outcomes = await publish(*args, **kwargs)
        known.forget_published()  # what the audit's look does when it sees the new stream
        return outcomes

    monkeypatch.setattr(own_bus, "publish_pipelined", stream_changed_meanwhile)
    await relay.publish(await own_store.read_batch_json(0, 1000))
    assert relay.position == await own_store.head_position()  # published, and acknowledged
    assert (list(known.published_sequences()), known.highest_published) == ([], 0)


async def test_a_note_beyond_the_stream_does_not_make_the_audit_pass_the_sequences_before_it(
    own_store: EventStore, own_bus: Bus
) -> None:
    """A note of the relay's names sequence 10 while the stream, at the audit's last look, held 3 (a note
    of a stream since made anew, say). Sequences 4 to 9 are not found: they are not counted gone and the
    cursor stays at 3, so the messages later stored there are read and audited."""
    stream = unique_stream()
    stored = batch(stream, 1, 3)
    await own_store.append(stored, expected_version=0)
    await relay_everything(own_store, own_bus)
    known = KnownStored()
    audit = Audit(own_store, own_bus, known)
    await audit.start()  # what the stream holds at start is walked at once: 3 messages
    while await audit.walk_once():
        pass
    assert audit.cursor is not None and audit.cursor.audited_through == 3
    note = stored[0]
    known.add_published(10, Sent(note.event_id, note.stream, note.stream_version, note.type, 10))

    await audit.walk_once()
    assert audit.cursor.audited_through == 3 and audit.stats.gone == 0

    forged = [pod_action(stream, v, index=v) for v in range(4, 10)]
    for envelope in forged:
        await own_bus.publish(envelope)
    await audit.look()
    await audit.look()  # the walk goes to what the look before the latest saw
    while await audit.walk_once():
        pass
    assert audit.cursor.audited_through == 10
    assert [event_id for event_id, _ in await quarantined(own_store, own_bus)] == [
        str(e.event_id) for e in forged
    ]


async def test_an_audit_nobody_walks_shows_in_the_lag_every_replica_reports(
    own_database_url: str, own_store: EventStore, own_bus: Bus
) -> None:
    """Any login may take the audit's advisory lock and sit on it: then no auditor walks. The replicas
    say so: not walking, and a lag that grows with the stream."""
    squatter = await asyncpg.connect(asyncpg_url(own_database_url))
    try:
        assert await squatter.fetchval(
            "SELECT pg_try_advisory_lock($1)", lock_key(f"rollbook-audit {own_bus.stream}")
        )
        lock = SessionLock(own_database_url, f"rollbook-audit {own_bus.stream}", check_interval=0.1)
        audit = Audit(own_store, own_bus, KnownStored(), lock=lock, look_interval=0.1)
        stopping = asyncio.Event()
        tasks = [asyncio.create_task(lock.run(stopping)), asyncio.create_task(audit.run(stopping))]
        try:
            stream = unique_stream()
            await own_store.append(batch(stream, 1, 5), expected_version=0)
            await relay_everything(own_store, own_bus)

            async def lag_shows() -> bool:
                return audit.detail() == {"walking": False, "audited_through": None, "lag": 5}

            await wait_for(lag_shows, within=30, what="the replica reports 5 messages not audited")
            assert audit.stats.walked == 0
        finally:
            stopping.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        await squatter.close()
