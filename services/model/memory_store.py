"""An event store in memory (``services.model.event_store.EventStore``): the same appends and reads as the
Postgres store, for pure tests and tools that need a trail without a database. Not shared between
processes and not durable."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import UTC, datetime

import msgspec

from services.model.event_store import AppendResult, ConcurrencyError, StoredEvent
from services.model.events import Envelope


class InMemoryEventStore:
    """Every event in one list in global order; streams and ids indexed."""

    def __init__(self, events: Iterable[Envelope] = ()) -> None:
        self.events: list[StoredEvent] = []
        self._streams: dict[str, list[StoredEvent]] = {}
        self._ids: set[uuid.UUID] = set()
        self.round_inputs: dict[uuid.UUID, bytes] = {}  # RoundPlanned event id -> its planner input
        for envelope in events:
            self._store(envelope)

    def _store(self, envelope: Envelope, recorded_at: datetime | None = None) -> StoredEvent:
        stored = StoredEvent(
            global_position=len(self.events) + 1,
            recorded_at=recorded_at or datetime.now(UTC),
            envelope=envelope,
        )
        self.events.append(stored)
        self._streams.setdefault(envelope.stream, []).append(stored)
        self._ids.add(envelope.event_id)
        return stored

    # --- writing ------------------------------------------------------------------------------------

    async def append(self, events: Sequence[Envelope], expected_version: int | None) -> AppendResult:
        if not events:
            raise ValueError("append needs at least one event")
        stream = events[0].stream
        if any(e.stream != stream for e in events):
            raise ValueError("append takes the events of one stream")
        if expected_version is not None and [e.stream_version for e in events] != list(
            range(expected_version + 1, expected_version + 1 + len(events))
        ):
            raise ValueError(f"events of {stream!r} must carry versions {expected_version + 1}, ...")
        current = await self.stream_version(stream)
        new = [e for e in events if e.event_id not in self._ids]
        if not new:
            return AppendResult(
                stream=stream, appended=0, skipped=len(events), stream_version=current, last_position=None,
                events=[],
            )  # fmt: skip
        if expected_version is None:
            new = [msgspec.structs.replace(e, stream_version=current + i + 1) for i, e in enumerate(new)]
        else:
            wanted = new[0].stream_version - 1
            if current != wanted or any(
                b.stream_version != a.stream_version + 1 for a, b in zip(new, new[1:], strict=False)
            ):
                raise ConcurrencyError(stream, expected_version, current)
        last = [self._store(e) for e in new][-1]
        return AppendResult(
            stream=stream,
            appended=len(new),
            skipped=len(events) - len(new),
            stream_version=new[-1].stream_version,
            last_position=last.global_position,
            events=new,
        )

    # --- reading ------------------------------------------------------------------------------------

    async def stream_version(self, stream: str) -> int:
        events = self._streams.get(stream)
        return events[-1].envelope.stream_version if events else 0

    async def head_position(self) -> int:
        return len(self.events)

    async def read_stream(
        self, stream: str, from_version: int = 1, limit: int | None = None
    ) -> list[StoredEvent]:
        found = [e for e in self._streams.get(stream, []) if e.envelope.stream_version >= from_version]
        return found if limit is None else found[:limit]

    async def read_streams(self, positions: Sequence[tuple[str, int]]) -> list[list[StoredEvent]]:
        return [await self.read_stream(stream, version) for stream, version in positions]

    async def read_stream_page(
        self, stream: str, from_version: int, types: Sequence[str], limit: int
    ) -> list[StoredEvent]:
        wanted = set(types)
        found = [e for e in await self.read_stream(stream, from_version) if e.envelope.type in wanted]
        return found[:limit]

    async def read_stream_latest(self, stream: str, types: Sequence[str], limit: int) -> list[StoredEvent]:
        wanted = set(types)
        found = [e for e in reversed(self._streams.get(stream, [])) if e.envelope.type in wanted]
        return found[:limit]

    async def read_batch(self, from_position: int = 0, limit: int = 1000) -> list[StoredEvent]:
        return self.events[from_position : from_position + limit]

    async def read_all_batches(
        self, from_position: int = 0, batch_size: int = 2000
    ) -> AsyncIterator[list[StoredEvent]]:
        position = from_position
        while batch := await self.read_batch(position, batch_size):
            yield batch
            position = batch[-1].global_position

    async def read_correlation(
        self, correlation_id: str, after: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        found = [e for e in self.events[after:] if e.envelope.correlation_id == correlation_id]
        return found if limit is None else found[:limit]

    async def read_event(self, event_id: uuid.UUID) -> Envelope | None:
        return next((e.envelope for e in self.events if e.envelope.event_id == event_id), None)

    async def stored_ids(self, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        return {i for i in ids if i in self._ids}

    async def read_stream_until(self, stream: str, until_position: int) -> list[StoredEvent]:
        return [e for e in self._streams.get(stream, []) if e.global_position <= until_position]

    async def correlation_span(self, correlation_id: str) -> tuple[int, int] | None:
        positions = [e.global_position for e in self.events if e.envelope.correlation_id == correlation_id]
        return (positions[0], positions[-1]) if positions else None

    async def store_round_input(self, round_event_id: uuid.UUID, input_json: bytes) -> None:
        self.round_inputs.setdefault(round_event_id, input_json)

    async def round_input(self, round_event_id: uuid.UUID) -> bytes | None:
        return self.round_inputs.get(round_event_id)

    async def close(self) -> None:
        """Nothing to release."""
