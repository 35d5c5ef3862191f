"""Events recorded in months gone by, for the partitioning and archive tests.

The store records ``recorded_at`` as now; old months are made the way an operator's restore would: the
owner (the test's superuser login) creates a month's partition and inserts rows with an explicit
``recorded_at``. Every insert trigger runs (the writers' lock, the hash chain, the uniqueness checks)."""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from services.infra.db_roles import assume_sql, role_sql
from services.model.events import Envelope
from tests.replay.test_recorded_trails import _as_read

TRAILS = Path(__file__).resolve().parents[1] / "fixtures" / "trails"

_INSERT = """
INSERT INTO events (event_id, stream, stream_version, type, schema_version, occurred_at, recorded_at,
                    causation_id, correlation_id, payload)
SELECT e.event_id, e.stream, e.stream_version, e.type, e.schema_version, e.occurred_at, e.recorded_at,
       e.causation_id, e.correlation_id, e.payload::jsonb
FROM unnest($1::uuid[], $2::text[], $3::int4[], $4::text[], $5::int4[], $6::timestamptz[], $7::timestamptz[],
            $8::uuid[], $9::text[], $10::text[])
     WITH ORDINALITY AS e(event_id, stream, stream_version, type, schema_version, occurred_at, recorded_at,
                          causation_id, correlation_id, payload, ord)
ORDER BY e.ord
"""


def month_start(months_ago: int, now: datetime | None = None) -> datetime:
    """The first instant (UTC) of the calendar month ``months_ago`` months before this one."""
    moment = now or datetime.now(UTC)
    index = moment.year * 12 + moment.month - 1 - months_ago
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


async def old_partition(connection: asyncpg.Connection, months_ago: int) -> str:
    """Create the partition of the month ``months_ago`` months back (as the owner); its name."""
    start, end = month_start(months_ago), month_start(months_ago - 1)
    name = f"events_y{start.year:04d}m{start.month:02d}"
    await connection.execute(assume_sql("owner"))  # the owner's, as events_add_partitions makes them
    try:
        await connection.execute(
            f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF events"
            f" FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
        )
        roles = [
            await connection.fetchval(f"SELECT {role_sql(duty)}") for duty in ("writer", "reader", "webhook")
        ]
        await connection.execute(f"REVOKE ALL ON {name} FROM {', '.join(roles)}")
    finally:
        await connection.execute("RESET ROLE")
    return name


def fixture_trail(name: str = "rules-v8-inplace-partition.json.gz") -> tuple[str, list[dict[str, Any]]]:
    """A recorded CloneSet trail (tests/fixtures/trails): its workload and raw events as recorded."""
    recorded = json.loads(gzip.decompress((TRAILS / name).read_bytes()))
    return recorded["workload"], recorded["events"]


def filler(workload: str, count: int, start_version: int = 1) -> list[dict[str, Any]]:
    """``count`` pod action outcomes on one actions stream, as raw events."""
    return [
        {
            "event_id": str(uuid.uuid4()),
            "stream": f"CloneSet/{workload}/actions",
            "stream_version": version,
            "type": "PodActionSucceeded",
            "schema_version": 1,
            "occurred_at": "2026-01-01T00:00:00+00:00",
            "causation_id": None,
            "correlation_id": f"{workload}@rev",
            "payload": {"type": "PodActionSucceeded", "action_id": f"{workload}-{version}"},
        }
        for version in range(start_version, start_version + count)
    ]


async def insert_recorded(
    connection: asyncpg.Connection, events: Sequence[dict[str, Any]], recorded_at: datetime
) -> None:
    """Insert raw events (as the fixtures hold them) recorded at ``recorded_at`` plus a microsecond each."""
    columns: list[list[Any]] = [[] for _ in range(10)]
    for index, event in enumerate(events):
        for column, value in zip(
            columns,
            (
                uuid.UUID(event["event_id"]),
                event["stream"],
                event["stream_version"],
                event["type"],
                event["schema_version"],
                datetime.fromisoformat(event["occurred_at"]),
                recorded_at + timedelta(microseconds=index),
                None if event["causation_id"] is None else uuid.UUID(event["causation_id"]),
                event["correlation_id"],
                json.dumps(event["payload"]),
            ),
            strict=True,
        ):
            column.append(value)
    await connection.execute(_INSERT, *columns)


def envelope(event: dict[str, Any]) -> Envelope:
    """A raw event as the store reads it back."""
    return _as_read(event)


class _RolledBack(Exception):
    pass


async def accepted_without_the_check(
    connection: asyncpg.Connection, events: Sequence[dict[str, Any]], recorded_at: datetime
) -> bool:
    """Whether ``events`` go in once the uniqueness trigger is disabled (in a transaction rolled back)."""
    try:
        async with connection.transaction():
            await connection.execute("ALTER TABLE events DISABLE TRIGGER events_unique_keys")
            await insert_recorded(connection, events, recorded_at)
            raise _RolledBack
    except _RolledBack:
        return True
    except asyncpg.UniqueViolationError:
        return False
