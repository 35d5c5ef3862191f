"""The Postgres event store: append-only ``events`` table, per-stream optimistic concurrency, idempotent
appends by event id, gap-free reads by global position. ``PostgresEventStore`` (also named ``EventStore``
here) implements the services' view of it, the protocol ``services.model.event_store.EventStore``; every
SQL text of rollbook lives in services/infra (this module, audit_queries.py and their neighbours).

Public API (all coroutines unless noted)::

    store = await EventStore.connect(database_url: str, *, pool_size: int = 5,
                                     max_overflow: int | None = None) -> EventStore
    await store.close() -> None

    await store.append(events: Sequence[Envelope], expected_version: int | None) -> AppendResult
    await store.append_unversioned(events: Sequence[Envelope]) -> list[AppendResult]   (one per stream)
    await store.append_many(events: Sequence[Envelope]) -> int
    await store.import_events(events: Sequence[Envelope]) -> int   (COPY bulk load, not idempotent)
    await store.stream_version(stream: str) -> int
    await store.read_stream(stream: str, from_version: int = 1) -> list[StoredEvent]
    await store.read_batch(from_position: int = 0, limit: int = 1000) -> list[StoredEvent]
    await store.read_identities(from_position: int = 0, limit: int = 1000) -> list[EventIdentity]
    await store.read_batch_json(from_position: int = 0, limit: int = 1000) -> list[StoredEventJson]
    store.read_all(from_position: int = 0, batch_size: int = 2000) -> AsyncIterator[StoredEvent]
    store.read_all_batches(from_position: int = 0, batch_size: int = 2000) -> AsyncIterator[list[StoredEvent]]
    (the two read_all* are async generators: ``async for``, not ``await``)
    await store.head_position() -> int
    store.read_chain_batches(from_position: int = 0, batch_size: int = 5000, to_position: int = ...)
        -> AsyncIterator[list[ChainRow]]
    await store.write_checkpoint() -> tuple[int, bytes] | None
    await store.checkpoints() -> list[tuple[int, bytes]]
    await store.read_correlation(correlation_id: str) -> list[StoredEvent]
    await store.read_event(event_id: uuid.UUID) -> Envelope | None
    await store.stored_ids(ids: Sequence[uuid.UUID]) -> set[uuid.UUID]
    await store.query(sql: str, *args) -> list[asyncpg.Record]   (a read of your own, prepared per connection)
    store.engine -> AsyncEngine  (for SQL views and queries elsewhere; its JSONB columns decode as usual)

    StoredEvent(global_position: int, recorded_at: datetime, envelope: Envelope)        # msgspec Struct
    EventIdentity(global_position: int, event_id: UUID, stream: str, stream_version: int)  # NamedTuple
    StoredEventJson(global_position: int, envelope: EnvelopeJson)                       # NamedTuple
    EnvelopeJson: Envelope's fields, payload a msgspec.Raw of its JSON (encodes as that Envelope)
    AppendResult(stream, appended, skipped, stream_version, last_position, events)      # msgspec Struct
    ConcurrencyError(stream: str, expected: int, actual: int)   # .stream .expected .actual; a ValueError
                                                                # is raised instead for malformed batches

Semantics:

- ``append``: every envelope belongs to one stream and they carry consecutive ``stream_version`` values.
  With ``expected_version=n`` the versions must be n+1, n+2, ...; if the stream is not at n (another
  writer got there first) it raises ``ConcurrencyError(stream, expected, actual)`` and stores nothing.
  With ``expected_version=None`` there is no check: the store gives the new events the next versions
  after the stream's current one (the stored envelopes, returned in ``AppendResult.events``, carry them).
  Events whose ``event_id`` is already stored are skipped (a redelivery is a no-op, not an error); if
  every event is already stored, the append succeeds with ``appended == 0``. All or nothing: one
  transaction.
- ``append_many``: the fast, multi-stream, idempotent path (the auditor's ingest and the benchmark):
  events are stored with the stream versions they carry, ``ON CONFLICT (event_id) DO NOTHING``; a
  different event already holding a (stream, stream_version) raises ``ConcurrencyError``, storing
  nothing. Returns how many rows were new.
- After a lost connection (a restart, a failover), the next ``append`` / ``append_unversioned`` first
  checks that the store still holds the newest event this process appended, and raises
  ``StoreWentBack`` if not (``watch_appends`` checks the same every second).
- ``read_all`` / ``read_batch`` never skip an event: writers are serialised in the database (see the
  first migration), so every row a reader can see has all lower positions visible or gone for good.
  ``head_position()`` is that commit-safe watermark (the highest visible position, 0 if empty).

Payloads are JSONB; they are written as msgspec-encoded text and read back as ``payload::text`` and
decoded by msgspec into the tagged ``Event`` union (no stdlib json anywhere on the hot paths). The hot
paths use the asyncpg driver connection under SQLAlchemy's pool; small queries use SQLAlchemy Core.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

import asyncpg
import msgspec
from sqlalchemy import Select, func, select
from sqlalchemy import event as sa_event
from sqlalchemy.exc import DBAPIError, ProgrammingError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from services.infra.chain_read import CHAIN_COPY_END, CHAIN_COPY_PAGE, CHAIN_COPY_SQL, ChainCopyParser
from services.infra.database import sqlalchemy_url
from services.infra.db_roles import Duty, assume_sql
from services.infra.store_schema import events_table
from services.model.event_store import AppendResult, ConcurrencyError, StoredEvent
from services.model.events import Envelope
from services.model.hashchain import ChainRow
from services.model.upcasting import DEFAULT_DECODER, PayloadDecoder

__all__ = [
    "AppendResult",
    "ConcurrencyError",
    "EnvelopeJson",
    "EventIdentity",
    "EventStore",
    "PostgresEventStore",
    "StoredEvent",
    "StoredEventJson",
]


# What a check of the store meets while the database is down, restarting or failing over.
_DATABASE_TROUBLE = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    SQLAlchemyError,
)


class StoreWentBack(Exception):
    """The store lost events this process appended (a failover to a standby that never received them)."""


def _went_back(lost: tuple[int, uuid.UUID]) -> str:
    return (
        f"the store no longer holds event {lost[1]} at position {lost[0]}, appended by this process: the"
        " database failed over to a standby without it; stopping, so that the next process starts from the"
        " record as it is"
    )


class _RaceLost(Exception):
    """Internal: a concurrent writer stored one of our event ids between our check and our insert."""


class EventIdentity(NamedTuple):
    """Where one event is stored, without its body (read_identities)."""

    global_position: int
    event_id: uuid.UUID
    stream: str
    stream_version: int


class EnvelopeJson(msgspec.Struct, frozen=True, kw_only=True):
    """An ``Envelope`` whose payload is already JSON (its type's current schema): msgspec encodes it to an
    object that decodes as that Envelope, without decoding and encoding the payload on the way. The fields
    are Envelope's, in its order."""

    event_id: uuid.UUID
    stream: str
    stream_version: int
    type: str
    schema_version: int
    occurred_at: datetime
    payload: msgspec.Raw
    causation_id: uuid.UUID | None = None
    correlation_id: str | None = None


class StoredEventJson(NamedTuple):
    """A stored event as ``read_batch_json`` reads it."""

    global_position: int
    envelope: EnvelopeJson


def _stream_head(stream: str) -> str:
    """SQL for the current version of the stream named by the SQL expression ``stream``, 0 for none: its
    head, which the insert trigger keeps (0028) and an archive leaves, so versions keep rising after a
    stream's events left the table. One index lookup, however many partitions ``events`` has."""
    return f"coalesce((SELECT h.stream_version FROM stream_heads h WHERE h.stream = {stream}), 0)"


_COLUMNS = (
    "global_position, recorded_at, event_id, stream, stream_version, type, schema_version, "
    "occurred_at, causation_id, correlation_id, payload::text"
)

# Keyset pagination over the primary key: each page is one short statement, so nothing holds a snapshot
# or a connection while the caller works through the rows.
_READ_ALL_SQL = f"SELECT {_COLUMNS} FROM events WHERE global_position > $1 ORDER BY global_position LIMIT $2"
# The same pages without the bodies: what the auditor checks bus messages against.
_READ_IDENTITIES_SQL = (
    "SELECT global_position, event_id, stream, stream_version FROM events"
    " WHERE global_position > $1 ORDER BY global_position LIMIT $2"
)
# LIMIT NULL is no limit.
_READ_STREAM_SQL = (
    f"SELECT {_COLUMNS} FROM events WHERE stream = $1 AND stream_version >= $2 ORDER BY stream_version"
    " LIMIT $3"
)
# Several streams, each from its own version, in one statement: the planner's catch-up of a workload.
# Each stream is its own range scan of the (stream, stream_version) key: a LATERAL subquery, kept from
# being flattened into a join by its ORDER BY. The plain join of the unnest was planned as a hash join over
# a sequential scan of the whole table whenever the streams asked for were most of the log (one big
# CloneSet): 5 ms at 15,000 rows, growing with the log, every planning round; 0.16 ms this way.
# Rows ``read_streams`` decodes between turns of the event loop.
DECODE_SLICE = 500
_READ_STREAMS_SQL = (
    "SELECT e.* FROM unnest($1::text[], $2::int4[]) AS wanted(name, from_version) CROSS JOIN LATERAL"
    f" (SELECT {_COLUMNS} FROM events WHERE events.stream = wanted.name"
    " AND events.stream_version >= wanted.from_version ORDER BY events.stream_version) AS e"
    " ORDER BY e.stream, e.stream_version"
)
# One page of a stream's events of some types: the (stream, stream_version) key bounds the range, the type
# test drops the others in the database, so a reader of a few event types never ships the rest.
_READ_STREAM_TYPES_SQL = (
    f"SELECT {_COLUMNS} FROM events WHERE stream = $1 AND stream_version >= $2 AND type = ANY($3::text[]) "
    "ORDER BY stream_version LIMIT $4"
)
# The last events of some types of a stream, newest first (the watcher's look at a workload's latest
# StatusPlanned): the (stream, stream_version) key read backwards, the type tested on each row, until LIMIT
# rows are found: a Merge Append of each partition's backward scan, as Postgres plans it with statistics
# (8 StatusPlanned under 500 newer rows of a 3,500-row stream: 508 rows read, 0.25 ms). A stream with a
# handful of rows of the type is read through the (type, stream) index instead.
_READ_STREAM_LATEST_SQL = (
    f"SELECT {_COLUMNS} FROM events WHERE stream = $1 AND type = ANY($2::text[])"
    " ORDER BY stream_version DESC LIMIT $3"
)
_READ_CORRELATION_SQL = (
    f"SELECT {_COLUMNS} FROM events WHERE correlation_id = $1 AND global_position > $2"
    " ORDER BY global_position LIMIT $3"
)
_READ_EVENT_SQL = f"SELECT {_COLUMNS} FROM events WHERE event_id = $1"
# Stored means in event_keys (0028): archived events count, so their redelivery is skipped, not refused.
_STORED_IDS_SQL = "SELECT event_id FROM event_keys WHERE event_id = ANY($1::uuid[])"

_STORED_AS_CARRIED_SQL = """
SELECT e.stream = $2 AND e.stream_version = $3 AND e.type = $4
       AND e.causation_id IS NOT DISTINCT FROM $5 AND e.correlation_id IS NOT DISTINCT FROM $6
       AND e.payload = $7::text::jsonb
  FROM events e WHERE e.event_id = $1
"""
_QUARANTINE_SQL = """
INSERT INTO bus_quarantine (subject, stream_sequence, event_id, event_type, event_stream, reason, data)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (subject, stream_sequence) DO NOTHING
"""
_READ_LEAVES_SQL = """
SELECT global_position, stream_hash FROM events WHERE global_position > $1
ORDER BY global_position LIMIT $2
"""
_READ_LEAF_RANGE_SQL = """
SELECT global_position, stream_hash FROM events WHERE global_position BETWEEN $1 AND $2
ORDER BY global_position
"""
_CHECKPOINT_SQL = """
INSERT INTO event_checkpoints (global_position, chain_hash)
SELECT global_position, chain_hash FROM events ORDER BY global_position DESC LIMIT 1
ON CONFLICT (global_position) DO UPDATE SET chain_hash = excluded.chain_hash
RETURNING global_position, chain_hash
"""

_STATE_SQL = f"""
SELECT {_stream_head("$1")},
       (SELECT coalesce(array_agg(event_id), '{{}}') FROM event_keys WHERE event_id = ANY($2::uuid[]))
"""

# One statement per batch whatever its size: arrays travel in asyncpg's binary format. WITH ORDINALITY +
# ORDER BY keeps global positions in batch order (so stream versions rise with position). Event ids
# already stored are left out (the batch itself must not repeat one). The test reads the statement's
# snapshot, taken before the insert trigger's lock: an id committed meanwhile raises the unique violation
# of events_unique_keys (migrations/versions/0028_event_keys.py) and the caller tries again under the
# lock (ON CONFLICT cannot name a key that the partitioned table enforces by trigger).
_INSERT_SQL = """
INSERT INTO events (event_id, stream, stream_version, type, schema_version, occurred_at,
                    causation_id, correlation_id, payload)
SELECT e.event_id, e.stream, e.stream_version, e.type, e.schema_version, e.occurred_at,
       e.causation_id, e.correlation_id, e.payload::jsonb
FROM unnest($1::uuid[], $2::text[], $3::int4[], $4::text[], $5::int4[], $6::timestamptz[],
            $7::uuid[], $8::text[], $9::text[])
     WITH ORDINALITY AS e(event_id, stream, stream_version, type, schema_version, occurred_at,
                          causation_id, correlation_id, payload, ord)
WHERE NOT EXISTS (SELECT 1 FROM event_keys s WHERE s.event_id = e.event_id)
ORDER BY e.ord
RETURNING global_position
"""

# append()'s fast path: one autocommitted statement, all rows or none. No ON CONFLICT here: an event id
# already stored raises a unique violation (nothing is stored) and append() takes the careful path, which
# skips stored events. The version check reads the statement's snapshot, taken before the INSERT trigger's
# lock, so it may be stale; that is safe: versions only grow, and a version taken meanwhile breaks the
# unique (stream, stream_version) constraint, which sees every committed row.
_APPEND_FAST_SQL = f"""
WITH current AS (SELECT {_stream_head("$10")} AS version)
INSERT INTO events (event_id, stream, stream_version, type, schema_version, occurred_at,
                    causation_id, correlation_id, payload)
SELECT e.event_id, e.stream,
       CASE WHEN $11::int4 IS NULL THEN current.version + e.ord::int4 ELSE e.stream_version END,
       e.type, e.schema_version, e.occurred_at, e.causation_id, e.correlation_id, e.payload::jsonb
FROM current,
     unnest($1::uuid[], $2::text[], $3::int4[], $4::text[], $5::int4[], $6::timestamptz[],
            $7::uuid[], $8::text[], $9::text[])
     WITH ORDINALITY AS e(event_id, stream, stream_version, type, schema_version, occurred_at,
                          causation_id, correlation_id, payload, ord)
WHERE $11::int4 IS NULL OR current.version = $11::int4
ORDER BY e.ord
RETURNING global_position, stream_version
"""

_APPEND_LOCK_SQL = "SELECT events_append_lock()"

# append_unversioned(): events of many streams in one autocommitted statement (one lock, one commit).
# Each stream's new events take the versions after its current one, in batch order (row_number per
# stream over the batch ordinal). The fast form assumes no event id is stored yet (an id already stored
# raises a unique violation and nothing is stored); the careful form leaves stored ids out. Like the
# fast append, the current versions read the statement's snapshot: a version taken meanwhile breaks the
# unique (stream, stream_version) constraint and the append is retried.
_APPEND_UNVERSIONED_TEMPLATE = """
WITH batch AS (
    SELECT e.*, row_number() OVER (PARTITION BY e.stream ORDER BY e.ord)::int4 AS rank
    FROM unnest($1::uuid[], $2::text[], $3::int4[], $4::text[], $5::int4[], $6::timestamptz[],
                $7::uuid[], $8::text[], $9::text[])
         WITH ORDINALITY AS e(event_id, stream, unused, type, schema_version, occurred_at,
                              causation_id, correlation_id, payload, ord)
    {new_only}
),
current AS (
    SELECT s.stream, {stream_head} AS version
    FROM (SELECT DISTINCT stream FROM batch) AS s
)
INSERT INTO events (event_id, stream, stream_version, type, schema_version, occurred_at,
                    causation_id, correlation_id, payload)
SELECT b.event_id, b.stream, current.version + b.rank, b.type, b.schema_version, b.occurred_at,
       b.causation_id, b.correlation_id, b.payload::jsonb
FROM batch AS b JOIN current USING (stream)
ORDER BY b.ord
RETURNING global_position, event_id, stream_version
"""
_APPEND_UNVERSIONED_FAST_SQL = _APPEND_UNVERSIONED_TEMPLATE.format(
    new_only="", stream_head=_stream_head("s.stream")
)
_APPEND_UNVERSIONED_SQL = _APPEND_UNVERSIONED_TEMPLATE.format(
    new_only="WHERE NOT EXISTS (SELECT 1 FROM event_keys s WHERE s.event_id = e.event_id)",
    stream_head=_stream_head("s.stream"),
)
_STREAM_VERSIONS_SQL = f"SELECT s, {_stream_head('s')} FROM unnest($1::text[]) AS s"

# Event loop turns given to a prefetch so it checks out a connection and sends its query.
_PREFETCH_SPINS = 4
# The columns of ``import_events``' COPY, in its order (bench/trail.py seeds with the same).
IMPORT_COLUMNS = [
    "event_id",
    "stream",
    "stream_version",
    "type",
    "schema_version",
    "occurred_at",
    "causation_id",
    "correlation_id",
    "payload",
]
_VERSION_CONSTRAINT = "events_stream_version_key"
_STREAM_VERSION_SQL = f"SELECT {_stream_head('$1')}"
_READ_STREAM_UNTIL_SQL = (
    f"SELECT {_COLUMNS} FROM events WHERE stream = $1 AND global_position <= $2 ORDER BY stream_version"
)
# OFFSET 0 keeps the rollout's rows a subquery read by the correlation id's index: written plainly, min and
# max were planned as walks of the primary key from each end, filtering on the correlation id (20 s on a
# 1-million-event log, against 1.5 ms).
_CORRELATION_SPAN_SQL = (
    "SELECT min(p), max(p) FROM (SELECT global_position AS p FROM events WHERE correlation_id = $1"
    " OFFSET 0) AS rollout"
)
_STORE_ROUND_INPUT_SQL = (
    "INSERT INTO round_inputs (round_event_id, input) VALUES ($1, $2) ON CONFLICT (round_event_id) DO NOTHING"
)
_ROUND_INPUT_SQL = "SELECT input FROM round_inputs WHERE round_event_id = $1"
_AUDIT_CURSOR_SQL = "SELECT stream_created, audited_through FROM audit_cursor WHERE bus_stream = $1"
_SAVE_AUDIT_CURSOR_SQL = """
INSERT INTO audit_cursor (bus_stream, stream_created, audited_through) VALUES ($1, $2, $3)
ON CONFLICT (bus_stream) DO UPDATE
SET stream_created = excluded.stream_created, audited_through = excluded.audited_through, updated_at = now()
"""

# The executor's per-action reads (before_acting, later_status_planned, status_stored_as_carried), prepared
# once per pooled connection.
# Whether the outcome ($1) is stored, and the actions of the same round (the event $3 that caused this
# request, in stream $2) for the same pod ($5) planned before this request (version $4), in order. No
# round ($3 NULL, an older request) means no earlier actions.
BEFORE_ACTING_SQL = """
SELECT EXISTS (SELECT 1 FROM events WHERE event_id = $1),
       (SELECT e.stream = $2 AND e.stream_version = $4 AND e.type = 'PodActionRequested'
               AND e.causation_id IS NOT DISTINCT FROM $3 AND e.correlation_id IS NOT DISTINCT FROM $7
               AND e.payload = $8::text::jsonb
          FROM events e WHERE e.event_id = $6),
       ARRAY(
           SELECT payload->>'action_id' FROM events
           WHERE stream = $2
             AND stream_version > (SELECT stream_version FROM events WHERE event_id = $3)
             AND stream_version < $4
             AND type = 'PodActionRequested'
             AND payload->>'pod' = $5
           ORDER BY stream_version
       )
"""
# BEFORE_ACTING_SQL for many requests in one statement (the executor's messages fetched together): one
# row per request, in the order of the arrays (outcome ids, streams, rounds, versions, pods, event ids or
# NULL, rollouts, carried payloads or NULL).
BEFORE_ACTING_MANY_SQL = """
SELECT EXISTS (SELECT 1 FROM events WHERE event_id = r.outcome),
       (SELECT e.stream = r.stream AND e.stream_version = r.version AND e.type = 'PodActionRequested'
               AND e.causation_id IS NOT DISTINCT FROM r.round
               AND e.correlation_id IS NOT DISTINCT FROM r.rollout
               AND e.payload = r.carried::jsonb
          FROM events e WHERE e.event_id = r.event_id),
       ARRAY(
           SELECT payload->>'action_id' FROM events
           WHERE stream = r.stream
             AND stream_version > (SELECT stream_version FROM events WHERE event_id = r.round)
             AND stream_version < r.version
             AND type = 'PodActionRequested'
             AND payload->>'pod' = r.pod
           ORDER BY stream_version
       )
FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::integer[], $5::text[], $6::uuid[], $7::text[], $8::text[])
     WITH ORDINALITY AS r(outcome, stream, round, version, pod, event_id, rollout, carried, n)
ORDER BY r.n
"""
# The request of action $4 in the round ($2: the round's event id) of a request at version $3 of stream $1.
_ACTION_REQUEST_SQL = """
SELECT event_id FROM events
WHERE stream = $1
  AND stream_version >= (SELECT stream_version FROM events WHERE event_id = $2)
  AND stream_version <= $3
  AND type = 'PodActionRequested'
  AND payload->>'action_id' = $4
LIMIT 1
"""
# A StatusPlanned of the stream ($1) later than version $2.
_LATER_STATUS_SQL = (
    "SELECT 1 FROM events WHERE stream = $1 AND stream_version > $2 AND type = 'StatusPlanned' LIMIT 1"
)
# Whether the StatusPlanned $1 is stored as the message carries it (NULL: not stored).
_STORED_STATUS_SQL = """
SELECT e.stream = $2 AND e.stream_version = $3 AND e.type = 'StatusPlanned'
       AND e.causation_id IS NOT DISTINCT FROM $4 AND e.correlation_id IS NOT DISTINCT FROM $5
       AND e.payload = $6::text::jsonb
  FROM events e WHERE e.event_id = $1
"""
_CHECKOUT_ATTEMPTS = 3
_CONNECTION_ATTEMPTS = 2
# Errors that may mean "this connection is gone" rather than "this statement failed"; _connection_lost
# decides.
_CONNECTION_LOST: tuple[type[BaseException], ...] = (
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.AdminShutdownError,
    asyncpg.CannotConnectNowError,
    asyncpg.InterfaceError,
    # A server's FATAL (a terminated backend, a fast shutdown) that reached an idle connection leaves its
    # protocol in a state the next statement cannot start from ("cannot switch to state ..."): a lost one.
    asyncpg.InternalClientError,
    ConnectionError,
    DBAPIError,
)


def _connection_lost(error: BaseException) -> bool:
    if isinstance(error, DBAPIError):
        return bool(error.connection_invalidated)
    if isinstance(error, asyncpg.InterfaceError):
        return "closed" in str(error)  # "connection is closed": nothing was sent
    return True


_T = TypeVar("_T")

_payload_encoder = msgspec.json.Encoder()

# How often an unchecked append (expected_version=None) retries after losing a race for a version.
_UNCHECKED_RETRIES = 20


def _row_to_stored(row: asyncpg.Record, decoder: PayloadDecoder = DEFAULT_DECODER) -> StoredEvent:
    """Rows are read through the upcasting decoder: an event stored with an older schema_version is
    upcast to the current shape (services/model/upcasting.py)."""
    return StoredEvent(
        row[0],
        row[1],
        Envelope(
            event_id=row[2],
            stream=row[3],
            stream_version=row[4],
            type=row[5],
            schema_version=row[6],
            occurred_at=row[7],
            causation_id=row[8],
            correlation_id=row[9],
            payload=decoder.decode(row[5], row[6], row[10]),
        ),
    )


def _columns(events: Sequence[Envelope]) -> tuple[list[Any], ...]:
    """Column arrays for _INSERT_SQL, in its parameter order."""
    return (
        [e.event_id for e in events],
        [e.stream for e in events],
        [e.stream_version for e in events],
        [e.type for e in events],
        [e.schema_version for e in events],
        [e.occurred_at for e in events],
        [e.causation_id for e in events],
        [e.correlation_id for e in events],
        [_payload_encoder.encode(e.payload).decode() for e in events],
    )


def _rows_to_stored(rows: Sequence[asyncpg.Record], decoder: PayloadDecoder) -> list[StoredEvent]:
    """``_row_to_stored`` for a page, with the current-version check inlined: replay spends most of its
    time here, and the per-row function calls were a tenth of it."""
    versions = decoder.versions
    current = decoder.decode_current
    upcast = decoder.decode
    return [
        StoredEvent(
            row[0],
            row[1],
            Envelope(
                event_id=row[2],
                stream=row[3],
                stream_version=row[4],
                type=row[5],
                schema_version=row[6],
                occurred_at=row[7],
                causation_id=row[8],
                correlation_id=row[9],
                payload=(
                    current(row[10]) if versions.get(row[5], 1) == row[6] else upcast(row[5], row[6], row[10])
                ),
            ),
        )
        for row in rows
    ]


def _check_consecutive(events: Sequence[Envelope], expected_version: int | None) -> str:
    if not events:
        raise ValueError("append needs at least one event")
    if expected_version is not None and expected_version < 0:
        raise ValueError(f"expected_version must be 0 (empty stream) or more, got {expected_version}")
    stream = events[0].stream
    ids: set[uuid.UUID] = set()
    for index, event in enumerate(events):
        if event.stream != stream:
            raise ValueError(
                f"append takes events of one stream: {event.stream!r} differs from {stream!r}"
                " (use append_many for several streams)"
            )
        if event.event_id in ids:
            raise ValueError(f"event_id {event.event_id} appears twice in one append")
        ids.add(event.event_id)
        if expected_version is not None and event.stream_version != expected_version + index + 1:
            raise ValueError(
                f"stream {stream!r}: event {index} carries stream_version {event.stream_version}, "
                f"expected {expected_version + index + 1} (versions must follow expected_version "
                f"{expected_version} consecutively)"
            )
    return stream


def _unversioned_results(
    events: Sequence[Envelope],
    new: dict[uuid.UUID, tuple[int, int]],
    versions: dict[str, int],
) -> list[AppendResult]:
    """Per-stream results of append_unversioned from the stored rows (event id -> position, version)."""
    by_stream: dict[str, list[Envelope]] = {}
    stored: dict[str, list[Envelope]] = {}
    for event in events:
        by_stream.setdefault(event.stream, []).append(event)
        if event.event_id in new:
            version = new[event.event_id][1]
            stored.setdefault(event.stream, []).append(msgspec.structs.replace(event, stream_version=version))
    results = []
    for stream, given in by_stream.items():
        written = stored.get(stream, [])
        results.append(
            AppendResult(
                stream=stream,
                appended=len(written),
                skipped=len(given) - len(written),
                stream_version=written[-1].stream_version if written else versions.get(stream, 0),
                last_position=new[written[-1].event_id][0] if written else None,
                events=written,
            )
        )
    return results


class PostgresEventStore:
    """See the module docstring; it implements ``services.model.event_store.EventStore``. Create with
    ``await EventStore.connect(url)``; close with ``close()``."""

    def __init__(self, engine: AsyncEngine, decoder: PayloadDecoder = DEFAULT_DECODER) -> None:
        self.engine = engine
        # (position, event id) of the newest event this process appended: watch_appends.
        self.last_appended: tuple[int, uuid.UUID] | None = None
        # A connection was lost (or found closed) since this process last made sure the store still holds
        # its appends: the server may be another one now (a failover), so the next append checks first.
        self.reconnected = False
        self.decoder = decoder  # how stored payloads are read (upcasting older schema versions)
        self.duty: Duty = "writer"  # the database role its connections act as (``connect``)

    @classmethod
    async def connect(
        cls,
        database_url: str,
        *,
        pool_size: int = 5,
        max_overflow: int | None = None,
        decoder: PayloadDecoder = DEFAULT_DECODER,
        duty: Duty = "writer",
    ) -> PostgresEventStore:
        """``pool_size`` connections are kept open; up to ``max_overflow`` more (default: as many again)
        are opened when that many queries run at once, and closed as soon as they are returned. Each
        connection acts as the database role of ``duty`` (services/infra/db_roles.py) when its login may."""
        engine = create_async_engine(
            sqlalchemy_url(database_url),
            pool_size=pool_size,
            max_overflow=pool_size if max_overflow is None else max_overflow,
        )
        assume = assume_sql(duty)

        @sa_event.listens_for(engine.sync_engine, "connect")
        def act_as_duty(dbapi_connection: Any, _record: object) -> None:
            dbapi_connection.run_async(lambda driver: driver.execute(assume))

        store = cls(engine, decoder)
        store.duty = duty
        try:
            await store.head_position()  # fail fast on a bad URL or an unmigrated database
        except ProgrammingError as error:
            await engine.dispose()
            if "events" in str(error) and "does not exist" in str(error):
                raise RuntimeError(
                    "the database has no events table: run the migrations first"
                    " (alembic -x url=... upgrade head, or services.infra.database.upgrade(url))"
                ) from error
            raise
        except BaseException:
            await engine.dispose()
            raise
        return store

    async def close(self) -> None:
        await self.engine.dispose()

    @property
    def database_url(self) -> str:
        """The URL ``connect`` was given (password included): another process opens the same store with
        it and ``duty`` (`audit verify`'s range workers)."""
        return self.engine.url.render_as_string(hide_password=False)

    @asynccontextmanager
    async def _driver(self, *, appending: bool = False) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection's asyncpg driver connection (no SQLAlchemy transaction open on it).
        ``appending``: for an append, which a connection lost since this process last looked (a failover,
        perhaps) makes check first that the store still holds this process's appends (``StoreWentBack``
        otherwise): appending on a new primary without them would take the versions of its own lost
        events, which the relay could otherwise put back from the bus (docs/reliability.md).

        No pool pre-ping: SQLAlchemy's costs three round trips (BEGIN, ping, ROLLBACK), more than a whole
        append. Instead a connection asyncpg already knows to be closed (the server went away while it
        sat in the pool) is dropped at checkout, and one that breaks in use is invalidated, not reused.
        """
        for _ in range(_CHECKOUT_ATTEMPTS):
            connection = await self.engine.connect()
            raw = await connection.get_raw_connection()
            driver: asyncpg.Connection = raw.driver_connection  # type: ignore[assignment]
            if not driver.is_closed():
                break
            self.reconnected = True
            await connection.invalidate()
            await connection.close()
        try:
            if appending and self.reconnected:
                await self._check_appends(driver)
            yield driver
        except _CONNECTION_LOST as error:
            if not _connection_lost(error):
                raise
            self.reconnected = True
            with contextlib.suppress(SQLAlchemyError):  # already closed is fine: it is not reused either way
                await connection.invalidate()
            raise
        finally:
            await connection.close()

    async def _retrying(self, work: Callable[[], Awaitable[_T]]) -> _T:
        """Run ``work`` again on a fresh connection if the connection was lost under it (Postgres restart,
        failover, killed backend). Safe because every operation here is idempotent: a lost commit that
        did happen makes the retried append find its event ids stored and skip them."""
        for attempt in range(_CONNECTION_ATTEMPTS):
            try:
                return await work()
            except _CONNECTION_LOST as error:
                if not _connection_lost(error) or attempt == _CONNECTION_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    # --- writing ------------------------------------------------------------------------------------

    async def append(self, events: Sequence[Envelope], expected_version: int | None) -> AppendResult:
        stream = _check_consecutive(events, expected_version)
        result = await self._retrying(lambda: self._append(stream, events, expected_version))
        self._appended([result])
        return result

    def _appended(self, results: Sequence[AppendResult]) -> None:
        """Remember the newest event this process appended, for ``watch_appends``."""
        for result in results:
            if result.last_position is not None and result.events:
                if self.last_appended is None or result.last_position > self.last_appended[0]:
                    self.last_appended = (result.last_position, result.events[-1].event_id)

    async def lost_appends(self) -> tuple[int, uuid.UUID] | None:
        """The newest event this process appended, as (position, event id), if the store no longer holds
        it there: the database failed over to a standby that never received it (asynchronous
        replication), and what this process built on its appends is ahead of the record."""
        appended = self.last_appended
        if appended is None:
            return None
        rows = await self.read_identities(appended[0] - 1, 1)
        if rows and (rows[0].global_position, rows[0].event_id) == appended:
            return None
        return appended

    async def _check_appends(self, driver: asyncpg.Connection) -> None:
        appended = self.last_appended
        if appended is not None:
            row = await driver.fetchrow(_READ_IDENTITIES_SQL, appended[0] - 1, 1)
            if row is None or (row[0], row[1]) != appended:
                raise StoreWentBack(_went_back(appended))
        self.reconnected = False

    async def watch_appends(self, stopping: asyncio.Event, interval: float = 1.0) -> None:
        """Every ``interval`` seconds until ``stopping``, check ``lost_appends``; raise ``StoreWentBack``
        when the store lost what this process appended, so that the process stops (a dead part stops the
        whole process) and its successor rebuilds from the record as it is now. An unreachable store is
        an outage: looked at again at the next turn."""
        while not stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), interval)
            if stopping.is_set():
                return
            try:
                lost = await self.lost_appends()
            except _DATABASE_TROUBLE:  # down, restarting, failing over: looked at again at the next turn
                continue
            if lost is not None:
                raise StoreWentBack(_went_back(lost))

    async def _append(
        self, stream: str, events: Sequence[Envelope], expected_version: int | None
    ) -> AppendResult:
        ids = [e.event_id for e in events]
        attempts = _UNCHECKED_RETRIES if expected_version is None else 3
        for attempt in range(attempts):
            async with self._driver(appending=True) as conn:
                try:
                    if attempt == 0:
                        result = await self._append_fast(conn, stream, events, expected_version)
                        if result is not None:
                            return result
                    async with conn.transaction():
                        # Under the writers' lock from the start: every read below sees every commit.
                        await conn.execute(_APPEND_LOCK_SQL)
                        return await self._append_once(conn, stream, events, ids, expected_version)
                except asyncpg.UniqueViolationError as error:
                    # Lost a race: another writer took one of our versions, or one of our event ids is
                    # already stored. The statement stored nothing. A version taken by other events is a
                    # conflict; anything else is settled by the careful path on the next attempt.
                    if expected_version is not None and error.constraint_name == _VERSION_CONSTRAINT:
                        if await self._stored_ids(conn, ids) != set(ids):
                            # On this connection: a second one from a pool without overflow (the
                            # executor's) could wait on writers that each hold one and wait too.
                            actual = await conn.fetchval(_STREAM_VERSION_SQL, stream)
                            raise ConcurrencyError(stream, expected_version, actual) from error
                except _RaceLost:
                    pass
        raise ConcurrencyError(
            stream,
            -1 if expected_version is None else expected_version,
            await self.stream_version(stream),
            "gave up after repeated races with other writers",
        )

    async def _append_fast(
        self, conn: asyncpg.Connection, stream: str, events: Sequence[Envelope], expected_version: int | None
    ) -> AppendResult | None:
        """The common case in one autocommitted statement: the stream is where the writer expects and none
        of the events is stored yet. Returns None (having stored nothing) when that is not so."""
        rows = await conn.fetch(_APPEND_FAST_SQL, *_columns(events), stream, expected_version)
        if not rows:
            return None
        new = list(events)
        if expected_version is None:
            new = [msgspec.structs.replace(e, stream_version=r[1]) for e, r in zip(new, rows, strict=True)]
        return AppendResult(
            stream=stream,
            appended=len(rows),
            skipped=0,
            stream_version=rows[-1][1],
            last_position=rows[-1][0],
            events=new,
        )

    async def _append_once(
        self,
        conn: asyncpg.Connection,
        stream: str,
        events: Sequence[Envelope],
        ids: list[uuid.UUID],
        expected_version: int | None,
    ) -> AppendResult:
        current, stored_ids = await conn.fetchrow(_STATE_SQL, stream, ids)
        stored = set(stored_ids)
        new = [e for e in events if e.event_id not in stored]
        if not new:
            return AppendResult(
                stream=stream,
                appended=0,
                skipped=len(events),
                stream_version=current,
                last_position=None,
                events=[],
            )
        if expected_version is None:
            new = [msgspec.structs.replace(e, stream_version=current + i + 1) for i, e in enumerate(new)]
        else:
            # Already-stored events must be the ones right before the new ones (a redelivered prefix);
            # the first new event then sits exactly one above the stream's current version.
            wanted = new[0].stream_version - 1
            if current != wanted:
                raise ConcurrencyError(stream, wanted, current)
            for before, after in zip(new, new[1:], strict=False):
                if after.stream_version != before.stream_version + 1:
                    raise ConcurrencyError(
                        stream,
                        expected_version,
                        current,
                        f"event {after.event_id} is new but an earlier event of the batch is already stored",
                    )
        positions = await conn.fetch(_INSERT_SQL, *_columns(new))
        if len(positions) != len(new):
            # Some event id was stored by a concurrent writer between our check and insert: redo it all.
            raise _RaceLost()
        return AppendResult(
            stream=stream,
            appended=len(new),
            skipped=len(events) - len(new),
            stream_version=new[-1].stream_version,
            last_position=positions[-1][0],
            events=list(new),
        )

    async def append_unversioned(self, events: Sequence[Envelope]) -> list[AppendResult]:
        """Store events of any number of streams, each stream's at the versions after its current one
        (their own ``stream_version`` is ignored), in one statement: one lock, one commit, however many
        streams. Each stream's events keep their order in ``events`` (versions and global positions rise
        with it); an event whose id is stored already (or appears earlier in ``events``) is skipped.
        Returns one result per stream, in order of first appearance."""
        if not events:
            raise ValueError("append_unversioned needs at least one event")
        unique: dict[uuid.UUID, Envelope] = {}
        for event in events:
            if not event.stream:
                raise ValueError(f"event {event.event_id}: needs a stream name")
            unique.setdefault(event.event_id, event)
        batch = list(unique.values())
        results = await self._retrying(lambda: self._append_unversioned(batch))
        self._appended(results)
        return results

    async def _append_unversioned(self, events: list[Envelope]) -> list[AppendResult]:
        for attempt in range(_UNCHECKED_RETRIES):
            async with self._driver(appending=True) as conn:
                try:
                    if attempt == 0:
                        # First try: one autocommitted statement assuming nothing is stored yet (the
                        # common case, no id look-ups).
                        rows = await conn.fetch(_APPEND_UNVERSIONED_FAST_SQL, *_columns(events))
                    else:
                        # The statement's snapshot is taken before its trigger takes the writers' lock, so
                        # a commit to any of the batch's streams while it waited for the lock made it take
                        # a version already used. Here the lock is held before the statement starts: its
                        # snapshot sees every committed version, and only the careful form's id check is
                        # left to settle.
                        async with conn.transaction():
                            await conn.execute(_APPEND_LOCK_SQL)
                            rows = await conn.fetch(_APPEND_UNVERSIONED_SQL, *_columns(events))
                except asyncpg.UniqueViolationError:
                    # An id stored already, or a version another writer took meanwhile: nothing was
                    # stored; the careful form under the lock settles both.
                    continue
                new = {row[1]: (row[0], row[2]) for row in rows}
                missing = {e.stream for e in events if e.event_id not in new}
                versions: dict[str, int] = {}
                if missing:
                    versions = dict(await conn.fetch(_STREAM_VERSIONS_SQL, sorted(missing)))
                return _unversioned_results(events, new, versions)
        raise ConcurrencyError(
            events[0].stream, -1, await self.stream_version(events[0].stream), "gave up after repeated races"
        )

    async def _stored_ids(self, conn: asyncpg.Connection, ids: list[uuid.UUID]) -> set[uuid.UUID]:
        rows = await conn.fetch(_STORED_IDS_SQL, ids)
        return {row[0] for row in rows}

    async def append_many(self, events: Sequence[Envelope]) -> int:
        if not events:
            return 0
        for event in events:
            if not event.stream or event.stream_version < 1:
                raise ValueError(
                    f"event {event.event_id}: needs a stream name and a stream_version >= 1,"
                    f" got {event.stream!r} version {event.stream_version}"
                )
        return await self._retrying(lambda: self._append_many(events))

    async def _append_many(self, events: Sequence[Envelope]) -> int:
        # The insert leaves out stored ids, not an id repeated within the batch: its first one is kept.
        seen: set[uuid.UUID] = set()
        unique: list[Envelope] = []
        for event in events:
            if event.event_id not in seen:
                seen.add(event.event_id)
                unique.append(event)
        async with self._driver() as conn:
            try:
                # One autocommitted statement is all or nothing already: no BEGIN/COMMIT round trips.
                rows = await conn.fetch(_INSERT_SQL, *_columns(unique))
            except asyncpg.UniqueViolationError as error:
                if error.constraint_name == _VERSION_CONSTRAINT:
                    raise await self._slot_conflict(conn, unique) from error
                # An id committed while the statement waited for the lock: again under it, skipping it.
                try:
                    async with conn.transaction():
                        await conn.execute(_APPEND_LOCK_SQL)
                        rows = await conn.fetch(_INSERT_SQL, *_columns(unique))
                except asyncpg.UniqueViolationError as again:
                    raise await self._slot_conflict(conn, unique) from again
        return len(rows)

    async def _slot_conflict(self, conn: asyncpg.Connection, events: Sequence[Envelope]) -> ConcurrencyError:
        """Name the first event whose (stream, stream_version) another event already holds."""
        rows = await conn.fetch(
            """
            SELECT s.stream, s.stream_version, e.event_id
            FROM unnest($1::text[], $2::int4[], $3::uuid[]) AS s(stream, stream_version, event_id)
            JOIN events e USING (stream, stream_version)
            WHERE e.event_id <> s.event_id
            LIMIT 1
            """,
            [e.stream for e in events],
            [e.stream_version for e in events],
            [e.event_id for e in events],
        )
        if not rows:
            return ConcurrencyError(events[0].stream, -1, -1, "a concurrent writer took a stream version")
        stream, version, holder = rows[0]
        actual = await conn.fetchval(_STREAM_VERSION_SQL, stream)
        return ConcurrencyError(
            stream, version - 1, actual, f"version {version} is already held by event {holder}"
        )

    async def import_events(self, events: Sequence[Envelope]) -> int:
        """Bulk load with COPY (restores, migrations between databases, benchmarks): one transaction,
        events stored exactly as given, no idempotency (a stored event_id or (stream, version) fails the
        whole call with the unique violation). The insert triggers still run: writers are serialised and
        every row is hash-chained. Returns the rows stored."""
        if not events:
            return 0
        records = list(zip(*_columns(events), strict=True))

        async def load() -> int:
            async with self._driver() as conn, conn.transaction():
                await conn.copy_records_to_table("events", records=records, columns=IMPORT_COLUMNS)
            return len(records)

        return await self._retrying(load)

    # --- reading ------------------------------------------------------------------------------------

    async def stream_version(self, stream: str) -> int:
        rows = await self._fetch(_STREAM_VERSION_SQL, stream)
        return int(rows[0][0])

    async def head_position(self) -> int:
        """The commit-safe watermark: every event at or below it is readable now."""
        statement = select(func.coalesce(func.max(events_table.c.global_position), 0))
        return await self._retrying(lambda: self._scalar(statement))

    async def _scalar(self, statement: Select[Any]) -> int:
        async with self.engine.connect() as connection:
            return int((await connection.execute(statement)).scalar_one())

    async def _fetch(self, sql: str, *args: object) -> list[asyncpg.Record]:
        async def fetch() -> list[asyncpg.Record]:
            async with self._driver() as conn:
                return await conn.fetch(sql, *args)

        return await self._retrying(fetch)

    async def read_stream(
        self, stream: str, from_version: int = 1, limit: int | None = None
    ) -> list[StoredEvent]:
        """The events of ``stream`` from ``from_version`` on, in stream order: all of them, or the first
        ``limit`` (a page; the next starts at the last version read + 1)."""
        rows = await self._fetch(_READ_STREAM_SQL, stream, from_version, limit)
        return _rows_to_stored(rows, self.decoder)

    async def read_streams(self, positions: Sequence[tuple[str, int]]) -> list[list[StoredEvent]]:
        """``read_stream`` of each (stream, from_version) in one statement: a list per stream, in the
        order given, each in stream order."""
        rows = await self._fetch(
            _READ_STREAMS_SQL, [stream for stream, _ in positions], [version for _, version in positions]
        )
        by_stream: dict[str, list[StoredEvent]] = {stream: [] for stream, _ in positions}
        for start in range(0, len(rows), DECODE_SLICE):
            if start:
                # A planner's rebuild reads a workload's whole history (some 15 events per pod): decoding
                # it in one go would hold the event loop, and the Lease renewals, for a second or more.
                await asyncio.sleep(0)
            for stored in _rows_to_stored(rows[start : start + DECODE_SLICE], self.decoder):
                by_stream[stored.envelope.stream].append(stored)
        return [by_stream[stream] for stream, _ in positions]

    async def read_stream_page(
        self, stream: str, from_version: int, types: Sequence[str], limit: int
    ) -> list[StoredEvent]:
        """Up to ``limit`` events of ``stream`` with stream_version >= ``from_version`` whose type is one of
        ``types``, in stream order (one page: call again from the last version read + 1 until a page comes
        back shorter than ``limit``)."""
        rows = await self._fetch(_READ_STREAM_TYPES_SQL, stream, from_version, list(types), limit)
        return _rows_to_stored(rows, self.decoder)

    async def read_stream_latest(self, stream: str, types: Sequence[str], limit: int) -> list[StoredEvent]:
        """The last ``limit`` events of ``stream`` whose type is one of ``types``, newest first (one short
        backward read of the stream's key, however long the stream)."""
        rows = await self._fetch(_READ_STREAM_LATEST_SQL, stream, list(types), limit)
        return _rows_to_stored(rows, self.decoder)

    async def read_correlation(
        self, correlation_id: str, after: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        """Every event of one rollout (correlation id) after global position ``after``, in global order:
        all of them, or the first ``limit`` (a page)."""
        rows = await self._fetch(_READ_CORRELATION_SQL, correlation_id, after, limit)
        return _rows_to_stored(rows, self.decoder)

    async def read_event(self, event_id: uuid.UUID) -> Envelope | None:
        """The stored event with this id (None if there is none): how a consumer reads the body of an
        event the bus carried by reference (docs/bus.md, "Events larger than a bus message")."""
        rows = await self._fetch(_READ_EVENT_SQL, event_id)
        return _rows_to_stored(rows, self.decoder)[0].envelope if rows else None

    async def read_stream_until(self, stream: str, until_position: int) -> list[StoredEvent]:
        """The events of ``stream`` at global positions up to ``until_position``, in stream order."""
        rows = await self._fetch(_READ_STREAM_UNTIL_SQL, stream, until_position)
        return _rows_to_stored(rows, self.decoder)

    async def correlation_span(self, correlation_id: str) -> tuple[int, int] | None:
        """The global positions of the first and last event stored with this correlation id (a rollout's
        span), None when there is none."""
        rows = await self._fetch(_CORRELATION_SPAN_SQL, correlation_id)
        first, last = rows[0]
        return None if first is None else (int(first), int(last))

    async def store_round_input(self, round_event_id: uuid.UUID, input_json: bytes) -> None:
        """Keep the canonical planner input of the round whose ``RoundPlanned`` is ``round_event_id`` (a
        round that started a rollout). A row already there is kept: a reader checks it against the round's
        ``input_sha256`` and ignores it when it does not match."""

        async def store() -> None:
            async with self._driver() as conn:
                await conn.execute(_STORE_ROUND_INPUT_SQL, round_event_id, input_json)

        await self._retrying(store)

    async def round_input(self, round_event_id: uuid.UUID) -> bytes | None:
        """The planner input stored for that round (None: none), unchecked."""
        rows = await self._fetch(_ROUND_INPUT_SQL, round_event_id)
        return bytes(rows[0][0]) if rows else None

    async def audit_cursor(self, bus_stream: str) -> tuple[datetime, int] | None:
        """How far the audit of the JetStream stream ``bus_stream`` got: (when that stream was created,
        the stream sequence every message up to which is audited); None before its first save."""
        rows = await self._fetch(_AUDIT_CURSOR_SQL, bus_stream)
        return (rows[0][0], int(rows[0][1])) if rows else None

    async def save_audit_cursor(
        self, bus_stream: str, stream_created: datetime, audited_through: int
    ) -> None:
        """Keep how far the audit of ``bus_stream`` got (``audit_cursor``, migration 0035)."""

        async def save() -> None:
            async with self._driver() as conn:
                await conn.execute(_SAVE_AUDIT_CURSOR_SQL, bus_stream, stream_created, audited_through)

        await self._retrying(save)

    async def stored_ids(self, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of ``ids`` are stored (e.g. whether deterministic outcome events exist yet)."""
        if not ids:
            return set()
        rows = await self._fetch(_STORED_IDS_SQL, list(ids))
        return {row[0] for row in rows}

    async def positions_of(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, int]:
        """Where each of ``ids`` that is stored is stored (its global position)."""
        if not ids:
            return {}
        rows = await self._fetch(
            "SELECT event_id, global_position FROM events WHERE event_id = ANY($1::uuid[])", list(ids)
        )
        return {row[0]: int(row[1]) for row in rows}

    async def stream_versions(self, streams: Sequence[str]) -> dict[str, int]:
        """Each stream's newest version (0: no event)."""
        rows = await self._fetch(_STREAM_VERSIONS_SQL, list(streams))
        return {row[0]: int(row[1]) for row in rows}

    async def events_at(self, slots: Sequence[tuple[str, int]]) -> dict[tuple[str, int], uuid.UUID]:
        """The event id stored at each (stream, version) of ``slots`` that holds one."""
        rows = await self._fetch(
            "SELECT e.stream, e.stream_version, e.event_id"
            " FROM unnest($1::text[], $2::int4[]) AS s(stream, v)"
            " JOIN events e ON e.stream = s.stream AND e.stream_version = s.v",
            [stream for stream, _ in slots],
            [version for _, version in slots],
        )
        return {(row[0], int(row[1])): row[2] for row in rows}

    async def payloads_of_type(self, event_type: str) -> list[tuple[uuid.UUID, str]]:
        """(event id, payload JSON) of every event of ``event_type``, in log order."""
        rows = await self._fetch(
            "SELECT event_id, payload::text FROM events WHERE type = $1 ORDER BY global_position", event_type
        )
        return [(row[0], row[1]) for row in rows]

    async def stored_as_carried(self, envelope: Envelope, payload: str) -> bool | None:
        """Whether ``envelope`` is stored exactly as a bus message carried it (``payload``: its JSON text),
        same id, stream, version, type, cause, rollout and payload (as JSON values); None when no event
        with its id is stored. The store is the authority: a message is only what it says when this holds."""
        rows = await self._fetch(
            _STORED_AS_CARRIED_SQL,
            envelope.event_id,
            envelope.stream,
            envelope.stream_version,
            envelope.type,
            envelope.causation_id,
            envelope.correlation_id,
            payload,
        )
        return rows[0][0] if rows else None

    async def quarantine(
        self, *, subject: str, stream_sequence: int, envelope: Envelope | None, reason: str, data: bytes
    ) -> None:
        """Keep a bus message that is not a stored event in ``bus_quarantine`` (once per message), never in
        ``events``."""
        await self._fetch(
            _QUARANTINE_SQL,
            subject,
            stream_sequence,
            envelope.event_id if envelope else None,
            envelope.type if envelope else None,
            envelope.stream if envelope else None,
            reason,
            data,
        )

    async def quarantined(self) -> int:
        """How many bus messages the audit quarantined."""
        rows = await self._fetch("SELECT count(*) FROM bus_quarantine")
        return int(rows[0][0])

    async def query(self, sql: str, *args: object) -> list[asyncpg.Record]:
        """Rows of a read-only SQL statement with ``$n`` parameters, on the asyncpg driver: prepared once
        per pooled connection (asyncpg's statement cache), so a hot query costs no SQL compilation (the
        executor's per-action checks; SQLAlchemy Core compiled them anew each time). Retried on a
        connection lost under it."""
        return await self._fetch(sql, *args)

    # --- the executor's per-action reads ----------------------------------------------------------------

    async def before_acting(
        self, envelope: Envelope, outcome_id: uuid.UUID, pod: str, carried: str | None
    ) -> tuple[bool, list[str], bool | None]:
        """For a PodActionRequested ``envelope``, one statement: whether its terminal event
        (``outcome_id``) is stored, the action ids its round planned before it for ``pod`` (in order), and,
        given the payload the bus message ``carried``, whether this very event is stored as it came (None:
        no event with its id is stored, or nothing carried)."""
        rows = await self._fetch(
            BEFORE_ACTING_SQL,
            outcome_id,
            envelope.stream,
            envelope.causation_id,
            envelope.stream_version,
            pod,
            envelope.event_id if carried is not None else None,
            envelope.correlation_id,
            carried,
        )
        reported, stored, earlier = rows[0]
        return bool(reported), list(earlier), stored

    async def before_acting_many(
        self, requests: Sequence[tuple[Envelope, uuid.UUID, str, str | None]]
    ) -> list[tuple[bool, list[str], bool | None]]:
        """``before_acting`` for each (envelope, outcome id, pod, carried) of ``requests``, in one
        statement; the answers in the same order."""
        if not requests:
            return []
        rows = await self._fetch(
            BEFORE_ACTING_MANY_SQL,
            [outcome for _, outcome, _, _ in requests],
            [envelope.stream for envelope, *_ in requests],
            [envelope.causation_id for envelope, *_ in requests],
            [envelope.stream_version for envelope, *_ in requests],
            [pod for *_, pod, _ in requests],
            [envelope.event_id if carried is not None else None for envelope, *_, carried in requests],
            [envelope.correlation_id for envelope, *_ in requests],
            [carried for *_, carried in requests],
        )
        return [(bool(reported), list(earlier), stored) for reported, stored, earlier in rows]

    async def action_request(self, envelope: Envelope, action_id: str) -> uuid.UUID | None:
        """The event id of the PodActionRequested of ``action_id`` in the round of the request
        ``envelope`` (its stream, from its round to it), if stored."""
        rows = await self._fetch(
            _ACTION_REQUEST_SQL, envelope.stream, envelope.causation_id, envelope.stream_version, action_id
        )
        return rows[0][0] if rows else None

    async def later_status_planned(self, stream: str, stream_version: int) -> bool:
        """Whether ``stream`` has a StatusPlanned after ``stream_version``."""
        return bool(await self._fetch(_LATER_STATUS_SQL, stream, stream_version))

    async def status_stored_as_carried(self, envelope: Envelope, carried: str) -> bool | None:
        """Whether the StatusPlanned ``envelope`` is stored as the bus message carried it (``carried``: its
        payload's JSON); None when no event with its id is stored."""
        rows = await self._fetch(
            _STORED_STATUS_SQL,
            envelope.event_id,
            envelope.stream,
            envelope.stream_version,
            envelope.causation_id,
            envelope.correlation_id,
            carried,
        )
        return rows[0][0] if rows else None

    async def read_batch(self, from_position: int = 0, limit: int = 1000) -> list[StoredEvent]:
        """Up to ``limit`` events with global_position > ``from_position``, in order (one poll)."""
        rows = await self._fetch(_READ_ALL_SQL, from_position, limit)
        return _rows_to_stored(rows, self.decoder)

    async def read_identities(self, from_position: int = 0, limit: int = 1000) -> list[EventIdentity]:
        """``read_batch`` without the bodies: (position, event id, stream, version) of up to ``limit``
        events after ``from_position``, in order. An index range scan, nothing decoded."""
        rows = await self._fetch(_READ_IDENTITIES_SQL, from_position, limit)
        return [EventIdentity(row[0], row[1], row[2], row[3]) for row in rows]

    async def read_batch_json(self, from_position: int = 0, limit: int = 1000) -> list[StoredEventJson]:
        """``read_batch`` with each payload left as the JSON the database returns (what the relay sends
        on): a payload stored with an older schema version is upcast and encoded again, as read_batch
        would decode it."""
        rows = await self._fetch(_READ_ALL_SQL, from_position, limit)
        versions = self.decoder.versions
        upcast = self.decoder.decode
        return [
            StoredEventJson(
                row[0],
                EnvelopeJson(
                    event_id=row[2],
                    stream=row[3],
                    stream_version=row[4],
                    type=row[5],
                    schema_version=row[6],
                    occurred_at=row[7],
                    causation_id=row[8],
                    correlation_id=row[9],
                    payload=msgspec.Raw(
                        row[10]
                        if versions.get(row[5], 1) == row[6]
                        else _payload_encoder.encode(upcast(row[5], row[6], row[10]))
                    ),
                ),
            )
            for row in rows
        ]

    async def read_all_batches(
        self, from_position: int = 0, batch_size: int = 2000
    ) -> AsyncIterator[list[StoredEvent]]:
        """Pages of events after ``from_position`` until the head is reached (events appended while
        iterating are included if they land before the last page). The next page is requested while the
        caller works through the current one, so the database's work overlaps the caller's."""
        upcoming: asyncio.Task[list[StoredEvent]] = asyncio.ensure_future(
            self.read_batch(from_position, batch_size)
        )
        try:
            while True:
                batch = await upcoming
                if not batch:
                    return
                if len(batch) == batch_size:
                    upcoming = asyncio.ensure_future(self.read_batch(batch[-1].global_position, batch_size))
                    for _ in range(_PREFETCH_SPINS):  # let it get as far as sending its query
                        await asyncio.sleep(0)
                yield batch
                if len(batch) < batch_size:
                    return
        finally:
            if not upcoming.done():
                upcoming.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await upcoming

    async def read_all(self, from_position: int = 0, batch_size: int = 2000) -> AsyncIterator[StoredEvent]:
        """Every event after ``from_position`` in global order, until the head. Rows are fetched a page at a
        time but decoded one by one as the caller asks: a decoded event the caller drops is freed at once,
        which keeps the cyclic GC out of replay (decoding whole pages up front made it 2.5x slower)."""
        position = from_position
        while True:
            rows = await self._fetch(_READ_ALL_SQL, position, batch_size)
            for row in rows:
                yield _row_to_stored(row, self.decoder)
            if len(rows) < batch_size:
                return
            position = rows[-1][0]

    async def add_partitions(self, months: int) -> int:
        """Create the partitions of ``events`` (``months`` calendar months each) up to two ahead of now
        (migrations/versions/0026_events_partitioned.py, ``events_add_partitions``); how many were made."""
        rows = await self._fetch("SELECT events_add_partitions($1)", months)
        return int(rows[0][0])

    # --- tamper evidence (migrations/versions/0004_event_hash_chain.py) ------------------------------

    async def read_chain_batches(
        self, from_position: int = 0, batch_size: int = 5000, to_position: int = CHAIN_COPY_END
    ) -> AsyncIterator[list[ChainRow]]:
        """The rows after ``from_position`` (up to ``to_position``) for hash-chain verification, in global
        order, some ``batch_size`` at a time (``services.model.hashchain.ChainRow``). COPY streams them
        (services/infra/chain_read.py) while the caller checks the previous batch: the server renders
        the next rows meanwhile."""
        batches: asyncio.Queue[list[ChainRow] | Exception | None] = asyncio.Queue(maxsize=2)
        parser = ChainCopyParser(from_position, batch_size, batches.put)

        async def copy_page() -> int:
            parser.begin()
            async with self._driver() as conn:
                await conn.copy_from_query(
                    CHAIN_COPY_SQL,
                    parser.position,
                    CHAIN_COPY_PAGE,
                    to_position,
                    output=parser.feed,
                    format="binary",
                )
            return parser.end()

        async def copy() -> None:
            try:
                while await self._retrying(copy_page) == CHAIN_COPY_PAGE:
                    pass
                await parser.finish()
                await batches.put(None)
            except Exception as error:  # noqa: BLE001 - raised again by the reader below
                await batches.put(error)

        reading = asyncio.create_task(copy())
        try:
            while (batch := await batches.get()) is not None:
                if isinstance(batch, Exception):
                    raise batch
                yield batch
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading

    async def write_checkpoint(self) -> tuple[int, bytes] | None:
        """Record the chain hash at the head in ``event_checkpoints`` and return (position, chain_hash),
        or None for an empty log. Keep a copy outside the database too (services/replay/checkpoints.py)."""
        rows = await self._fetch(_CHECKPOINT_SQL)
        if not rows:
            return None
        return int(rows[0][0]), bytes(rows[0][1])

    async def checkpoints(self) -> list[tuple[int, bytes]]:
        """The checkpoints recorded in the database (position, chain_hash), oldest first."""
        rows = await self._fetch("SELECT global_position, chain_hash FROM event_checkpoints ORDER BY 1")
        return [(int(r[0]), bytes(r[1])) for r in rows]

    # --- the signed Merkle log (migrations/versions/0017_signed_merkle_log.py, docs/audit.md) ---------

    async def signed_notes(self) -> list[str]:
        """The signed checkpoint notes kept in the database (``signed_checkpoints``), by tree size."""
        return [r[0] for r in await self._fetch("SELECT note FROM signed_checkpoints ORDER BY tree_size")]

    async def verifier_keys(self) -> list[str]:
        """The auditor's published verifier keys (``audit_keys``), oldest first."""
        return [r[0] for r in await self._fetch("SELECT verifier_key FROM audit_keys ORDER BY created_at")]

    async def has_signed_checkpoint(self) -> bool:
        return bool(await self._fetch("SELECT 1 FROM signed_checkpoints LIMIT 1"))

    async def read_leaf_rows(self, after_position: int, limit: int) -> list[asyncpg.Record]:
        """(global_position, stream_hash) of up to ``limit`` events after ``after_position``, in global
        order: what the Merkle tree's leaves are made of."""
        return await self._fetch(_READ_LEAVES_SQL, after_position, limit)

    async def read_leaf_range(self, first_position: int, last_position: int) -> list[asyncpg.Record]:
        """(global_position, stream_hash) of the events from ``first_position`` to ``last_position``."""
        return await self._fetch(_READ_LEAF_RANGE_SQL, first_position, last_position)

    async def execute_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        """One statement for each row, in one transaction (retried on a lost connection: every caller's
        statement is idempotent)."""

        async def run() -> None:
            async with self._driver() as conn, conn.transaction():
                await conn.executemany(sql, rows)

        await self._retrying(run)


# The name every caller knows it by.
EventStore = PostgresEventStore
