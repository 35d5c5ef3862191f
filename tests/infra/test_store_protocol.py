"""The event store protocol (services/model/event_store.py) has two implementations: Postgres and the
in-memory one the pure tests use. The same appends and reads give the same answers on both, so a pure test
on the in-memory store says what the services would see on Postgres."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from services.infra.store import EventStore as PostgresStore
from services.model.event_store import ConcurrencyError, EventStore
from services.model.events import Envelope, StatusPlanned, new_event
from services.model.memory_store import InMemoryEventStore
from tests.infra.store_helpers import batch, unique_stream


async def scenario(store: EventStore, one: str, two: str) -> list[Any]:
    """Appends with and without an expected version, a redelivery, a conflict, and every read; what each
    answered (global positions made relative to the first)."""
    seen: list[Any] = []
    events = batch(one, 1, 3)
    first = await store.append(events, expected_version=0)
    base = (first.last_position or 0) - 3
    seen.append(("append", first.appended, first.skipped, first.stream_version, first.last_position - base))
    again = await store.append(events[:2], expected_version=0)  # a redelivery: stored already
    seen.append(("redelivered", again.appended, again.skipped, again.stream_version))
    try:
        await store.append(batch(one, 3, 1), expected_version=2)  # version 3 is taken by another event
        seen.append("no conflict")
    except ConcurrencyError as error:
        seen.append(("conflict", error.expected, error.actual))
    loose = await store.append(batch(two, 7, 2), expected_version=None)  # the store picks the versions
    seen.append(("unversioned", [e.stream_version for e in loose.events], loose.stream_version))
    seen.append(("versions", await store.stream_version(one), await store.stream_version(two)))
    seen.append(
        ("stream", [(e.envelope.stream_version, e.envelope.event_id) for e in await store.read_stream(one)])
    )
    seen.append(("page", [e.envelope.stream_version for e in await store.read_stream(one, 2, 1)]))
    typed = await store.read_stream_page(one, 1, ["PodActionRequested"], 2)
    seen.append(("typed", [e.envelope.stream_version for e in typed]))
    seen.append(("none of the type", await store.read_stream_page(one, 1, ["RoundPlanned"], 5)))
    streams = await store.read_streams([(two, 2), (one, 3)])
    seen.append(("streams", [[e.envelope.stream_version for e in s] for s in streams]))
    batches = [b async for b in store.read_all_batches(base, 2)]
    mine = [e for b in batches for e in b if e.envelope.stream in (one, two)]
    seen.append(("all", [(e.global_position - base, e.envelope.stream == one) for e in mine]))
    stored = (await store.read_stream(one))[0]
    seen.append(("event", await store.read_event(stored.envelope.event_id) == stored.envelope))
    ids = [stored.envelope.event_id, batch(one, 9, 1)[0].event_id]
    seen.append(("ids", await store.stored_ids(ids) == {stored.envelope.event_id}))
    rollout = await store.read_correlation("r1", base)
    seen.append(("rollout", [e.global_position - base for e in rollout if e.envelope.stream in (one, two)]))
    seen.append(("head", await store.head_position() - base))
    # The latest of some types, newest first: two's versions 3-6 are StatusPlanned, PodActionRequested,
    # StatusPlanned, StatusPlanned.
    planned = [status_planned(two, ready) for ready in (3, 5, 6)]
    await store.append([planned[0], *batch(two, 4, 1), *planned[1:]], expected_version=None)
    latest = [
        [e.envelope.stream_version for e in await store.read_stream_latest(stream, types, limit)]
        for stream, types, limit in (
            (two, ["StatusPlanned"], 2),
            (two, ["StatusPlanned"], 5),
            (two, ["StatusPlanned", "PodActionRequested"], 4),
            (two, ["RoundPlanned"], 3),
            (unique_stream(), ["StatusPlanned"], 3),
        )
    ]
    seen.append(("latest", latest))
    return seen


def status_planned(stream: str, ready: int) -> Envelope:
    return new_event(
        StatusPlanned(kind="CloneSet", namespace="test", name="two", status={"readyReplicas": ready}),
        stream=stream,
        stream_version=1,  # the store numbers it (no expected version)
        occurred_at=datetime(2026, 11, 30, 12, 0, ready, tzinfo=UTC),
    )


EXPECTED = [
    ("append", 3, 0, 3, 3),
    ("redelivered", 0, 2, 3),
    ("conflict", 2, 3),
    ("unversioned", [1, 2], 2),
    ("versions", 3, 2),
]


async def test_the_in_memory_store_keeps_the_stores_promises() -> None:
    store = InMemoryEventStore()
    seen = await scenario(store, "CloneSet/test/one", "CloneSet/test/two")
    assert seen[: len(EXPECTED)] == EXPECTED
    answers = dict(s for s in seen[len(EXPECTED) :] if isinstance(s, tuple) and len(s) == 2)
    assert answers["page"] == [2] and answers["typed"] == [1, 2] and answers["none of the type"] == []
    assert answers["streams"] == [[2], [3]]
    assert answers["all"] == [(1, True), (2, True), (3, True), (4, False), (5, False)]
    assert answers["event"] and answers["ids"] and answers["rollout"] == [1, 2, 3, 4, 5]
    assert answers["head"] == 5
    assert answers["latest"] == [[6, 5], [6, 5, 3], [6, 5, 4, 3], [], []]


async def test_postgres_and_the_in_memory_store_answer_alike(event_store: PostgresStore) -> None:
    one, two = unique_stream(), unique_stream()
    on_postgres = await scenario(event_store, one, two)
    in_memory = await scenario(InMemoryEventStore(), one, two)
    # Event ids are fresh per build: compare the streams' versions and the rest as they are.
    strip = msgspec.json.encode
    assert [_without_ids(s) for s in on_postgres] == [_without_ids(s) for s in in_memory], (
        strip(on_postgres),
        strip(in_memory),
    )


def _without_ids(seen: Any) -> Any:
    if isinstance(seen, tuple) and seen[0] == "stream":
        return ("stream", [version for version, _ in seen[1]])
    return seen
