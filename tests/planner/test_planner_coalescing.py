"""The planner service's loop (services/planner/service.py): a burst of wake-ups for one workload is planned
in one pass over all of them, each wake-up is acknowledged once a round covering it is stored, and the
rounds of different workloads run concurrently. On the in-memory event store: no server needed."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from nats.aio.msg import Msg

from services.infra.bus import DEFERRED
from services.infra.settings import Settings
from services.kinds.registry import CLONESET
from services.model.event_store import EventStore
from services.model.events import Envelope, ObjectObserved, RoundPlanned, new_event
from services.model.memory_store import InMemoryEventStore
from services.model.rounds import round_of
from services.planner.service import Planner

pytestmark = pytest.mark.asyncio(loop_scope="session")

SEED = Path(__file__).parents[1] / "fixtures" / "seed" / "cloneset-sample.yaml"


class WakeUp:
    """A bus message as the planner settles it."""

    def __init__(self) -> None:
        self.acked = asyncio.Event()
        self.naked = False
        self.given_back = asyncio.Event()

    async def ack(self) -> None:
        self.acked.set()

    async def nak(self, delay: float | None = None) -> None:
        self.naked = True
        self.given_back.set()

    async def in_progress(self) -> None:
        pass


class CountingStore:
    """The event store, counting the reads of each stream, and holding chosen reads until released."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.reads: dict[str, int] = {}
        self.hold: dict[str, asyncio.Event] = {}  # stream -> released when set

    async def read_streams(self, positions: list[tuple[str, int]]) -> Any:
        for stream, _ in positions:
            await self._read(stream)
        return await self.store.read_streams(positions)

    async def read_stream(self, stream: str, from_version: int = 1, limit: int | None = None) -> Any:
        """A rebuild's read of one stream, a page at a time (one page here: the histories are short)."""
        await self._read(stream)
        return await self.store.read_stream(stream, from_version, limit)

    async def _read(self, stream: str) -> None:
        self.reads[stream] = self.reads.get(stream, 0) + 1
        if stream in self.hold:
            await self.hold[stream].wait()

    async def append(self, envelopes: Any, expected_version: int | None) -> Any:
        return await self.store.append(envelopes, expected_version=expected_version)


async def observe(store: EventStore, namespace: str, replicas: int, version: int) -> Envelope:
    cloneset = yaml.safe_load(SEED.read_text())
    cloneset["metadata"].update(namespace=namespace, uid=f"uid-{namespace}", generation=version)
    cloneset["spec"]["replicas"] = replicas
    envelope = new_event(
        ObjectObserved(
            kind="CloneSet",
            namespace=namespace,
            name="sample",
            uid=f"uid-{namespace}",
            resource_version=str(version),
            change="ADDED" if version == 1 else "MODIFIED",
            object=cloneset,
        ),
        stream=CLONESET.observed_stream(namespace, "sample"),
        stream_version=version,
        occurred_at=datetime.now(UTC),
    )
    await store.append([envelope], expected_version=version - 1)
    return envelope


async def rounds_of(store: EventStore, namespace: str) -> list[RoundPlanned]:
    stored = await store.read_stream(CLONESET.decisions_stream(namespace, "sample"))
    return [p for p in (round_of(s.envelope.payload) for s in stored) if p is not None]


async def test_a_burst_of_wake_ups_is_planned_in_one_pass() -> None:
    settings, event_store = Settings(), InMemoryEventStore()
    namespace = f"burst-{uuid.uuid4().hex[:8]}"
    counting = CountingStore(event_store)
    planner = Planner(settings, cast(EventStore, counting))
    burst = [await observe(event_store, namespace, replicas, v) for v, replicas in enumerate([1, 2, 3, 4], 1)]
    wake_ups = [WakeUp() for _ in burst]
    for envelope, wake_up in zip(burst, wake_ups, strict=True):
        assert await planner.handle(envelope, cast(Msg, wake_up)) is DEFERRED  # settled by the round
    await asyncio.wait_for(asyncio.gather(*(w.acked.wait() for w in wake_ups)), 30)
    # One catch-up and one round over the four observations (the last one's 4 replicas), not four.
    assert counting.reads[CLONESET.observed_stream(namespace, "sample")] == 1
    [planned] = await rounds_of(event_store, namespace)
    assert planned.through[CLONESET.observed_stream(namespace, "sample")] == 4
    assert not any(w.naked for w in wake_ups)


async def test_rounds_of_different_workloads_run_concurrently() -> None:
    settings, event_store = Settings(), InMemoryEventStore()
    slow, fast = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("slow", "fast"))
    counting = CountingStore(event_store)
    planner = Planner(settings, cast(EventStore, counting))
    # The slow workload's catch-up is held until the fast one's round is stored: planned one after the
    # other, the slow one would wait for ever.
    released = counting.hold[CLONESET.observed_stream(slow, "sample")] = asyncio.Event()
    slow_wake, fast_wake = WakeUp(), WakeUp()
    await planner.handle(await observe(event_store, slow, 2, 1), cast(Msg, slow_wake))
    await planner.handle(await observe(event_store, fast, 2, 1), cast(Msg, fast_wake))
    await asyncio.wait_for(fast_wake.acked.wait(), 30)
    assert len(await rounds_of(event_store, fast)) == 1 and not slow_wake.acked.is_set()
    released.set()
    await asyncio.wait_for(slow_wake.acked.wait(), 30)
    assert len(await rounds_of(event_store, slow)) == 1


async def test_a_wake_up_for_events_already_folded_reads_nothing() -> None:
    settings, event_store = Settings(), InMemoryEventStore()
    namespace = f"ahead-{uuid.uuid4().hex[:8]}"
    counting = CountingStore(event_store)
    planner = Planner(settings, cast(EventStore, counting))
    first, second = [await observe(event_store, namespace, replicas, v) for v, replicas in ((1, 1), (2, 2))]
    # The first wake-up's round reads the stream to its end: the second observation too, before its
    # wake-up arrives.
    first_wake = WakeUp()
    await planner.handle(first, cast(Msg, first_wake))
    await asyncio.wait_for(first_wake.acked.wait(), 30)
    [planned] = await rounds_of(event_store, namespace)
    assert planned.through[CLONESET.observed_stream(namespace, "sample")] == 2
    second_wake = WakeUp()
    await planner.handle(second, cast(Msg, second_wake))
    await asyncio.wait_for(second_wake.acked.wait(), 30)
    # Settled without another read of the store (and without another round).
    assert counting.reads[CLONESET.observed_stream(namespace, "sample")] == 1
    assert len(await rounds_of(event_store, namespace)) == 1
    # A wake-up for an event not folded yet is still read and planned.
    third_wake = WakeUp()
    await planner.handle(await observe(event_store, namespace, 3, 3), cast(Msg, third_wake))
    await asyncio.wait_for(third_wake.acked.wait(), 30)
    assert counting.reads[CLONESET.observed_stream(namespace, "sample")] == 2


class FailingOnceStore(CountingStore):
    """The event store, refusing the first append with an error that is not an outage (a bug, a
    statement timeout): the round that folded the events fails after folding them."""

    def __init__(self, store: EventStore) -> None:
        super().__init__(store)
        self.refused = 0

    async def append(self, envelopes: Any, expected_version: int | None) -> Any:
        if not self.refused:
            self.refused += 1
            raise RuntimeError("the append failed")
        return await super().append(envelopes, expected_version)


async def test_a_wake_up_redelivered_after_a_failed_round_is_planned_again() -> None:
    settings, event_store = Settings(), InMemoryEventStore()
    namespace = f"failed-{uuid.uuid4().hex[:8]}"
    failing = FailingOnceStore(event_store)
    planner = Planner(settings, cast(EventStore, failing))
    observed = await observe(event_store, namespace, 2, 1)
    first = WakeUp()
    await planner.handle(observed, cast(Msg, first))
    # The round folded the observation, then its append failed: the wake-up goes back to the bus.
    await asyncio.wait_for(first.given_back.wait(), 30)
    assert failing.refused == 1 and not await rounds_of(event_store, namespace)
    redelivered = WakeUp()
    await planner.handle(observed, cast(Msg, redelivered))
    await asyncio.wait_for(redelivered.acked.wait(), 30)
    # Planned, not settled as "already folded" by the failed round's leftovers.
    assert len(await rounds_of(event_store, namespace)) == 1


async def trickle_reads(pace_interval: float, spacing: float) -> tuple[int, bool]:
    """Four observations of one workload, their wake-ups ``spacing`` seconds apart, each handed to the planner
    as it is stored (a rollout held to the API rate); returns how many rounds read the store, and whether the
    first wake-up was settled before the pace interval had passed."""
    event_store = InMemoryEventStore()
    namespace = f"trickle-{uuid.uuid4().hex[:8]}"
    counting = CountingStore(event_store)
    planner = Planner(Settings(pace_interval=pace_interval), cast(EventStore, counting))
    wake_ups = []
    first_on_time = False
    for version in range(1, 5):
        wake_up = WakeUp()
        wake_ups.append(wake_up)
        await planner.handle(await observe(event_store, namespace, version, version), cast(Msg, wake_up))
        if version == 1:
            try:
                await asyncio.wait_for(wake_up.acked.wait(), pace_interval * 0.75 if pace_interval else 30)
                first_on_time = True
            except TimeoutError:
                pass
        else:
            await asyncio.sleep(spacing)
    await asyncio.wait_for(asyncio.gather(*(w.acked.wait() for w in wake_ups)), 30)
    return counting.reads[CLONESET.observed_stream(namespace, "sample")], first_on_time


async def test_wake_ups_trickling_in_within_the_pace_interval_are_one_round_a_lone_one_waits_for_none() -> (
    None
):
    paced, first_on_time = await trickle_reads(pace_interval=1.0, spacing=0.2)
    # The first observation, after a quiet spell, was planned at once; the three after it, arriving within
    # the interval of that round's start, are one round.
    assert first_on_time
    assert paced == 2
    # Unpaced, the same trickle is a round per wake-up.
    unpaced, _ = await trickle_reads(pace_interval=0.0, spacing=0.2)
    assert unpaced == 4
