"""GroupCommit: many tasks appending to one store-versioned stream at once are written in few appends,
every event stored exactly once with its own version, each writer told whether its event was new."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest

from services.infra.group_commit import GroupCommit
from services.infra.store import EventStore
from services.model.events import Envelope, PodActionStarted, new_event

pytestmark = pytest.mark.asyncio(loop_scope="session")


def started(stream: str, action: str) -> Envelope:
    return new_event(
        PodActionStarted(action_id=action, executor="test"),
        stream=stream,
        stream_version=1,
        occurred_at=datetime.now(UTC),
        event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"{stream}/{action}"),
    )


async def test_concurrent_writers_share_appends_and_each_event_is_stored_once(
    event_store: EventStore,
) -> None:
    stream = f"CloneSet/default/gc{uuid.uuid4().hex[:8]}/actions"
    commit = GroupCommit(event_store)
    events = [started(stream, f"a{i}") for i in range(60)]
    again = started(stream, "a0")  # a redelivery of the first: same event id
    results = await asyncio.gather(*(commit.append(e) for e in [*events, again]))
    assert results == [True] * 60 + [False]
    stored = await event_store.read_stream(stream)
    assert sorted(s.envelope.payload.action_id for s in stored) == sorted(f"a{i}" for i in range(60))  # type: ignore[union-attr]
    assert [s.envelope.stream_version for s in stored] == list(range(1, 61))
    assert commit.appends < 60 / 2  # batched: the first append alone, then the rest together
    assert commit.events == 61


async def test_writers_of_many_streams_share_appends_each_stream_in_order(event_store: EventStore) -> None:
    streams = [f"CloneSet/default/gc{uuid.uuid4().hex[:8]}/actions" for _ in range(20)]
    commit = GroupCommit(event_store)
    await asyncio.gather(*(commit.append(started(s, f"a{i}")) for i in range(5) for s in streams))
    for stream in streams:
        stored = await event_store.read_stream(stream)
        assert [s.envelope.payload.action_id for s in stored] == [f"a{i}" for i in range(5)]  # type: ignore[union-attr]
        assert [s.envelope.stream_version for s in stored] == [1, 2, 3, 4, 5]
    # One append for the first event, then one for the 99 queued meanwhile: not one per stream.
    assert commit.appends < len(streams)


async def test_a_row_the_store_refuses_fails_only_its_own_streams_writers(event_store: EventStore) -> None:
    streams = [f"CloneSet/default/gc{uuid.uuid4().hex[:8]}/actions" for _ in range(3)]
    commit = GroupCommit(event_store)
    # Postgres refuses a NUL character in a JSONB string: the shared append fails as a whole.
    refused = started(streams[0], "bad\u0000id")
    outcomes = await asyncio.gather(
        commit.append(started(streams[0], "a0")),  # the refused row's stream: fails with it
        commit.append(refused),
        commit.append(started(streams[1], "a1")),
        commit.append(started(streams[2], "a2")),
        return_exceptions=True,
    )
    assert commit.appends > 1  # the shared append failed; each stream was then appended on its own
    assert all(isinstance(outcome, Exception) for outcome in outcomes[:2])
    # The other workloads' events are stored all the same, not failed with the refused row's error.
    assert outcomes[2:] == [True, True]
    for stream, action in ((streams[1], "a1"), (streams[2], "a2")):
        stored = await event_store.read_stream(stream)
        assert [s.envelope.payload.action_id for s in stored] == [action]  # type: ignore[union-attr]
