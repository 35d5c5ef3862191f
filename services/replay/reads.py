"""The store reads replay, verify and what-if need (the only I/O of services/replay besides the CLI)."""

from __future__ import annotations

import asyncio
import heapq

import msgspec

from services.kinds.base import Kind
from services.kinds.registry import CLONESET, RECORDED
from services.model.event_store import EventStore, StoredEvent
from services.model.events import RolloutStarted
from services.model.streams import ROLLOUT_SEQUENCE_MARK
from services.model.upcasting import number_rollouts


class TargetError(ValueError):
    """A replay/verify target that names nothing in the log."""


def split_kind(target: str) -> tuple[Kind | None, str]:
    """``<Kind>/<namespace>/<name>[@...]`` -> (that recorded kind, the rest); anything else -> (None,
    target): a target without a kind names a CloneSet. The kind's name is matched without regard to case
    (``deployment/shop/web``)."""
    workload = target.partition("@")[0]
    if workload.count("/") != 2:
        return None, target
    first, _, rest = target.partition("/")
    kind = next((k for k in RECORDED if k.name.lower() == first.lower()), None)
    if kind is None:
        raise TargetError(
            f"{first!r} is not a recorded kind ({', '.join(k.name for k in RECORDED)}): expected"
            " [<kind>/]<namespace>/<name>"
        )
    return kind, rest


def parse_target(target: str) -> tuple[str, str, str | None]:
    """``ns/name`` or a rollout id ``ns/name@revision#n`` -> (namespace, name, rollout id or None). A
    rollout id without ``#n`` is resolved against the log by ``resolve_rollout``."""
    workload, _, revision = target.partition("@")
    namespace, _, name = workload.partition("/")
    if not namespace or not name or "/" in name or revision.startswith("#"):
        raise TargetError(
            f"expected <namespace>/<name> or a rollout id <namespace>/<name>@<revision>#<n>: {target!r}"
        )
    return namespace, name, target if revision else None


async def workload_events(
    store: EventStore, namespace: str, name: str, until_position: int | None = None
) -> list[StoredEvent]:
    """Every event of the workload's streams (observed, actions, decisions, and the shadow trail of a
    CloneSet rollbook only shadows: docs/shadow.md), in global order, rollout ids recorded before rollouts
    were numbered read numbered (services/model/upcasting.py); with ``until_position``, those up to it."""
    # Read at once, each on a connection of its own: Postgres fetches and renders one stream's rows while
    # this process decodes another's.
    streams = await asyncio.gather(
        *(
            store.read_stream(stream)
            if until_position is None
            else store.read_stream_until(stream, until_position)
            for stream in (
                CLONESET.observed_stream(namespace, name),
                CLONESET.actions_stream(namespace, name),
                CLONESET.decisions_stream(namespace, name),
                CLONESET.shadow_stream(namespace, name),
            )
        )
    )
    return numbered_events(list(heapq.merge(*streams, key=lambda e: e.global_position)))


def numbered_events(events: list[StoredEvent]) -> list[StoredEvent]:
    """Whole streams' events (global order) with their rollout ids numbered; unchanged ones kept as is."""
    envelopes = number_rollouts(e.envelope for e in events)
    return [
        stored if envelope is stored.envelope else msgspec.structs.replace(stored, envelope=envelope)
        for stored, envelope in zip(events, envelopes, strict=True)
    ]


def resolve_rollout(events: list[StoredEvent], rollout_id: str) -> str:
    """The rollout ``rollout_id`` names in the workload's (numbered) events. An id without its ``#n`` (as
    rollbook printed before rollouts were numbered) names the one rollout to that revision, and is refused
    when there were several: a rollback or a second roll to the same revision must be named in full."""
    started = [
        e.envelope.payload.rollout_id for e in events if isinstance(e.envelope.payload, RolloutStarted)
    ]
    if rollout_id in started or ROLLOUT_SEQUENCE_MARK in rollout_id:
        return rollout_id
    candidates = [r for r in started if r.partition(ROLLOUT_SEQUENCE_MARK)[0] == rollout_id]
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        raise TargetError(
            f"{rollout_id!r} names {len(candidates)} rollouts to that revision: {', '.join(candidates)}"
            " (name one)"
        )
    return rollout_id


def rollout_span(events: list[StoredEvent], rollout_id: str) -> tuple[int, int]:
    """Global positions of the first and last event of a rollout (its correlation id)."""
    positions = [e.global_position for e in events if e.envelope.correlation_id == rollout_id]
    if not positions:
        raise TargetError(f"no event of rollout {rollout_id!r} in the log")
    return positions[0], positions[-1]
