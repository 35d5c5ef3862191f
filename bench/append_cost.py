"""What one stored event costs Postgres on the append path, and which part of the table costs what.

    .venv/bin/python bench/append_cost.py [--statements N] [--preload N] [--rounds R] [--old-partitions N]
                                          [--database-url URL]

Creates its own database (random name) on the server of --database-url / ROLLBOOK_DATABASE_URL, migrates
it, preloads --preload events (so the indexes have a realistic depth) and drops it at the end. The server
must be on this machine: CPU is read from /proc/<pid>/stat of the backend serving the store.

Every case appends the same rollout-shaped events: batches of 7 of one stream (``store.append`` with
``expected_version=None``, what the watcher and the executor's group commit send), streams taken in
turn, types mixed as in an in-place rollout (PodActionRequested, PodActionStarted, PodActionSucceeded,
ObjectObserved with a pod object). Each case prints server CPU per stored row in microseconds, and its
difference to ``append`` on the schema as migrated:

- statement shapes: ``append`` (one INSERT ... SELECT FROM unnest per batch, autocommitted),
  ``append_many``, ``executemany`` (one INSERT per row in a transaction), ``copy`` (import_events);
- without each secondary index of ``events`` (dropped for the case, then created again), without all
  of them, without the hash-chain trigger (a stand-in trigger setting constant hashes), and without the
  uniqueness trigger of the partitioned table (0026): what each costs per row. Cases take turns within a
  round; the figure is the median of the rounds.

Then EXPLAIN (ANALYZE, BUFFERS, WAL) of one 7-row append: WAL bytes and records per row, trigger time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from bench.eventstore import _process_cpu, load_average
from services.infra.database import asyncpg_url, upgrade_async
from services.infra.settings import Settings
from services.infra.store import _INSERT_SQL, EventStore, _columns
from services.model.events import (
    Envelope,
    ObjectObserved,
    PodActionRequested,
    PodActionStarted,
    PodActionSucceeded,
    new_event,
)
from tests.plugins.database import drop_database_and_roles

BATCH = 7  # rows per append: a rollout's appends carry 7.3 on average (bench/postgres_statements.py)
STREAMS = 50
# One row per statement, as a driver's executemany sends it.
_SINGLE_INSERT_SQL = """
INSERT INTO events (event_id, stream, stream_version, type, schema_version, occurred_at,
                    causation_id, correlation_id, payload)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb)
"""
_CONSTANT_HASH_FUNCTION = """
CREATE OR REPLACE FUNCTION bench_no_chain() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.stream_hash := '\\x00'::bytea;
    NEW.chain_hash := '\\x00'::bytea;
    RETURN NEW;
END
$$
"""


def rollout_events(count: int, offset: int) -> list[Envelope]:
    """``count`` events in batches of BATCH per stream, the streams in turn; the i-th event of a pod is
    a request, a start, an outcome or an observation, as in an in-place rollout."""
    base = datetime(2026, 12, 1, tzinfo=UTC)
    events = []
    for i in range(offset, offset + count):
        batch, _ = divmod(i, BATCH)
        stream_index = batch % STREAMS
        pod = f"web-{i % 300}"
        action_id = f"ns/web@web-2/{pod}/{i}"
        kind = i % 14
        payload: PodActionRequested | PodActionStarted | PodActionSucceeded | ObjectObserved
        # One stream per batch, as the store's appends are; its suffix as the batch's first event's type.
        stream = (
            f"CloneSet/ns/web-{stream_index}" + ("", "/actions", "/observed")[(batch * BATCH % 14) // 5 % 3]
        )
        if kind < 3:
            payload = PodActionRequested(
                action_id=action_id,
                action=("markNotReady", "updateInPlace", "markReady")[kind],
                namespace="ns",
                pod=pod,
                rollout_id="ns/web@web-2",
                revision="web-2",
                details={"patch": {"spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}},
            )
        elif kind < 6:
            payload = PodActionStarted(action_id=action_id, executor="executor-0")
        elif kind < 9:
            payload = PodActionSucceeded(action_id=action_id, pod_uid=str(uuid.uuid4()))
        else:
            payload = ObjectObserved(
                kind="Pod",
                namespace="ns",
                name=pod,
                uid=str(uuid.uuid4()),
                resource_version=str(i),
                change="MODIFIED",
                object={
                    "metadata": {"name": pod, "namespace": "ns", "labels": {"app": "web", "rev": "web-2"}},
                    "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}], "nodeName": "node-3"},
                    "status": {
                        "phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True"}],
                        "containerStatuses": [{"name": "main", "ready": True, "restartCount": 1}],
                    },
                },
            )
        events.append(
            new_event(
                payload,
                stream=stream,
                stream_version=1,  # the store gives the next versions (expected_version=None)
                occurred_at=base + timedelta(milliseconds=i),
                causation_id=uuid.uuid4(),
                correlation_id="ns/web@web-2" if kind < 9 else None,
            )
        )
    return events


def batches(events: list[Envelope]) -> list[list[Envelope]]:
    """Consecutive runs of one stream, at most BATCH long."""
    out: list[list[Envelope]] = []
    for event in events:
        if out and out[-1][0].stream == event.stream and len(out[-1]) < BATCH:
            out[-1].append(event)
        else:
            out.append([event])
    return out


class Bench:
    """The cases. Stream versions are tracked here (only this process writes the database), so each
    statement shape sends its own statements and nothing else."""

    def __init__(self, store: EventStore, admin: asyncpg.Connection, driver: asyncpg.Connection) -> None:
        self.store = store
        self.admin = admin
        self.driver = driver  # for the statement shapes the store does not send itself
        self.offset = 7 * 10**8  # a multiple of BATCH: batches stay BATCH long
        self.versions: dict[str, int] = {}

    async def backend_cpu(self) -> float:
        pids = await self.admin.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return sum(_process_cpu(int(row[0])) or 0.0 for row in pids)

    def fresh(self, count: int) -> list[list[Envelope]]:
        self.offset += count
        return batches(rollout_events(count, self.offset))

    def versioned(self, batch: list[Envelope]) -> list[Envelope]:
        """The batch with the stream's next versions (as the store would give them)."""
        current = self.versions.get(batch[0].stream, 0)
        self.versions[batch[0].stream] = current + len(batch)
        return [msgspec.structs.replace(e, stream_version=current + i + 1) for i, e in enumerate(batch)]

    async def append(self, work: list[list[Envelope]]) -> None:
        for batch in work:
            result = await self.store.append(batch, expected_version=None)
            self.versions[batch[0].stream] = result.stream_version

    async def append_many(self, work: list[list[Envelope]]) -> None:
        for batch in work:
            await self.store.append_many(self.versioned(batch))

    async def executemany(self, work: list[list[Envelope]]) -> None:
        for batch in work:
            rows = list(zip(*_columns(self.versioned(batch)), strict=True))
            async with self.driver.transaction():
                await self.driver.executemany(_SINGLE_INSERT_SQL, rows)

    async def copy(self, work: list[list[Envelope]]) -> None:
        for batch in work:
            await self.store.import_events(self.versioned(batch))

    async def without_indexes(self, names: list[str], rows: int) -> float:
        """append's CPU per row with these secondary indexes dropped (created again afterwards)."""
        definitions = [
            await self.admin.fetchval("SELECT indexdef FROM pg_indexes WHERE indexname = $1", name)
            for name in names
        ]
        for name in names:
            await self.admin.execute(f"DROP INDEX {name}")
        try:
            return await measure(self, self.append, rows)
        finally:
            for definition in definitions:
                await self.admin.execute(definition)

    async def without_chain(self, rows: int) -> float:
        """append's CPU per row with the hash-chain trigger swapped for one that sets constant hashes."""
        await self.admin.execute(_CONSTANT_HASH_FUNCTION)
        await self.admin.execute("ALTER TABLE events DISABLE TRIGGER events_chain")
        await self.admin.execute(
            "CREATE TRIGGER bench_no_chain BEFORE INSERT ON events"
            " FOR EACH ROW EXECUTE FUNCTION bench_no_chain()"
        )
        try:
            return await measure(self, self.append, rows)
        finally:
            await self.admin.execute("DROP TRIGGER bench_no_chain ON events")
            await self.admin.execute("ALTER TABLE events ENABLE TRIGGER events_chain")

    async def without_unique_check(self, rows: int) -> float:
        """append's CPU per row without the uniqueness trigger of the partitioned table (0026)."""
        await self.admin.execute("ALTER TABLE events DISABLE TRIGGER events_unique_keys")
        try:
            return await measure(self, self.append, rows)
        finally:
            await self.admin.execute("ALTER TABLE events ENABLE TRIGGER events_unique_keys")


async def add_old_partitions(admin: asyncpg.Connection, months: int) -> None:
    """``months`` empty monthly partitions before the oldest one (partitioned schema only): what a year
    or two of kept months cost the append path's lookups."""
    oldest = await admin.fetchval("SELECT min(lower_bound) FROM event_partitions WHERE NOT is_default")
    for back in range(1, months + 1):
        await admin.execute(
            f"CREATE TABLE bench_old_{back} PARTITION OF events FOR VALUES"
            f" FROM ('{oldest}'::timestamptz - interval '{back} months')"
            f" TO ('{oldest}'::timestamptz - interval '{back - 1} months')"
        )


async def measure(bench: Bench, case: Callable[[list[list[Envelope]]], Awaitable[None]], rows: int) -> float:
    """Server CPU microseconds per stored row of ``case`` over ``rows`` fresh events."""
    work = bench.fresh(rows)
    before = await bench.backend_cpu()
    await case(work)
    return (await bench.backend_cpu() - before) * 1e6 / rows


async def explain_append(bench: Bench) -> str:
    batch = bench.versioned(bench.fresh(BATCH)[0])
    async with bench.driver.transaction():
        plan = await bench.driver.fetchval(
            "EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) " + _INSERT_SQL, *_columns(batch)
        )
    top = json.loads(plan)[0]
    node = top["Plan"]
    rows = len(batch)
    triggers = ", ".join(f"{t['Trigger Name']} {t['Time']:.3f} ms" for t in top.get("Triggers", []))
    return (
        f"EXPLAIN (ANALYZE, BUFFERS, WAL) of one {rows}-row append: {top['Execution Time']:.3f} ms;"
        f" WAL {node.get('WAL Bytes', 0) / rows:.0f} bytes, {node.get('WAL Records', 0) / rows:.1f} records"
        f" and {node.get('WAL FPI', 0) / rows:.2f} full-page images per row;"
        f" buffers hit {node.get('Shared Hit Blocks', 0) / rows:.1f} per row; triggers: {triggers}"
    )


async def run_cases(bench: Bench, rows: int, rounds: int) -> dict[str, list[float]]:
    secondary = [
        row[0]
        for row in await bench.admin.fetch(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'events' AND indexname NOT IN"
            " ('events_pkey', 'events_event_id_key', 'events_stream_version_key', 'events_event_id_idx',"
            " 'events_stream_version_idx') ORDER BY indexname"
        )
    ]
    shapes: dict[str, Callable[[list[list[Envelope]]], Awaitable[None]]] = {
        "append (unnest)": bench.append,
        "append_many (unnest)": bench.append_many,
        "executemany (row per INSERT)": bench.executemany,
        "copy (import_events)": bench.copy,
    }
    results: dict[str, list[float]] = {}
    for _ in range(rounds):  # cases take turns, so a change in the machine's load hits them alike
        for label, case in shapes.items():
            results.setdefault(label, []).append(await measure(bench, case, rows))
        for name in secondary:
            results.setdefault(f"append without {name}", []).append(await bench.without_indexes([name], rows))
        results.setdefault("append without every secondary index", []).append(
            await bench.without_indexes(secondary, rows)
        )
        results.setdefault("append without the hash chain", []).append(await bench.without_chain(rows))
        if await bench.admin.fetchval("SELECT to_regproc('events_unique_keys') IS NOT NULL"):
            results.setdefault("append without the uniqueness check (0026)", []).append(
                await bench.without_unique_check(rows)
            )
    return results


async def main(args: argparse.Namespace) -> None:
    server = args.database_url
    name = f"rollbook_bench_append_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(asyncpg_url(server))
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = asyncpg_url(server).rsplit("/", 1)[0] + "/" + name
    try:
        await upgrade_async(url)
        store = await EventStore.connect(url, pool_size=1, max_overflow=0)
        conn = await asyncpg.connect(url)
        driver = await asyncpg.connect(url)
        try:
            bench = Bench(store, conn, driver)
            for start in range(0, args.preload, 7_000):
                await bench.copy(batches(rollout_events(min(7_000, args.preload - start), start)))
            if args.old_partitions:
                await add_old_partitions(conn, args.old_partitions)
            await conn.execute("ANALYZE events")
            rows = args.statements * BATCH
            print(f"{args.preload} events preloaded; {rows} rows per case; load {load_average()}")
            results = await run_cases(bench, rows, args.rounds)
            head = statistics.median(results["append (unnest)"])
            print(f"{'case':<52} {'server CPU us/row':>18} {'vs append':>10}")
            for label, values in results.items():
                value = statistics.median(values)
                print(f"{label:<52} {value:18.1f} {value - head:+10.1f}")
            print(await explain_append(bench))
            print(f"load {load_average()}")
        finally:
            await driver.close()
            await conn.close()
            await store.close()
    finally:
        await admin.close()
        await drop_database_and_roles(server, name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--statements", type=int, default=300, help="appends of 7 rows per case")
    parser.add_argument("--preload", type=int, default=10_000, help="events stored before the cases")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--old-partitions",
        type=int,
        default=0,
        help="empty monthly partitions added before the oldest (0026)",
    )
    parser.add_argument(
        "--database-url", default=Settings.from_env().database_url or "postgresql://root@127.0.0.1:5432/test"
    )
    asyncio.run(main(parser.parse_args()))
