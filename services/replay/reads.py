"""The store reads replay, verify and what-if need (the only I/O of services/replay besides the CLI)."""

from __future__ import annotations

import heapq

from services.infra.store import EventStore, StoredEvent
from services.model.streams import actions_stream, decisions_stream, observed_stream, shadow_stream


class TargetError(ValueError):
    """A replay/verify target that names nothing in the log."""


def parse_target(target: str) -> tuple[str, str, str | None]:
    """``ns/name`` or a rollout id ``ns/name@revision`` -> (namespace, name, rollout id or None)."""
    workload, _, revision = target.partition("@")
    namespace, _, name = workload.partition("/")
    if not namespace or not name or "/" in name:
        raise TargetError(
            f"expected <namespace>/<name> or a rollout id <namespace>/<name>@<revision>: {target!r}"
        )
    return namespace, name, target if revision else None


async def workload_events(store: EventStore, namespace: str, name: str) -> list[StoredEvent]:
    """Every event of the workload's streams (observed, actions, decisions, and the shadow trail of a
    CloneSet rollbook only shadows: docs/shadow.md), in global order."""
    streams = [
        await store.read_stream(stream)
        for stream in (
            observed_stream(namespace, name),
            actions_stream(namespace, name),
            decisions_stream(namespace, name),
            shadow_stream(namespace, name),
        )
    ]
    return list(heapq.merge(*streams, key=lambda e: e.global_position))


def rollout_span(events: list[StoredEvent], rollout_id: str) -> tuple[int, int]:
    """Global positions of the first and last event of a rollout (its correlation id)."""
    positions = [e.global_position for e in events if e.envelope.correlation_id == rollout_id]
    if not positions:
        raise TargetError(f"no event of rollout {rollout_id!r} in the log")
    return positions[0], positions[-1]
