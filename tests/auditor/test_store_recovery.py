"""A failover loses published events from the store (an asynchronous standby promoted without the old
primary's last commits; here those commits deleted): the relay puts back from the bus, as themselves,
those whose place in the record is still free, names the others and the pod actions already carried out,
and records the loss, which `rollbook audit verify` then reports by name (exit 3)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import msgspec
import nats.js.errors
import pytest
from prometheus_client import REGISTRY

from services.auditor import service as auditor_service
from services.auditor.service import POSITION_HEADER, Relay
from services.auditor.store_loss import AFTER_UNRECOVERED, BEYOND_MEMORY, NOT_RELAYS, SLOT_TAKEN
from services.infra.bus import MSG_ID, Bus
from services.infra.store import EventStore
from services.model.event_store import StoredEvent
from services.model.events import (
    Envelope,
    PodActionRequested,
    PodActionSucceeded,
    StoreLossDetected,
    new_event,
)
from tests.plugins.database import lose_events_sql
from tests.plugins.servers import ServerUrls
from tests.plugins.stack import wait_for
from tests.security.signed_trail import T0, SignedTrail, signed_trail

pytestmark = pytest.mark.asyncio(loop_scope="session")

DECISIONS = "CloneSet/prod/web"
ACTIONS = "CloneSet/prod/web/actions"
ROLLOUT = "prod/web@web-2#1"


def request(version: int, action_id: str, pod: str) -> Envelope:
    return new_event(
        PodActionRequested(
            action_id=action_id, action="updateInPlace", namespace="prod", pod=pod, rollout_id=ROLLOUT
        ),
        stream=DECISIONS,
        stream_version=version,
        occurred_at=T0 + timedelta(seconds=version),
        correlation_id=ROLLOUT,
    )


def success(version: int, cause: Envelope) -> Envelope:
    assert isinstance(cause.payload, PodActionRequested)
    return new_event(
        PodActionSucceeded(action_id=cause.payload.action_id, pod_uid=f"uid-{cause.payload.pod}"),
        stream=ACTIONS,
        stream_version=version,
        occurred_at=T0 + timedelta(seconds=10 + version),
        causation_id=cause.event_id,
        correlation_id=ROLLOUT,
    )


async def relayed_all(store: EventStore, bus: Bus) -> Relay:
    """A relay that published everything stored, then stopped (its memory of what it sent kept)."""
    relay = Relay(store, bus)
    stopping = asyncio.Event()
    task = asyncio.create_task(relay.run(stopping))
    await wait_for(relay.caught_up.wait, within=30, what="the relay caught up")
    stopping.set()
    await asyncio.wait_for(task, 30)
    return relay


async def relayed_then_lost(trail: SignedTrail, bus: Bus, lost_from: int) -> Relay:
    """A relay that published everything stored; then a failover lost the commits from ``lost_from`` on."""
    relay = await relayed_all(trail.store, bus)
    await lose_from(trail, lost_from)
    return relay


async def lose_from(trail: SignedTrail, position: int) -> None:
    """The failover: the promoted standby never received what was committed from ``position`` on."""
    await trail.owner(*lose_events_sql(f"global_position >= {position}"))


async def publish_the_rest(relay: Relay, store: EventStore) -> None:
    """The relay's next batch: what was stored after its position (a recovered event's new place)."""
    await relay.publish(await store.read_batch_json(relay.position, 500))


async def loss_records(store: EventStore) -> list[StoredEvent]:
    return [e for e in await store.read_stream(ACTIONS) if isinstance(e.envelope.payload, StoreLossDetected)]


def resolved(outcome: str) -> float:
    return REGISTRY.get_sample_value("rollbook_relay_store_lost_resolved_total", {"outcome": outcome}) or 0.0


async def test_lost_events_come_back_from_the_bus_as_themselves_and_the_rest_are_named(
    server_urls: ServerUrls, own_bus: Bus, tmp_path: Path
) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=5) as trail:
        store = trail.store
        first = request(1, "act-1", "web-0")
        await store.append([first], expected_version=0)
        # What the old primary committed and the relay published, which its standby never received: the
        # request of act-2, the success of act-1 (carried out on web-0) and that of act-2.
        second = request(2, "act-2", "web-1")
        lost = [second, success(1, first), success(2, second)]
        for event in lost:
            await store.append_many([event])
        relay = await relayed_all(store, own_bus)
        before = {outcome: resolved(outcome) for outcome in ("recovered", "unrecoverable")}
        lost_from = min(p for p, e in relay.sent.items() if e.event_id == second.event_id)
        await lose_from(trail, lost_from)
        # The new primary goes on: an executor stores another action's outcome at the actions stream's
        # next version, the slot the lost success of act-1 had.
        other = new_event(
            PodActionSucceeded(action_id="act-9"), stream=ACTIONS, stream_version=0, occurred_at=T0
        )
        await store.append_unversioned([other])

        await relay.check_store()

        # The request of act-2 is back as itself: same id, stream, version, payload and times.
        assert await store.read_event(second.event_id) == second
        assert await store.stream_version(DECISIONS) == 2
        # The successes cannot go back: act-1's version is another event's now, act-2's comes after it.
        assert await store.read_event(lost[1].event_id) is None
        assert await store.read_event(lost[2].event_id) is None
        assert [(u["event_id"], u["reason"]) for u in relay.unrecoverable] == [
            (str(lost[1].event_id), SLOT_TAKEN),
            (str(lost[2].event_id), AFTER_UNRECOVERED),
        ]
        assert resolved("recovered") - before["recovered"] == 1
        assert resolved("unrecoverable") - before["unrecoverable"] == 2

        records = await loss_records(store)
        assert len(records) == 1
        record = records[0].envelope.payload
        assert isinstance(record, StoreLossDetected)
        assert [r["event_id"] for r in record.recovered] == [str(second.event_id)]
        assert record.workloads == [DECISIONS]
        # Both actions were carried out; the record of it is gone: named with their pods.
        assert [(a["action_id"], a["pod"]) for a in record.actions_applied] == [
            ("act-1", "web-0"),
            ("act-2", "web-1"),
        ]

        code, out = await trail.cli("audit", "verify", "--no-bus")
        assert code == 3, out
        assert f"LOST PodActionSucceeded {lost[1].event_id} {ACTIONS} v1 rollout {ROLLOUT}" in out, out
        assert "CARRIED OUT, outcome lost: updateInPlace act-1 on pod web-0" in out, out
        assert "INCOMPLETE:" in out, out
        record_id = str(records[0].envelope.event_id)
        code, out = await trail.cli("audit", "verify", "--no-bus", "--accept-loss", record_id)
        assert code == 0 and "OK:" in out and "LOST PodActionSucceeded" in out, out

        # The recovered request reaches the consumers again, at its new position (the executor finds the
        # action applied: exactly once by action id).
        position = (await store.read_stream(DECISIONS, 2))[0].global_position
        stopping = asyncio.Event()
        task = asyncio.create_task(relay.run(stopping))

        async def carried_again() -> bool:
            try:
                message = await own_bus.js.get_last_msg(own_bus.stream, own_bus.subject_for(second))
            except nats.js.errors.NotFoundError:
                return False
            headers = message.headers or {}
            return headers.get(POSITION_HEADER) == str(position) and headers.get(MSG_ID) == (
                f"{second.event_id}@{position}"
            )

        try:
            await wait_for(carried_again, within=30, what="the recovered request on the bus again")
        finally:
            stopping.set()
            await asyncio.wait_for(task, 30)


async def test_a_recovery_an_outage_interrupts_goes_through_at_the_next_check(
    server_urls: ServerUrls, own_bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=2) as trail:
        store = trail.store
        first, second = request(1, "act-1", "web-0"), request(2, "act-2", "web-1")
        await store.append([first, second], expected_version=0)
        relay = await relayed_all(store, own_bus)
        lost_from = min(p for p, e in relay.sent.items() if e.event_id == first.event_id)
        await lose_from(trail, lost_from)

        # The database goes away again after the first event went back.
        append_many = store.append_many
        calls = 0

        async def failing_second(events: list[Envelope]) -> int:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise ConnectionResetError("the database went away")
            return await append_many(events)

        monkeypatch.setattr(store, "append_many", failing_second)
        with pytest.raises(ConnectionResetError):
            await relay.check_store()
        assert await store.read_event(first.event_id) == first
        assert await store.read_event(second.event_id) is None

        await relay.check_store()
        assert await store.read_event(second.event_id) == second
        records = await loss_records(store)
        assert len(records) == 1
        record = records[0].envelope.payload
        assert isinstance(record, StoreLossDetected)
        # Both came back, the first in the interrupted attempt: the record says so of both.
        assert [r["event_id"] for r in record.recovered] == [str(first.event_id), str(second.event_id)]
        assert record.unrecoverable == []


async def test_a_forged_message_holding_an_events_id_ahead_of_the_relay_is_not_stored_by_a_recovery(
    server_urls: ServerUrls, own_bus: Bus, tmp_path: Path
) -> None:
    """Attack: an identity that may publish on some subject of the stream (a stolen executor credential, on
    its dead-letter subject) publishes, ahead of the relay, a forged event carrying the (predictable) id and
    position of an event about to be relayed. The relay's publish is then deduplicated to the forged
    message; after a failover loses the event, the recovery must not store the forged body."""
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=2) as trail:
        store = trail.store
        first = request(1, "act-1", "web-0")
        await store.append([first], expected_version=0)
        relay = Relay(store, own_bus)
        stopping = asyncio.Event()
        task = asyncio.create_task(relay.run(stopping))
        try:
            await wait_for(relay.caught_up.wait, within=30, what="the relay caught up")
            second = request(2, "act-2", "web-1")
            forged = new_event(
                PodActionRequested(action_id="act-2", action="deletePod", namespace="prod", pod="db-0"),
                stream="CloneSet/prod/db",
                stream_version=1,
                occurred_at=T0,
                event_id=second.event_id,
            )
            data, _ = own_bus.event_message(forged)
            coming = await store.head_position() + 1
            await own_bus.js.publish(
                own_bus.dead_letter_subject("executor"),
                data,
                stream=own_bus.stream,
                headers={MSG_ID: str(second.event_id), POSITION_HEADER: str(coming)},
            )
            await store.append([second], expected_version=1)
            after = success(1, first)
            await store.append_many([after])
            assert await store.positions_of([second.event_id]) == {second.event_id: coming}
            head = await store.head_position()

            async def published() -> bool:
                return relay.position >= head

            await wait_for(published, within=30, what="the relay published them")
        finally:
            stopping.set()
            await asyncio.wait_for(task, 30)
        await lose_from(trail, coming)

        await relay.check_store()

        # Neither the forged body nor anything resting on the lost event is stored; both are named.
        assert await store.read_event(second.event_id) is None
        assert await store.stream_version("CloneSet/prod/db") == 0
        assert await store.read_event(after.event_id) is None
        assert [(u["event_id"], u["reason"]) for u in relay.unrecoverable] == [
            (str(second.event_id), NOT_RELAYS),
            (str(after.event_id), AFTER_UNRECOVERED),
        ]


async def test_a_loss_beyond_what_the_relay_remembers_puts_nothing_back_and_publishes_the_new_commits(
    server_urls: ServerUrls, own_bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failover lost more published events than the relay remembers: those it remembers are named and
    none goes back (they may rest on earlier lost ones it cannot name), and what the new primary commits
    at positions before the oldest it remembers (its sequence gives them again) is published."""
    monkeypatch.setattr(auditor_service, "SENT_CAPACITY", 3)
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=2) as trail:
        store = trail.store
        first = request(1, "act-1", "web-0")
        await store.append([first], expected_version=0)
        lost_from = await store.head_position() + 1
        second, third = request(2, "act-2", "web-1"), request(3, "act-3", "web-2")
        await store.append([second, third], expected_version=1)
        successes = [success(1, first), success(2, second)]
        await store.append_many(successes)
        lost_ids = {e.event_id for e in [second, third, *successes]}
        relay = await relayed_all(store, own_bus)
        remembered = sorted(relay.sent)
        assert remembered[0] > lost_from  # the relay no longer remembers the first lost event
        # The standby never received any of the five; the new primary's sequence goes on from its own last.
        await lose_from(trail, lost_from)
        await trail.owner(f"ALTER TABLE events ALTER COLUMN global_position RESTART WITH {lost_from}")
        other = new_event(
            PodActionSucceeded(action_id="act-9"),
            stream="CloneSet/prod/db/actions",
            stream_version=1,
            occurred_at=T0,
        )
        await store.append_many([other])
        assert await store.positions_of([other.event_id]) == {other.event_id: lost_from}

        await relay.check_store()

        # None of those it remembers goes back, though each one's slot is free; each is named.
        assert await store.stream_version(DECISIONS) == 1
        assert await store.stored_ids(list(lost_ids)) == set()
        assert [(u["position_before"], u["reason"]) for u in relay.unrecoverable] == [
            (p, BEYOND_MEMORY) for p in remembered
        ]
        assert relay.position < lost_from

        # The new primary's commit, at a position before the oldest the relay remembers, reaches the bus
        # with the relay's next batch.
        await publish_the_rest(relay, store)
        message = await own_bus.js.get_last_msg(own_bus.stream, own_bus.subject_for(other))
        assert (message.headers or {}).get(POSITION_HEADER) == str(lost_from)


async def test_an_event_put_back_and_lost_again_by_a_second_failover_is_put_back_again(
    server_urls: ServerUrls, own_bus: Bus, tmp_path: Path
) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=2) as trail:
        store = trail.store
        first, second = request(1, "act-1", "web-0"), request(2, "act-2", "web-1")
        await store.append([first], expected_version=0)
        lost_from = await store.head_position() + 1
        await store.append([second], expected_version=1)
        relay = await relayed_then_lost(trail, own_bus, lost_from)
        await relay.check_store()
        assert await store.read_event(second.event_id) == second
        # The relay publishes it at its new position; then a second failover loses it again.
        again_from = (await store.positions_of([second.event_id]))[second.event_id]
        await publish_the_rest(relay, store)
        await lose_from(trail, again_from)

        await relay.check_store()

        assert await store.read_event(second.event_id) == second


async def test_a_lost_event_stored_elsewhere_meanwhile_is_not_recovered_and_blocks_the_later_ones(
    server_urls: ServerUrls, own_bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=2) as trail:
        store = trail.store
        first, second = request(1, "act-1", "web-0"), request(2, "act-2", "web-1")
        await store.append([first], expected_version=0)
        lost_from = await store.head_position() + 1
        after = success(1, first)
        await store.append([second], expected_version=1)
        await store.append_many([after])
        relay = await relayed_then_lost(trail, own_bus, lost_from)

        # Another writer stores the lost request's id at another slot just before the relay appends it.
        append_many = store.append_many
        elsewhere = msgspec.structs.replace(second, stream="CloneSet/prod/db", stream_version=1)

        async def raced(events: list[Envelope]) -> int:
            if events[0].event_id == second.event_id:
                await append_many([elsewhere])
            return await append_many(events)

        monkeypatch.setattr(store, "append_many", raced)
        await relay.check_store()

        assert await store.read_event(second.event_id) == elsewhere
        assert await store.stream_version(DECISIONS) == 1
        assert await store.read_event(after.event_id) is None
        assert relay.recovered == 0
        assert [(u["event_id"], u["reason"]) for u in relay.unrecoverable] == [
            (str(after.event_id), AFTER_UNRECOVERED)
        ]


async def test_the_loss_is_recorded_after_a_second_failover_lost_the_relays_earlier_record(
    server_urls: ServerUrls, own_bus: Bus, tmp_path: Path
) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=2) as trail:
        store = trail.store
        first, second = request(1, "act-1", "web-0"), request(2, "act-2", "web-1")
        await store.append([first], expected_version=0)
        lost_from = await store.head_position() + 1
        await store.append([second], expected_version=1)
        relay = await relayed_then_lost(trail, own_bus, lost_from)
        await relay.check_store()  # puts the request back and records the loss
        again_from = (await store.positions_of([second.event_id]))[second.event_id]
        await publish_the_rest(relay, store)
        # A second failover loses both, and the relay's connection with it: its next append checks first
        # that the store still holds what it appended.
        await lose_from(trail, again_from)
        store.reconnected = True

        await relay.check_store()

        assert await store.read_event(second.event_id) == second
        records = await loss_records(store)
        assert len(records) == 2  # the first loss's record, put back from the bus, and the second's


async def test_a_lost_success_is_named_with_its_own_requests_pod_never_another_actions(
    server_urls: ServerUrls, own_bus: Bus, tmp_path: Path
) -> None:
    async with signed_trail(server_urls.database_url, tmp_path, rollouts=1, events=2) as trail:
        store = trail.store
        first = request(1, "act-1", "web-0")
        await store.append([first], expected_version=0)
        lost_from = await store.head_position() + 1
        # act-2's success, caused (wrongly, as older executors wrote it) by act-1's request.
        wrong = new_event(
            PodActionSucceeded(action_id="act-2", pod_uid="uid-web-1"),
            stream=ACTIONS,
            stream_version=1,
            occurred_at=T0,
            causation_id=first.event_id,
            correlation_id=ROLLOUT,
        )
        await store.append_many([wrong])
        relay = await relayed_then_lost(trail, own_bus, lost_from)
        other = new_event(
            PodActionSucceeded(action_id="act-9"), stream=ACTIONS, stream_version=0, occurred_at=T0
        )
        await store.append_unversioned([other])

        await relay.check_store()

        records = [
            e.envelope.payload
            for e in await store.read_stream(ACTIONS)
            if isinstance(e.envelope.payload, StoreLossDetected)
        ]
        assert [[(a["action_id"], a["pod"]) for a in r.actions_applied] for r in records] == [
            [("act-2", None)]
        ]
