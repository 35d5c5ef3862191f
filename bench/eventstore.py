"""Event store benchmark: append and replay throughput of services.infra.store.EventStore, each printed
beside the raw asyncpg ceiling measured in the same run (not a test; prints figures).

    .venv/bin/python bench/eventstore.py [--events N] [--singles N] [--replay-events N] [--rounds R]
                                              [--database-url URL]

It creates its own database (random name) on the server of --database-url / ROLLBOOK_DATABASE_URL
(default postgresql://root@127.0.0.1:5432/test), migrates it, and drops it at the end.

Append cases (events/s; the table is emptied and CHECKPOINTed before every timed run, untimed):
- append-1:          store.append([event], expected_version) - one event per transaction, version-checked
- append-100/1000:   store.append(batch, expected_version) - one stream, version-checked, idempotent
- append_many-100/1000: store.append_many(batch) - idempotent (ON CONFLICT (event_id) DO NOTHING)
- copy-1/100/1000/10000: raw asyncpg copy_records_to_table of the same rows, same rows per transaction,
  into `bench_copy`, a table shaped like `events` (same columns, identity, indexes, unique and check
  constraints) but with no triggers: no writer serialisation and no hash chain, so its stream_hash and
  chain_hash columns are nullable and stay NULL. copy-10000 is the COPY ceiling: what Postgres can
  ingest of these rows at most, without tamper evidence. The gap between it and the store's appends
  therefore includes the hash chain (migration 0004), which every path into `events` must pay.
- import-10000:      store.import_events(batch): COPY into `events` itself, 10,000 rows per transaction,
  triggers on (serialised writers + per-row hash chain). Its gap to copy-10000 is the triggers' cost.
Replay cases (read everything in global order and decode into StoredEvent/Envelope/payload structs):
- store.read_all:    keyset pages (read_all_batches) + msgspec decode, what replay and catch-up use
- cursor+decode:     raw server-side cursor, fetch(5000), the same decode per row: the ceiling
- cursor-nodecode:   raw server-side cursor, no decode (transport + asyncpg Record only), for reference
Each figure is the median of --rounds runs; cases take turns within a round.

events/s swing with the machine's load (other work on a shared 2-core machine moved them 2x between runs).
So each append case also reports CPU time per event, which load changes much less: "server" is the CPU
time of this database's Postgres backends during the run (from /proc/<pid>/stat; shown as n/a when the
server is not on this machine), "client" is this process's CPU time. Compare cases by those when the
load average (printed) is above the core count.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from services.infra.database import asyncpg_url, upgrade_async
from services.infra.settings import Settings
from services.infra.store import EventStore, _columns, _row_to_stored
from services.model.events import Envelope, PodActionRequested, new_event
from tests.plugins.database import drop_database_and_roles

STREAM_LENGTH = 1000  # events per stream: batches of up to 1,000 are one stream, consecutive versions
COPY_COLUMNS = [
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
READ_SQL = (
    "SELECT global_position, recorded_at, event_id, stream, stream_version, type, schema_version,"
    " occurred_at, causation_id, correlation_id, payload::text FROM events ORDER BY global_position"
)


def build_events(count: int) -> list[Envelope]:
    """Pod-action events with ~700 bytes of payload JSON, stream-major (stream s holds versions 1..1000)."""
    base = datetime(2026, 11, 30, tzinfo=UTC)
    events = []
    for i in range(count):
        stream_index, version = divmod(i, STREAM_LENGTH)
        pod = f"sample-{i % 97:05d}"
        events.append(
            new_event(
                PodActionRequested(
                    action_id=f"act-{i:012d}",
                    action="recreatePod",
                    namespace="production",
                    pod=pod,
                    rollout_id=f"rollout-{stream_index}",
                    revision="sample-7656fc4998",
                    details={
                        "cloneset": "sample",
                        "fromRevision": "sample-5d9f7b8c6d",
                        "partition": i % 10,
                        "labels": {
                            "app": "sample",
                            "tier": "web",
                            "apps.kruise.io/cloneset-instance-id": pod,
                        },
                        "containers": [
                            {
                                "name": "main",
                                "image": "registry.example.com/team/app:1.2.3",
                                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                            },
                            {
                                "name": "sidecar",
                                "image": "registry.example.com/infra/proxy:4.5.6",
                                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                            },
                        ],
                        "reason": "template changed: containers[0].image; in-place update not possible",
                    },
                ),
                stream=f"CloneSet/production/bench-{stream_index:05d}",
                stream_version=version + 1,
                occurred_at=base + timedelta(milliseconds=i),
                causation_id=uuid.uuid4(),
                correlation_id=f"rollout-{stream_index}",
            )
        )
    return events


def copy_records(events: list[Envelope]) -> list[tuple[object, ...]]:
    return list(zip(*_columns(events), strict=True))


_TICKS = os.sysconf("SC_CLK_TCK")


def _process_cpu(pid: int) -> float | None:
    """utime + stime of a local process in seconds, None when it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


class Bench:
    def __init__(self, store: EventStore, conn: asyncpg.Connection) -> None:
        self.store = store
        self.conn = conn

    async def server_cpu(self) -> dict[int, float] | None:
        """CPU seconds so far of every backend connected to this database, or None if not readable."""
        pids = await self.conn.fetch(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND backend_type = 'client backend'"
        )
        times = {int(row[0]): _process_cpu(int(row[0])) for row in pids}
        if any(t is None for t in times.values()):
            return None
        return {pid: t for pid, t in times.items() if t is not None}

    async def reset(self) -> None:
        # events is append-only; only this throwaway benchmark database lifts the guard to empty it.
        await self.conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        # The keys (0028) go with the rows, or the next run's ids and versions would be refused.
        await self.conn.execute("TRUNCATE events, event_keys, stream_heads, bench_copy RESTART IDENTITY")
        await self.conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
        await self.conn.execute("CHECKPOINT")

    async def append(self, events: list[Envelope], size: int) -> None:
        for start in range(0, len(events), size):
            chunk = events[start : start + size]
            await self.store.append(chunk, expected_version=chunk[0].stream_version - 1)

    async def append_many(self, events: list[Envelope], size: int) -> None:
        for start in range(0, len(events), size):
            await self.store.append_many(events[start : start + size])

    async def copy(self, events: list[Envelope], size: int) -> None:
        # Row tuples are built inside the timed part, like the store builds its arrays.
        for start in range(0, len(events), size):
            records = copy_records(events[start : start + size])
            await self.conn.copy_records_to_table("bench_copy", records=records, columns=COPY_COLUMNS)

    async def import_events(self, events: list[Envelope], size: int) -> None:
        for start in range(0, len(events), size):
            await self.store.import_events(events[start : start + size])

    async def count(self, table: str) -> int:
        return int(await self.conn.fetchval(f"SELECT count(*) FROM {table}"))


async def bench_append(
    bench: Bench, events: list[Envelope], singles: int, rounds: int, cpu: dict[str, dict[str, list[float]]]
) -> dict[str, float]:
    """Median events/s per case; fills ``cpu[case]["server"|"client"]`` with CPU microseconds per event."""
    cases: dict[str, tuple[Callable[[], Awaitable[None]], str, int]] = {
        "append-1": (lambda: bench.append(events[:singles], 1), "events", singles),
        "copy-1": (lambda: bench.copy(events[:singles], 1), "bench_copy", singles),
    }
    for size in (100, 1000):
        cases[f"append-{size}"] = (lambda s=size: bench.append(events, s), "events", len(events))  # type: ignore[misc]
        cases[f"append_many-{size}"] = (lambda s=size: bench.append_many(events, s), "events", len(events))  # type: ignore[misc]
        cases[f"copy-{size}"] = (lambda s=size: bench.copy(events, s), "bench_copy", len(events))  # type: ignore[misc]
    cases["copy-10000"] = (lambda: bench.copy(events, 10_000), "bench_copy", len(events))
    cases["import-10000"] = (lambda: bench.import_events(events, 10_000), "events", len(events))
    results: dict[str, list[float]] = {name: [] for name in cases}
    cpu.update({name: {"server": [], "client": []} for name in cases})
    for round_index in range(rounds):
        for name, (run, table, expected) in cases.items():
            await bench.reset()
            server_before = await bench.server_cpu()
            client_before = time.process_time()
            began = time.perf_counter()
            await run()
            elapsed = time.perf_counter() - began
            client = time.process_time() - client_before
            server_after = await bench.server_cpu()
            if server_before is not None and server_after is not None:
                # A backend the pool opened during the run started from zero.
                server = sum(t - server_before.get(pid, 0.0) for pid, t in server_after.items())
                cpu[name]["server"].append(server / expected * 1e6)
            cpu[name]["client"].append(client / expected * 1e6)
            stored = await bench.count(table)
            if stored != expected:
                raise SystemExit(f"{name}: {stored} rows stored, expected {expected}")
            results[name].append(expected / elapsed)
        print(f"  append round {round_index + 1}/{rounds} done", flush=True)
    return {name: statistics.median(values) for name, values in results.items()}


async def bench_replay(bench: Bench, events: list[Envelope], rounds: int) -> dict[str, float]:
    await bench.reset()
    await bench.append_many(events, 1000)
    await bench.conn.execute("VACUUM ANALYZE events")
    expected = len(events)

    async def store_read_all() -> int:
        count = 0
        async for _event in bench.store.read_all(0, batch_size=5000):
            count += 1
        return count

    async def cursor(decode: bool) -> int:
        count = 0
        async with bench.conn.transaction():
            cur = await bench.conn.cursor(READ_SQL)
            while rows := await cur.fetch(5000):
                if decode:
                    for row in rows:
                        _row_to_stored(row)
                count += len(rows)
        return count

    cases: dict[str, Callable[[], Awaitable[int]]] = {
        "store.read_all": store_read_all,
        "cursor+decode": lambda: cursor(True),
        "cursor-nodecode": lambda: cursor(False),
    }
    results: dict[str, list[float]] = {name: [] for name in cases}
    for round_index in range(rounds):
        for name, run in cases.items():
            began = time.perf_counter()
            count = await run()
            elapsed = time.perf_counter() - began
            if count != expected:
                raise SystemExit(f"{name}: read {count} events, expected {expected}")
            results[name].append(count / elapsed)
        print(f"  replay round {round_index + 1}/{rounds} done", flush=True)
    return {name: statistics.median(values) for name, values in results.items()}


def load_average() -> str:
    return f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)"


def print_cpu_table(cpu: dict[str, dict[str, list[float]]]) -> None:
    def median(values: list[float]) -> str:
        return f"{statistics.median(values):>10.1f}" if values else f"{'n/a':>10}"

    print("\nAppend: CPU microseconds per event (median; server = this database's Postgres backends)")
    print(f"| {'case':<18} | {'server':>10} | {'client':>10} |")
    print(f"|{'-' * 20}|{'-' * 12}|{'-' * 12}|")
    for name, values in cpu.items():
        print(f"| {name:<18} | {median(values['server'])} | {median(values['client'])} |")


def print_table(title: str, rows: list[tuple[str, float, str, float]]) -> None:
    print(f"\n{title}")
    header = ("case", "events/s", "ceiling (same run)", "ceiling/s", "ratio")
    print(f"| {header[0]:<18} | {header[1]:>10} | {header[2]:<20} | {header[3]:>10} | {header[4]:>6} |")
    print(f"|{'-' * 20}|{'-' * 12}|{'-' * 22}|{'-' * 12}|{'-' * 8}|")
    for name, rate, ceiling_name, ceiling in rows:
        ratio = rate / ceiling
        print(f"| {name:<18} | {rate:>10,.0f} | {ceiling_name:<20} | {ceiling:>10,.0f} | {ratio:>6.0%} |")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=50_000, help="events per batched append run")
    parser.add_argument("--singles", type=int, default=2_000, help="events in the one-per-transaction runs")
    parser.add_argument("--replay-events", type=int, default=200_000, help="events in the replay table")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    server = args.database_url or Settings.from_env().database_url or "postgresql://root@127.0.0.1:5432/test"
    name = f"rollbook_bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(asyncpg_url(server))
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = asyncpg_url(server).rsplit("/", 1)[0] + "/" + name
    store: EventStore | None = None
    conn: asyncpg.Connection | None = None
    try:
        await upgrade_async(url)
        store = await EventStore.connect(url)
        conn = await asyncpg.connect(url)
        # The ceiling table: events' shape without its triggers (LIKE copies none). The hash columns are
        # filled only by the events_chain trigger (0004), so here they lose NOT NULL and stay NULL.
        await conn.execute("CREATE TABLE bench_copy (LIKE events INCLUDING ALL)")
        await conn.execute(
            "ALTER TABLE bench_copy ALTER COLUMN stream_hash DROP NOT NULL,"
            " ALTER COLUMN chain_hash DROP NOT NULL"
        )
        bench = Bench(store, conn)
        version = await conn.fetchval("SHOW server_version")
        print(
            f"Postgres {version}; {args.events:,} events per append run, {args.singles:,} single appends, "
            f"{args.replay_events:,} replayed, median of {args.rounds}"
        )
        events = build_events(max(args.events, args.singles, args.replay_events))
        # The pre-built events are a benchmark fixture: keep the cyclic GC from rescanning them over and over
        # (a full collection over them takes ~0.3 s and would land at random inside timed runs).
        gc.collect()
        gc.freeze()
        print(f"load average before: {load_average()}")
        cpu: dict[str, dict[str, list[float]]] = {}
        appends = await bench_append(bench, events[: args.events], args.singles, args.rounds, cpu)
        replay = await bench_replay(bench, events[: args.replay_events], args.rounds)
    finally:
        if conn is not None:
            await conn.close()
        if store is not None:
            await store.close()
        await admin.close()
        await drop_database_and_roles(server, name)

    ceiling = appends["copy-10000"]
    print_table(
        "Append (ratio to the COPY ceiling, copy-10000)",
        [
            (case, appends[case], "copy-10000", ceiling)
            for case in (
                "append-1",
                "append-100",
                "append-1000",
                "append_many-100",
                "append_many-1000",
                "import-10000",
            )
        ],
    )
    print_table(
        "Append (ratio to COPY with the same rows per transaction)",
        [(f"append-{n}", appends[f"append-{n}"], f"copy-{n}", appends[f"copy-{n}"]) for n in (1, 100, 1000)]
        + [
            (f"append_many-{n}", appends[f"append_many-{n}"], f"copy-{n}", appends[f"copy-{n}"])
            for n in (100, 1000)
        ],
    )
    print_cpu_table(cpu)
    print_table(
        "Replay: read everything in order + msgspec decode",
        [
            ("store.read_all", replay["store.read_all"], "cursor+decode", replay["cursor+decode"]),
            ("cursor+decode", replay["cursor+decode"], "cursor-nodecode", replay["cursor-nodecode"]),
        ],
    )
    print(f"\nload average after: {load_average()}")


if __name__ == "__main__":
    asyncio.run(main())
