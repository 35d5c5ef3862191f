"""The event store as the services see it: a ``typing.Protocol`` of named reads and appends, with no SQL
and no driver. ``services.infra.store.PostgresEventStore`` implements it over Postgres;
``services.model.memory_store.InMemoryEventStore`` implements it in memory, for pure tests and tools.

Code that only appends and reads events (the watcher's recorder, the webhook's revision source, replay)
depends on this protocol, so it runs on either. Every SQL text lives in ``services/infra`` (a test,
tests/test_sql_in_infra.py, fails when one appears anywhere else).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Protocol

import msgspec

from services.model.events import Envelope


class ConcurrencyError(Exception):
    """The stream was not at the version the writer expected; nothing was stored."""

    def __init__(self, stream: str, expected: int, actual: int, detail: str = "") -> None:
        self.stream = stream
        self.expected = expected
        self.actual = actual
        message = (
            f"concurrency conflict on stream {stream!r}: expected version {expected}, "
            f"but the stream is at version {actual}"
        )
        super().__init__(message + (f" ({detail})" if detail else ""))


class StoredEvent(msgspec.Struct, frozen=True):
    global_position: int
    recorded_at: datetime
    envelope: Envelope


class AppendResult(msgspec.Struct, frozen=True, kw_only=True):
    stream: str
    appended: int  # rows new in this call
    skipped: int  # events whose event_id was already stored
    stream_version: int  # the stream's version after the append
    last_position: int | None  # global position of the last new row (None when nothing was new)
    events: list[Envelope]  # the envelopes stored by this call, with their final stream versions


class EventStore(Protocol):
    """Appends with per-stream optimistic concurrency, idempotent by event id, and reads by stream or by
    global position. The semantics are those of services/infra/store.py's module docstring."""

    async def append(self, events: Sequence[Envelope], expected_version: int | None) -> AppendResult:
        """One stream's events, at consecutive versions after ``expected_version`` (None: after the
        stream's current one); an event id already stored is skipped; ``ConcurrencyError`` when the stream
        is elsewhere."""
        ...

    async def stream_version(self, stream: str) -> int: ...

    async def head_position(self) -> int:
        """The highest global position readable now (0 when empty)."""
        ...

    async def read_stream(
        self, stream: str, from_version: int = 1, limit: int | None = None
    ) -> list[StoredEvent]: ...

    async def read_streams(self, positions: Sequence[tuple[str, int]]) -> list[list[StoredEvent]]: ...

    async def read_stream_page(
        self, stream: str, from_version: int, types: Sequence[str], limit: int
    ) -> list[StoredEvent]: ...

    async def read_stream_latest(self, stream: str, types: Sequence[str], limit: int) -> list[StoredEvent]:
        """The last ``limit`` events of ``stream`` whose type is one of ``types``, newest first."""
        ...

    async def read_batch(self, from_position: int = 0, limit: int = 1000) -> list[StoredEvent]: ...

    def read_all_batches(
        self, from_position: int = 0, batch_size: int = 2000
    ) -> AsyncIterator[list[StoredEvent]]: ...

    async def read_correlation(
        self, correlation_id: str, after: int = 0, limit: int | None = None
    ) -> list[StoredEvent]: ...

    async def read_event(self, event_id: uuid.UUID) -> Envelope | None: ...

    async def stored_ids(self, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]: ...

    async def read_stream_until(self, stream: str, until_position: int) -> list[StoredEvent]:
        """The events of ``stream`` at global positions up to ``until_position``, in stream order."""
        ...

    async def correlation_span(self, correlation_id: str) -> tuple[int, int] | None:
        """The global positions of the first and last event with this correlation id (None: none)."""
        ...

    async def store_round_input(self, round_event_id: uuid.UUID, input_json: bytes) -> None:
        """Keep the canonical planner input of a round that started a rollout (by its RoundPlanned's
        event id); one already stored is kept."""
        ...

    async def round_input(self, round_event_id: uuid.UUID) -> bytes | None:
        """The planner input stored for that round, unchecked (None: none stored)."""
        ...

    async def close(self) -> None: ...
