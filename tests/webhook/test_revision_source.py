"""The webhook's revision source: a SidecarSet's decisions stream caught up incrementally, and what was read
before kept when the event store cannot be read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from services.infra.store import StoredEvent
from services.model.events import RevisionCreated, RevisionsPruned, RolloutPaused, new_event
from services.model.sidecarset_streams import decisions_stream
from services.webhook.revisions import RevisionUnavailable, StoreRevisions

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class FakeStore:
    """Streams of events; ``down`` makes every read fail; records the versions it was asked from."""

    def __init__(self) -> None:
        self.streams: dict[str, list[StoredEvent]] = {}
        self.down = False
        self.reads: list[tuple[str, int]] = []

    def add(self, name: str, payload: Any) -> None:
        stream = decisions_stream(name)
        events = self.streams.setdefault(stream, [])
        envelope = new_event(payload, stream=stream, stream_version=len(events) + 1, occurred_at=NOW)
        events.append(StoredEvent(global_position=len(events) + 1, recorded_at=NOW, envelope=envelope))

    async def read_stream(self, stream: str, from_version: int = 1) -> list[StoredEvent]:
        self.reads.append((stream, from_version))
        if self.down:
            raise ConnectionError("event store unavailable")
        return [e for e in self.streams.get(stream, []) if e.envelope.stream_version >= from_version]


def created(name: str, number: int) -> RevisionCreated:
    return RevisionCreated(
        name=name,
        revision=number,
        hash="h",
        template={},
        object={"metadata": {"name": name}, "revision": number},
    )


async def test_caught_up_from_the_last_version_read_and_kept_while_the_store_is_down() -> None:
    store = FakeStore()
    store.add("a", created("a-1", 1))
    store.add("a", RolloutPaused(rollout_id="/a@x", reason="updateStrategy.paused"))
    store.add("a", created("a-2", 2))

    async def connect() -> Any:
        return store

    source = StoreRevisions(connect)
    first = await source.recorded(["a"])
    assert [r["metadata"]["name"] for r in first["a"]] == ["a-1", "a-2"]
    store.add("a", RevisionsPruned(names=["a-1"]))
    store.add("a", created("a-3", 3))
    second = await source.recorded(["a"])
    assert [r["metadata"]["name"] for r in second["a"]] == ["a-2", "a-3"]
    assert store.reads == [(decisions_stream("a"), 1), (decisions_stream("a"), 4)]  # only the new events

    store.down = True
    assert await source.recorded(["a"]) == second  # what was read before still holds
    with pytest.raises(
        RevisionUnavailable, match="'b'"
    ):  # a SidecarSet never read has nothing to fall back on
        await source.recorded(["a", "b"])
