"""Archive and verify-across throughput, each beside its ceiling measured in the same run.

    .venv/bin/python bench/archive.py [--events N] [--database-url URL]

Creates its own database (random name) on the server of --database-url / ROLLBOOK_DATABASE_URL and drops it
at the end. It records N rollout-shaped events in a month gone by: the owner inserts them with an explicit
``recorded_at``, and every insert trigger runs. The auditor's checkpointer then signs a checkpoint, and
the run prints:

- archive: events/s that ``rollbook archive`` writes (file, manifest, fsync, drop), beside its ceiling,
  the same rows read from the database in the same pages with nothing written;
- verify across: events/s of ``audit verify --archive`` after the archive, beside ``audit verify`` of
  the same log read from the database before the archive.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from bench.append_cost import rollout_events
from bench.eventstore import load_average
from services.cli.replay import verify_trail
from services.infra.archive import _CHAIN_PAGE_SQL, _PAGE, archive_before
from services.infra.database import asyncpg_url, upgrade_async
from services.infra.db_roles import assume_sql
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.infra.transparency import checkpointer_for, trusted_verifiers
from tests.plugins.database import drop_database_and_roles

_INSERT = """
INSERT INTO events (event_id, stream, stream_version, type, schema_version, occurred_at, recorded_at,
                    causation_id, correlation_id, payload)
SELECT e.event_id, e.stream, e.stream_version, e.type, e.schema_version, e.occurred_at, $10,
       e.causation_id, e.correlation_id, e.payload::jsonb
FROM unnest($1::uuid[], $2::text[], $3::int4[], $4::text[], $5::int4[], $6::timestamptz[], $7::uuid[],
            $8::text[], $9::text[])
     WITH ORDINALITY AS e(event_id, stream, stream_version, type, schema_version, occurred_at, causation_id,
                          correlation_id, payload, ord)
ORDER BY e.ord
"""


def month_back(months: int) -> datetime:
    now = datetime.now(UTC)
    index = now.year * 12 + now.month - 1 - months
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


async def seed(owner: asyncpg.Connection, count: int) -> None:
    """``count`` events recorded two months back, in that month's partition."""
    start, end = month_back(2), month_back(1)
    await owner.execute(assume_sql("owner"))  # the owner's partition, as events_add_partitions makes them
    await owner.execute(
        f"CREATE TABLE bench_old PARTITION OF events"
        f" FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
    )
    await owner.execute("RESET ROLE")
    versions: dict[str, int] = {}
    encoder = msgspec.json.Encoder()
    for offset in range(0, count, 5000):
        events = rollout_events(min(5000, count - offset), offset)
        numbered = []
        for event in events:
            versions[event.stream] = versions.get(event.stream, 0) + 1
            numbered.append((event, versions[event.stream]))
        await owner.execute(
            _INSERT,
            [e.event_id for e, _ in numbered],
            [e.stream for e, _ in numbered],
            [v for _, v in numbered],
            [e.type for e, _ in numbered],
            [e.schema_version for e, _ in numbered],
            [e.occurred_at for e, _ in numbered],
            [e.causation_id for e, _ in numbered],
            [e.correlation_id for e, _ in numbered],
            [encoder.encode(e.payload).decode() for e, _ in numbered],
            start,
        )


async def read_ceiling(owner: asyncpg.Connection, last: int) -> float:
    """Events/s of reading the rows archive writes, in its pages, writing nothing."""
    started = time.perf_counter()
    position, read = 0, 0
    while True:
        page = await owner.fetch(_CHAIN_PAGE_SQL, position, last, _PAGE)
        read += len(page)
        if len(page) < _PAGE:
            break
        position = page[-1][0]
    return read / (time.perf_counter() - started)


async def main(args: argparse.Namespace) -> None:
    server = args.database_url
    name = f"rollbook_bench_archive_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(asyncpg_url(server))
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = asyncpg_url(server).rsplit("/", 1)[0] + "/" + name
    try:
        await upgrade_async(url)
        owner = await asyncpg.connect(url)
        store = await EventStore.connect(url)
        with tempfile.TemporaryDirectory() as scratch:
            settings = Settings(
                data_dir=scratch, database_url=url, audit_checkpoint_dir=f"{scratch}/checkpoints"
            )
            try:
                started = time.perf_counter()
                await seed(owner, args.events)
                seeded = time.perf_counter() - started
                signed = await checkpointer_for(store, settings, None).checkpoint()
                assert signed is not None
                print(
                    f"{args.events} events recorded two months back in {seeded:.1f}s"
                    f" ({args.events / seeded:,.0f}/s); load {load_average()}"
                )
                trusted = trusted_verifiers(settings)
                started = time.perf_counter()
                live = await verify_trail(store, settings, trusted, bus=False)
                verify_live = live.rows / (time.perf_counter() - started)
                assert live.clean, [f.describe() for f in live.findings]
                last = signed.body.global_position // 256 * 256
                ceiling = await read_ceiling(owner, last)
                directory = Path(scratch) / "archive"
                started = time.perf_counter()
                outcome = await archive_before(url, month_back(0), directory)
                archived_rate = outcome.events / (time.perf_counter() - started)
                started = time.perf_counter()
                across = await verify_trail(store, settings, trusted, bus=False, archive=directory)
                verify_across = across.rows / (time.perf_counter() - started)
                assert across.clean and across.rows == args.events, [f.describe() for f in across.findings]
                size = sum(p.stat().st_size for p in directory.iterdir())
                print(f"{'':34}{'events/s':>12}{'ceiling/s':>12}{'ratio':>8}")
                print(
                    f"{'archive (write, fsync, drop)':34}{archived_rate:12,.0f}{ceiling:12,.0f}"
                    f"{archived_rate / ceiling:8.2f}   ceiling: the same pages read, nothing written"
                )
                print(
                    f"{'audit verify --archive':34}{verify_across:12,.0f}{verify_live:12,.0f}"
                    f"{verify_across / verify_live:8.2f}   ceiling: audit verify of the log in the database"
                )
                print(
                    f"archived {outcome.events} events into {size / outcome.events:.0f} bytes/event"
                    f" (gzip JSON lines); load {load_average()}"
                )
            finally:
                await store.close()
                await owner.close()
    finally:
        await admin.close()
        await drop_database_and_roles(server, name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument(
        "--database-url",
        default=Settings.from_env().database_url or "postgresql://root@127.0.0.1:5432/postgres",
        help="a Postgres server on this machine (default: ROLLBOOK_DATABASE_URL)",
    )
    asyncio.run(main(parser.parse_args()))
