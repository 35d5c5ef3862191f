"""The planner's store connections: the rounds of many workloads catch up at once, and the connections
they share stay open between bursts of rounds, instead of being opened for a burst and closed after it
(each a connect, a type introspection of every statement and a Postgres backend); a rebuild reads a
workload's history in pages."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from sqlalchemy import event

from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET as CLONESET_KIND
from services.model.events import PodActionSucceeded, new_event
from services.planner import service as planner_service
from services.planner.kinds import CLONESET
from services.planner.service import STORE_CONNECTIONS, catch_up, connect_store
from services.watcher.objects import observation

NOW = datetime(2026, 12, 1, tzinfo=UTC)

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_bursts_of_rounds_reuse_the_planners_connections(settings: Settings, database_url: str) -> None:
    store = await connect_store(msgspec.structs.replace(settings, database_url=database_url))
    opened: list[object] = []
    event.listen(store.engine.sync_engine, "connect", lambda connection, record: opened.append(connection))
    try:
        for burst in range(3):  # e.g. a rollout's waves: every workload woken at once, then quiet
            states = [CLONESET.new_state(f"default/burst-{burst}-{i}") for i in range(4 * STORE_CONNECTIONS)]
            await asyncio.gather(*(catch_up(store, state) for state in states))
        assert len(opened) <= STORE_CONNECTIONS
    finally:
        await store.close()


async def test_a_rebuild_folds_the_history_page_by_page_into_the_same_state(
    event_store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planner that folded nothing of a workload yet (started, took its partition over, or forgot the
    state after a failed round) reads the whole history: a page at a time, so a 10,000-pod CloneSet's
    history is never all decoded at once, and the state is the one folding it all at once gives. After
    that, a round's catch-up reads what is new in one statement again."""
    name = f"paged-{uuid.uuid4().hex[:8]}"
    observed, actions, _ = CLONESET_KIND.planned_streams("default", name)
    pods = [
        {"metadata": {"name": f"p{i}", "namespace": "default", "uid": f"u{i}", "resourceVersion": "1"}}
        for i in range(7)
    ]
    history = [observation("Pod", pod, "ADDED", stream=observed, correlation_id=None) for pod in pods]
    history += [
        new_event(PodActionSucceeded(action_id=f"a{i}"), stream=actions, stream_version=1, occurred_at=NOW)
        for i in range(5)
    ]
    await event_store.append_unversioned(history)
    monkeypatch.setattr(planner_service, "REBUILD_PAGE", 3)
    reads: list[int] = []
    read_stream, read_streams = event_store.read_stream, event_store.read_streams

    async def counted_read_stream(stream: str, from_version: int = 1, limit: int | None = None) -> Any:
        page = await read_stream(stream, from_version, limit)
        reads.append(len(page))
        return page

    async def counted_read_streams(positions: Any) -> Any:
        batches = await read_streams(positions)
        reads.append(sum(len(batch) for batch in batches))
        return batches

    monkeypatch.setattr(event_store, "read_stream", counted_read_stream)
    monkeypatch.setattr(event_store, "read_streams", counted_read_streams)

    paged = CLONESET.new_state(f"default/{name}")
    assert await catch_up(event_store, paged) == 12
    assert max(reads) <= 3
    at_once = CLONESET.new_state(f"default/{name}")
    for batch in await read_streams([(stream, 1) for stream in at_once.streams]):
        for stored in batch:
            at_once.fold(stored.envelope)
    assert paged == at_once and set(paged.pods) == {f"p{i}" for i in range(7)}

    reads.clear()
    changed = {"metadata": {**pods[0]["metadata"], "resourceVersion": "2"}}
    more = [observation("Pod", changed, "MODIFIED", stream=observed, correlation_id=None)]
    await event_store.append_unversioned(more)
    assert await catch_up(event_store, paged) == 1
    assert reads == [1]  # one read_streams statement
