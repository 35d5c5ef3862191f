"""The webhook's revision source: the revision events of a SidecarSet's decisions stream caught up
incrementally and page by page, one reader per SidecarSet, and what was read before kept (with a backoff)
when the event store cannot be read."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.kinds.registry import SIDECARSET
from services.model.event_store import StoredEvent
from services.model.events import RevisionCreated, RevisionsPruned, RolloutPaused, new_event
from services.model.memory_store import InMemoryEventStore
from services.webhook.revisions import REVISION_EVENT_TYPES, StoreRevisions, load_pinned
from tests.kinds.sidecarset.test_upgrade import NEW, sidecarset

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class FakeStore(InMemoryEventStore):
    """The in-memory event store, with faults: ``down`` makes every read fail; ``down_for`` fails the reads
    of some SidecarSets; ``gate`` (when set) makes every read wait for it; ``reads`` records (SidecarSet,
    from_version) of each read."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.down_for: set[str] = set()
        self.gate: asyncio.Event | None = None
        self.reads: list[tuple[str, int]] = []
        self.reads_done = 0
        self._read_seen = asyncio.Event()

    async def wait_reads(self, count: int) -> None:
        """Until ``count`` reads have started."""
        while len(self.reads) < count:
            self._read_seen.clear()
            await asyncio.wait_for(self._read_seen.wait(), 2.0)

    def add(self, name: str, payload: Any, at: datetime = NOW) -> None:
        stream = SIDECARSET.decisions_stream("", name)
        version = len(self._streams.get(stream, [])) + 1
        self._store(new_event(payload, stream=stream, stream_version=version, occurred_at=at), recorded_at=at)

    async def read_stream_page(
        self, stream: str, from_version: int, types: Sequence[str], limit: int
    ) -> list[StoredEvent]:
        name = stream.split("/")[2]
        self.reads.append((name, from_version))
        self._read_seen.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.down or name in self.down_for:
            raise ConnectionError("event store unavailable")
        self.reads_done += 1
        return await super().read_stream_page(stream, from_version, types, limit)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def created(name: str, number: int, custom: str = "") -> RevisionCreated:
    labels = {"apps.kruise.io/sidecarset-custom-version": custom} if custom else {}
    return RevisionCreated(
        name=name,
        revision=number,
        hash="h",
        template={},
        object={"metadata": {"name": name, "labels": labels}, "revision": number},
    )


def source(store: FakeStore, clock: Clock | None = None, **options: Any) -> StoreRevisions:
    async def connect() -> Any:
        return store

    return StoreRevisions(connect, clock=clock or Clock(), **options)


def names(records: list[dict[str, Any]]) -> list[str]:
    return [r["metadata"]["name"] for r in records]


async def test_caught_up_from_the_last_version_read_and_kept_while_the_store_is_down() -> None:
    store, clock = FakeStore(), Clock()
    store.add("a", created("a-1", 1))
    store.add("a", RolloutPaused(rollout_id="/a@x", reason="updateStrategy.paused"))
    store.add("a", created("a-2", 2))
    revisions = source(store, clock)
    first = await revisions.recorded(["a"])
    assert names(first.revisions["a"]) == ["a-1", "a-2"] and first.failed == {}
    store.add("a", RevisionsPruned(names=["a-1"]))
    store.add("a", created("a-3", 3))
    clock.now += 5  # past the freshness window
    second = await revisions.recorded(["a"])
    assert names(second.revisions["a"]) == ["a-2", "a-3"]
    assert store.reads == [("a", 1), ("a", 4)]  # only what follows the last revision event read

    store.down = True
    clock.now += 5
    stale = await revisions.recorded(["a", "b"])
    assert stale.revisions == second.revisions  # what was read before still holds ...
    assert "cannot be read" in stale.failed["a"]  # ... and the caller is told it may be stale
    assert "b" in stale.failed and "b" not in stale.revisions  # never read: nothing to fall back on


async def test_only_revision_events_are_asked_for() -> None:
    assert set(REVISION_EVENT_TYPES) == {"RevisionCreated", "RevisionsPruned"}
    store = FakeStore()
    for i in range(5):
        store.add("a", RolloutPaused(rollout_id=f"/a@{i}", reason="updateStrategy.paused"))
    store.add("a", created("a-1", 1))
    recorded = await source(store).recorded(["a"])
    assert names(recorded.revisions["a"]) == ["a-1"]
    assert store.reads == [("a", 1)]  # one page: the five other events never came back


async def test_a_long_history_is_read_in_pages_and_a_read_cut_short_resumes_after_the_last_page() -> None:
    store, clock = FakeStore(), Clock()
    for i in range(1, 8):
        store.add("a", created(f"a-{i}", i))
    revisions = source(store, clock, page_size=3, first_backoff_seconds=1.0)
    # The store goes away after the first page: the SidecarSet is not loaded, but the page is kept.
    original = store.read_stream_page

    async def one_page_then_down(stream: str, from_version: int, types: Sequence[str], limit: int) -> Any:
        if store.reads_done >= 1:
            store.down = True
        return await original(stream, from_version, types, limit)

    store.read_stream_page = one_page_then_down  # type: ignore[method-assign]
    cut = await revisions.recorded(["a"])
    assert "a" in cut.failed and "a" not in cut.revisions
    store.read_stream_page = original  # type: ignore[method-assign]
    store.down = False
    clock.now += 2  # past the backoff
    whole = await revisions.recorded(["a"])
    assert names(whole.revisions["a"]) == [f"a-{i}" for i in range(1, 8)] and whole.failed == {}
    assert store.reads == [("a", 1), ("a", 4), ("a", 4), ("a", 7)]  # resumed after page one


async def test_a_hanging_store_costs_one_timeout_then_backs_off() -> None:
    store, clock = FakeStore(), Clock()
    store.add("a", created("a-1", 1))
    store.gate = asyncio.Event()  # never set: every read hangs
    revisions = source(store, clock, timeout_seconds=0.05, first_backoff_seconds=1.0, max_backoff_seconds=4)
    hung = await revisions.recorded(["a"])
    assert "no answer within 0.05s" in hung.failed["a"]
    assert store.reads == [("a", 1)]
    # Within the backoff, admissions do not wait on the store again.
    again = await asyncio.wait_for(revisions.recorded(["a"]), 0.04)
    assert "not retried" in again.failed["a"] and store.reads == [("a", 1)]
    clock.now += 1.5
    await revisions.recorded(["a"])  # tried again after the backoff, fails, backs off twice as long
    assert len(store.reads) == 2
    clock.now += 1.5
    await revisions.recorded(["a"])
    assert len(store.reads) == 2  # the second backoff is 2 s
    store.gate.set()
    clock.now += 1
    recovered = await revisions.recorded(["a"])
    assert names(recovered.revisions["a"]) == ["a-1"] and recovered.failed == {}


async def test_concurrent_readers_of_one_sidecarset_share_one_read() -> None:
    store = FakeStore()
    store.add("a", created("a-1", 1))
    store.gate = asyncio.Event()
    revisions = source(store)
    readers = [asyncio.create_task(revisions.recorded(["a"])) for _ in range(10)]
    await store.wait_reads(1)
    store.gate.set()
    results = await asyncio.gather(*readers)
    assert all(names(r.revisions["a"]) == ["a-1"] and not r.failed for r in results)
    assert store.reads == [("a", 1)]  # the other nine found it fresh


async def test_a_hanging_read_of_one_sidecarset_does_not_hold_up_another() -> None:
    store = FakeStore()
    store.add("slow", created("slow-1", 1))
    store.add("fast", created("fast-1", 1))
    gate, slow_reading = asyncio.Event(), asyncio.Event()
    original = store.read_stream_page

    async def slow_hangs(stream: str, from_version: int, types: Sequence[str], limit: int) -> Any:
        if "slow" in stream:
            slow_reading.set()
            await gate.wait()
        return await original(stream, from_version, types, limit)

    store.read_stream_page = slow_hangs  # type: ignore[method-assign]
    revisions = source(store, timeout_seconds=5.0)
    slow = asyncio.create_task(revisions.recorded(["slow"]))
    await asyncio.wait_for(slow_reading.wait(), 1.0)
    fast = await asyncio.wait_for(revisions.recorded(["fast"]), 1.0)  # not behind the slow read
    assert names(fast.revisions["fast"]) == ["fast-1"]
    assert not slow.done()
    gate.set()
    assert names((await slow).revisions["slow"]) == ["slow-1"]


async def test_one_sidecarset_failing_leaves_the_other_read() -> None:
    store = FakeStore()
    store.add("a", created("a-1", 1))
    store.add("b", created("b-1", 1))
    store.down_for = {"b"}
    recorded = await source(store).recorded(["a", "b"])
    assert names(recorded.revisions["a"]) == ["a-1"]
    assert list(recorded.failed) == ["b"] and "b" not in recorded.revisions


async def test_a_fresh_sidecarset_is_not_read_again() -> None:
    store, clock = FakeStore(), Clock()
    store.add("a", created("a-1", 1))
    revisions = source(store, clock, fresh_seconds=1.0)
    await revisions.recorded(["a"])
    clock.now += 0.5
    await revisions.recorded(["a"])
    assert store.reads == [("a", 1)]
    clock.now += 1.0
    await revisions.recorded(["a"])
    assert store.reads == [("a", 1), ("a", 2)]


async def test_revisions_carry_the_time_they_were_first_recorded() -> None:
    store = FakeStore()
    store.add("a", created("a-1", 1), at=NOW)
    store.add("a", created("a-2", 2), at=NOW + timedelta(minutes=1))
    store.add("a", created("a-1", 3), at=NOW + timedelta(minutes=2))  # a rollback re-numbers a-1
    recorded = await source(store).recorded(["a"])
    stamps = {
        r["metadata"]["name"]: (r["revision"], r["metadata"]["creationTimestamp"])
        for r in recorded.revisions["a"]
    }
    assert stamps == {"a-1": (3, "2026-11-30T12:00:00Z"), "a-2": (2, "2026-11-30T12:01:00Z")}
    # The event's own object is left as it was.
    first = (await store.read_stream(SIDECARSET.decisions_stream("", "a")))[0].envelope.payload
    assert isinstance(first, RevisionCreated) and "creationTimestamp" not in first.object["metadata"]


async def test_the_pinning_sidecarsets_are_loaded_before_the_webhook_is_ready() -> None:
    store = FakeStore()
    store.add("test-sidecarset", created("test-sidecarset-1", 1))
    store.down = True
    pinned = sidecarset(NEW)
    pinned["spec"]["injectionStrategy"] = {"revision": {"revisionName": "test-sidecarset-1"}}
    from services.model import sidecarset as ss

    parsed = [ss.parse_sidecarset(pinned)]
    revisions = source(store, first_backoff_seconds=0.0)
    loading = asyncio.create_task(load_pinned(revisions, lambda: parsed, first_retry_seconds=0.01))
    await store.wait_reads(2)  # retried while the store is down
    assert not loading.done()
    store.down = False
    await asyncio.wait_for(loading, 2.0)
    assert names((await revisions.recorded(["test-sidecarset"])).revisions["test-sidecarset"]) == [
        "test-sidecarset-1"
    ]


@pytest.mark.parametrize("count", [0, 450])
async def test_the_event_store_returns_revision_events_a_page_at_a_time(event_store: Any, count: int) -> None:
    """The store's typed page read (against Postgres): only the types asked for, from a version, at most
    ``limit``."""
    import uuid

    name = f"paged-{uuid.uuid4().hex[:8]}"
    stream = SIDECARSET.decisions_stream("", name)
    events = []
    for i in range(count):
        payload = (
            created(f"{name}-{i}", i + 1)
            if i % 3 == 0
            else RolloutPaused(rollout_id=f"/{name}@{i}", reason="r")
        )
        events.append(new_event(payload, stream=stream, stream_version=i + 1, occurred_at=NOW))
    if events:
        await event_store.append(events, 0)
    seen: list[int] = []
    version = 1
    while True:
        page = await event_store.read_stream_page(stream, version, REVISION_EVENT_TYPES, 100)
        assert all(e.envelope.type == "RevisionCreated" for e in page)
        seen.extend(e.envelope.stream_version for e in page)
        if len(page) < 100:
            break
        version = page[-1].envelope.stream_version + 1
    assert seen == [i + 1 for i in range(count) if i % 3 == 0]
