"""A rollout's replay, UI frames and verification read its workload's events only up to the rollout's last
one (the workload's later rollouts are not read) and show exactly what reading every event shows."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from services.model.event_store import StoredEvent
from services.model.events import RolloutStarted
from services.model.memory_store import InMemoryEventStore
from services.replay.operations import cloneset_frames, replay_lines, replay_records, verify_target
from services.replay.simulation import WorkloadSimulation

pytestmark = [pytest.mark.pure, pytest.mark.asyncio]

T0 = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


class CountingStore(InMemoryEventStore):
    """Counts the events its stream reads return."""

    def __init__(self) -> None:
        super().__init__()
        self.returned = 0

    async def read_stream(
        self, stream: str, from_version: int = 1, limit: int | None = None
    ) -> list[StoredEvent]:
        events = await super().read_stream(stream, from_version, limit)
        self.returned += len(events)
        return events

    async def read_stream_until(self, stream: str, until_position: int) -> list[StoredEvent]:
        events = await super().read_stream_until(stream, until_position)
        self.returned += len(events)
        return events


class WholeReads(CountingStore):
    """A store that names no rollout's span: every read is of whole streams."""

    async def correlation_span(self, correlation_id: str) -> tuple[int, int] | None:
        return None


def _stored(store: InMemoryEventStore, sim: WorkloadSimulation) -> None:
    """The trail, each event recorded at its own time (both stores then print the same lines)."""
    for envelope in sim.events:
        store._store(envelope, recorded_at=envelope.occurred_at)


async def test_a_rollout_reads_up_to_its_last_event_and_shows_the_same() -> None:
    sim = WorkloadSimulation("reads", "web", replicas=5, start=T0, strategy={"maxUnavailable": 2})
    spec = sim.model.cloneset
    for k in (2, 3):
        spec = copy.deepcopy(spec)
        spec["spec"]["template"]["spec"]["containers"][0]["image"] = f"nginx:1.{k}"
        sim.model.schedule_spec(30.0 + 120.0 * k, spec)
    sim.run(limit=100_000)
    rollouts = [e.payload.rollout_id for e in sim.events if isinstance(e.payload, RolloutStarted)]
    assert len(rollouts) == 3
    bounded, whole = CountingStore(), WholeReads()
    _stored(bounded, sim)
    _stored(whole, sim)

    for index, rollout in enumerate(rollouts):
        for read in (replay_lines, replay_records):
            assert await read(bounded, rollout) == await read(whole, rollout)
        by_span, by_whole = await cloneset_frames(bounded, rollout), await cloneset_frames(whole, rollout)
        assert by_span.frames == by_whole.frames and by_span.unavailability == by_whole.unavailability
        assert await verify_target(bounded, rollout) == await verify_target(whole, rollout)
        bounded.returned = whole.returned = 0
        await replay_lines(bounded, rollout)
        await replay_lines(whole, rollout)
        if index < 2:  # an earlier rollout: the later ones' events are not read
            assert bounded.returned < whole.returned
        else:
            assert bounded.returned <= whole.returned
