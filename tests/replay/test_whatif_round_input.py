"""What-if starts a rollout at the round that started it when that round's input is stored
(``round_inputs``) and its SHA-256 is the one the round recorded; otherwise it folds every event of the
workload, as it always did. Either way the answer is the same."""

from __future__ import annotations

import copy
import hashlib
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from services.infra.store import EventStore
from services.kinds.cloneset.rules.model import PlanInput
from services.model.event_store import EventStore as EventStoreProtocol
from services.model.events import Envelope, PodActionSucceeded, RolloutStarted, RoundPlanned, new_event
from services.model.memory_store import InMemoryEventStore
from services.replay import operations
from services.replay.operations import recorded_from_round_input, what_if_rollout
from services.replay.reads import workload_events
from services.replay.simulation import WorkloadSimulation
from services.replay.whatif import StartState, WhatIfResult, record_from, replan, what_if

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
OVERRIDES: dict[str, Any] = {"maxUnavailable": 3}


def _three_rollouts(namespace: str) -> WorkloadSimulation:
    """A CloneSet of 6 pods rolled in place three times (the simulation's own rollout, then two more)."""
    sim = WorkloadSimulation(namespace, "web", replicas=6, start=T0, strategy={"maxUnavailable": 2})
    spec = sim.model.cloneset
    for k in (2, 3):
        spec = copy.deepcopy(spec)
        spec["spec"]["template"]["spec"]["containers"][0]["image"] = f"nginx:1.{k}"
        spec["metadata"]["generation"] = k + 1
        sim.model.schedule_spec(30.0 + 120.0 * k, spec)
    sim.run(limit=100_000)
    return sim


def _rollouts(events: list[Envelope]) -> list[str]:
    return [e.payload.rollout_id for e in events if isinstance(e.payload, RolloutStarted)]


async def _folded(store: EventStoreProtocol, namespace: str, rollout: str) -> WhatIfResult:
    """What-if from every event of the workload (the way that needs no stored input)."""
    return what_if(namespace, "web", await workload_events(store, namespace, "web"), rollout, OVERRIDES)


async def _store(store: EventStoreProtocol, sim: WorkloadSimulation) -> None:
    if isinstance(store, InMemoryEventStore):
        for envelope in sim.events:
            await store.append([envelope], None)
    else:
        await store.import_events(sim.events)
    for round_id, input_json in sim.rollout_inputs.items():
        await store.store_round_input(round_id, input_json)


@pytest.mark.pure
@pytest.mark.asyncio
async def test_every_rollout_start_keeps_the_input_its_round_hashed() -> None:
    sim = _three_rollouts("kept")
    rounds = {e.event_id: e.payload for e in sim.events if isinstance(e.payload, RoundPlanned)}
    starts = {e.causation_id for e in sim.events if isinstance(e.payload, RolloutStarted)}
    assert len(starts) == 3 and set(sim.rollout_inputs) == starts
    for round_id, input_json in sim.rollout_inputs.items():
        planned = rounds[round_id]
        assert hashlib.sha256(input_json).hexdigest() == planned.input_sha256


@pytest.mark.pure
@pytest.mark.parametrize("first_page", [64, 1], ids=["pages-by-pods", "pages-from-one-event"])
@pytest.mark.asyncio
async def test_what_if_from_the_stored_input_is_what_if_from_every_event(
    first_page: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same answer, whether the events after the round come in a page or two or one event at first
    (then 2, 4, ...: the record's end found across page boundaries)."""
    monkeypatch.setattr(operations, "_FIRST_PAGE", first_page)
    if first_page == 1:
        monkeypatch.setattr(operations, "_EVENTS_PER_POD", 0)
    sim = _three_rollouts("same")
    store = InMemoryEventStore()
    await _store(store, sim)
    rollouts = _rollouts(sim.events)
    assert len(rollouts) == 3
    for rollout in rollouts:
        assert await recorded_from_round_input(store, "same", "web", rollout) is not None
        assert await what_if_rollout(store, rollout, OVERRIDES) == await _folded(store, "same", rollout)


@pytest.mark.pure
@pytest.mark.asyncio
async def test_a_stored_input_that_is_not_the_rounds_is_ignored() -> None:
    """An attacker (or damage) puts another input under a round: one pod fewer, so a what-if that
    trusted it would re-plan a different rollout. Its hash is not the round's, so what-if folds the
    events and answers as if nothing were stored."""
    sim = _three_rollouts("forged")
    first = next(iter(sim.rollout_inputs))
    genuine = msgspec.json.decode(sim.rollout_inputs[first])
    forged = dict(genuine, pods=genuine["pods"][1:])
    sim.rollout_inputs[first] = msgspec.json.Encoder(order="sorted").encode(forged)
    store = InMemoryEventStore()
    await _store(store, sim)
    rollout = _rollouts(sim.events)[0]

    assert await recorded_from_round_input(store, "forged", "web", rollout) is None
    result = await what_if_rollout(store, rollout, OVERRIDES)
    assert result == await _folded(store, "forged", rollout)
    # Had the forged start been taken, the answer would have been another rollout's.
    events = await workload_events(store, "forged", "web")
    round_event = next(e for e in events if e.envelope.event_id == first)
    assert isinstance(round_event.envelope.payload, RoundPlanned)
    misled = replan(
        record_from(
            round_event,
            round_event.envelope.payload.now,
            StartState.from_input(msgspec.json.decode(sim.rollout_inputs[first], type=PlanInput)),
            events,
            rollout,
        ),
        rollout,
        OVERRIDES,
    )
    assert misled != result


@pytest.mark.servers
@pytest.mark.asyncio(loop_scope="session")
async def test_what_if_reads_the_stored_input_from_postgres(event_store: EventStore) -> None:
    sim = _three_rollouts("postgres-start")
    await _store(event_store, sim)
    for rollout in _rollouts(sim.events):
        assert await recorded_from_round_input(event_store, "postgres-start", "web", rollout) is not None
        assert await what_if_rollout(event_store, rollout, OVERRIDES) == await _folded(
            event_store, "postgres-start", rollout
        )
    # A second input for the same round is not taken: the first stays.
    round_id, input_json = next(iter(sim.rollout_inputs.items()))
    await event_store.store_round_input(round_id, b"{}")
    assert await event_store.round_input(round_id) == input_json


@pytest.mark.pure
@pytest.mark.asyncio
async def test_pages_hold_back_what_a_stream_not_yet_read_may_precede() -> None:
    """Stream a's events are at positions 1, 2, 3, 6; b's at 4, 5. After one event of each, only a's first
    is known to be in order (b's next may come before a's next); once b is read to its end, everything
    read is."""
    store = InMemoryEventStore()
    for stream, version in (("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("a", 4)):
        payload = PodActionSucceeded(action_id=f"{stream}-{version}")
        await store.append([new_event(payload, stream=stream, stream_version=version, occurred_at=T0)], None)
    pages = operations._StreamPages(store, await store.head_position(), {"a": 1, "b": 1}, page=1)

    def positions() -> list[int]:
        return [e.global_position for e in pages.merged()]

    await pages.read_more()  # a: 1; b: 4 (pages of 1)
    assert positions() == [1]
    await pages.read_more()  # a: 2, 3; b: 5 (pages of 2: b is read to its end)
    assert positions() == [1, 2, 3]
    await pages.read_more()  # a: 6 (pages of 4: a is read to its end)
    assert positions() == [1, 2, 3, 4, 5, 6] and pages.exhausted


@pytest.mark.pure
@pytest.mark.asyncio
async def test_pages_read_after_an_append_hold_nothing_newer_than_the_head_they_started_at() -> None:
    """A rollout still going: a stream read to its end on the first page gets an event later, while
    another is still being paged. No page holds what was appended after the reading began, so the record
    is the log as it was then, never one stream's later events without the other's."""
    store = InMemoryEventStore()

    async def append(stream: str, version: int) -> None:
        payload = PodActionSucceeded(action_id=f"{stream}-{version}")
        await store.append([new_event(payload, stream=stream, stream_version=version, occurred_at=T0)], None)

    for stream, version in (("a", 1), ("b", 1), ("b", 2), ("b", 3)):
        await append(stream, version)
    pages = operations._StreamPages(store, await store.head_position(), {"a": 1, "b": 1}, page=2)
    await pages.read_more()  # a: 1 (read to its end); b: 2, 3 (a full page)
    await append("a", 2)  # position 5
    await append("b", 4)  # position 6
    await pages.read_more()
    assert [e.global_position for e in pages.merged()] == [1, 2, 3, 4] and pages.exhausted
