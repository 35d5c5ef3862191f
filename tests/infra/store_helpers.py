"""Event builders shared by the store tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from services.infra.store import EventStore
from services.model.events import Envelope, Event, PodActionRequested, new_event


def unique_stream(label: str = "CloneSet") -> str:
    return f"{label}/test/{uuid.uuid4().hex[:10]}"


def pod_action(stream: str, version: int, *, index: int = 0, rollout: str = "r1") -> Envelope:
    return new_event(
        PodActionRequested(
            action_id=f"{stream}-{version}",
            action="createPod",
            namespace="default",
            pod=f"sample-{index}",
            rollout_id=rollout,
            revision="sample-7656fc4998",
            details={"labels": {"app": "sample"}, "containers": ["main", "sidecar"], "n": index},
        ),
        stream=stream,
        stream_version=version,
        occurred_at=datetime(2026, 11, 30, 12, 0, index % 60, tzinfo=UTC),
        causation_id=uuid.uuid4(),
        correlation_id=rollout,
    )


def batch(stream: str, first_version: int, count: int, *, rollout: str = "r1") -> list[Envelope]:
    return [pod_action(stream, first_version + i, index=i, rollout=rollout) for i in range(count)]


async def import_trail(url: str, trail: Iterable[tuple[str, Event]], start: datetime) -> None:
    """Store ``trail`` ((stream, payload) in log order) by ``import_events``: COPY, every insert trigger
    runs, and nothing of a later migration is read (the store's appends read tables of later migrations).
    Each stream is numbered from 1; the events are one second apart from ``start``."""
    versions: dict[str, int] = {}
    events = []
    for i, (stream, payload) in enumerate(trail):
        versions[stream] = versions.get(stream, 0) + 1
        events.append(
            new_event(
                payload,
                stream=stream,
                stream_version=versions[stream],
                occurred_at=start + timedelta(seconds=i),
            )
        )
    store = await EventStore.connect(url)
    try:
        await store.import_events(events)
    finally:
        await store.close()
