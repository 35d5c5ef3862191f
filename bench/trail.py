"""A trail that stays fast: the read commands at millions of events (issue 27, docs/performance.md).

    ROLLBOOK_DATABASE_URL=postgresql://... .venv/bin/python bench/trail.py [--events 10000000]
        [--samples 40] [--keep] [--reuse DATABASE] [--verify-processes 1,2] [--verify-only]

Seeds --events events into a fresh database on ROLLBOOK_DATABASE_URL's server: CloneSets of 3 to 200 pods
scaled out and rolled in place 2 to 4 times each, as the planner's code path records them
(bench/_trail_seed.py), 50 workloads at a time so their events interleave in the log. Rows go in by COPY
into `events` in batches (EventStore.import_events' columns: the chain trigger hashes each row), and a
signed checkpoint is taken, with the auditor's Checkpointer, every ROLLBOOK_CHECKPOINT_EVERY_EVENTS events,
as the auditor does.

Then times, over --samples different workloads and rollouts (warm server, p50 and p95), what the commands
run, in process, through their own functions and SQL: `rollbook history NS/NAME` (show_history, connect
included), the trail part of `rollbook get` (its pod actions, current rollout and step limit; the pods come
from the cluster), each audit view for one rollout (docs/sql.md), `rollbook replay ROLLOUT`,
`rollbook what-if ROLLOUT --set maxUnavailable=2`, the UI's /api/rollouts and /api/rollout over HTTP
(services/cli/ui.py's app), `rollbook audit checkpoint` after the auditor's usual number of new events (the
incremental work: the tree extended from its stored frontier, one signature), and a full
`rollbook audit verify` with each of --verify-processes (events/s, against reading the same columns the
same way without hashing: its ceiling; with more than one process, the log is read in ranges between
signed checkpoints at once, and so is the ceiling's). --verify-only skips the reads and the checkpoints.

--keep keeps the database (and its signing key beside it in the temp directory) for --reuse, which skips
seeding. Goals (issue 27): every read p95 <= 100 ms, full verify >= 100,000 events/s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import math
import multiprocessing
import os
import random
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

import asyncpg  # noqa: E402
import msgspec  # noqa: E402

from bench import _trail_seed as seed  # noqa: E402
from services.infra.database import asyncpg_url, create_database, upgrade_async  # noqa: E402
from services.infra.db_roles import Duty  # noqa: E402
from services.infra.settings import Settings  # noqa: E402
from services.infra.store import EventStore  # noqa: E402
from services.replay.audit import LogRange  # noqa: E402
from tests.plugins.database import drop_database_and_roles, with_database  # noqa: E402

GOAL_MS = 100.0
GOAL_VERIFY = 100_000.0
KEY_NAME = "bench.rollbook/log"
MIN_SAMPLES = 5
CONCURRENT = 50  # workloads whose events interleave
WAVE_SECONDS = 3600.0  # one wave of workloads per hour of trail

# The audit views for one rollout (docs/sql.md): by the rollout id ($1) and its key as docs/sql.md says, or
# by its workload ($1, $2).
ONE_ROLLOUT = "rollout_key = split_part($1, '#', 1) AND rollout_id = $1"
VIEWS: dict[str, tuple[str, str]] = {
    "view rollouts": ("rollout", f"SELECT * FROM rollouts WHERE {ONE_ROLLOUT}"),
    "view partition_steps": (
        "rollout",
        f"SELECT * FROM partition_steps WHERE {ONE_ROLLOUT} ORDER BY position",
    ),
    "view pod_actions": (
        "rollout",
        f"SELECT * FROM pod_actions WHERE {ONE_ROLLOUT} ORDER BY position",
    ),
    "view action_outcomes": (
        "rollout",
        f"SELECT * FROM action_outcomes WHERE {ONE_ROLLOUT} ORDER BY position",
    ),
    "view max_unavailable_exceeded": (
        "rollout",
        f"SELECT * FROM max_unavailable_exceeded WHERE {ONE_ROLLOUT}",
    ),
    "view actions_without_one_terminal": (
        "rollout",
        f"SELECT * FROM actions_without_one_terminal WHERE {ONE_ROLLOUT}",
    ),
    "view unavailability (the rollout's workload)": (
        "workload",
        "SELECT * FROM unavailability WHERE kind = 'CloneSet' AND namespace = $1 AND workload = $2"
        " ORDER BY position",
    ),
    "view revisions (the rollout's workload)": (
        "workload",
        "SELECT * FROM revisions WHERE kind = 'CloneSet' AND namespace = $1 AND workload = $2",
    ),
    "view hook_waits (the rollout's workload)": (
        "workload",
        "SELECT * FROM hook_waits WHERE namespace = $1 AND workload = $2",
    ),
}


def load_average() -> str:
    return f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)"


def settings_for(url: str, data_dir: Path) -> Settings:
    return Settings(database_url=url, data_dir=str(data_dir), audit_key_name=KEY_NAME)


class Seeder:
    """Workloads stamped in a worker process (bench/_trail_seed.py) while this one copies the last wave."""

    def __init__(
        self, pool: ProcessPoolExecutor, first: int, count: int, seed_value: int, after: float = 0.0
    ) -> None:
        """``count`` workloads numbered from ``first``, their times ``after`` seconds after the template's."""
        self.pool = pool
        self.workloads = [
            seed.Workload(first + w.number, w.template, f"team-{(first + w.number) // 20}",
                          f"svc-{first + w.number}", w.offset + after)
            for w in seed.plan_workloads(count, seed_value, concurrent=CONCURRENT, spacing=WAVE_SECONDS)
        ]  # fmt: skip

    async def waves(self) -> Any:
        loop = asyncio.get_running_loop()
        waves = [self.workloads[i : i + CONCURRENT] for i in range(0, len(self.workloads), CONCURRENT)]
        pending = loop.run_in_executor(self.pool, seed.wave_rows, waves[0]) if waves else None
        for index in range(len(waves)):
            assert pending is not None
            rows = await pending
            pending = (
                loop.run_in_executor(self.pool, seed.wave_rows, waves[index + 1])
                if index + 1 < len(waves)
                else None
            )
            yield rows
        if pending is not None:
            pending.cancel()


async def copy_rows(conn: asyncpg.Connection, rows: list[seed.Row], batch: int) -> None:
    for start in range(0, len(rows), batch):
        await conn.copy_records_to_table("events", records=rows[start : start + batch], columns=seed.COLUMNS)


async def copy_inputs(conn: asyncpg.Connection, inputs: list[seed.InputRow]) -> None:
    """The stored inputs of the rounds that started rollouts, as the planner stores them (``round_inputs``:
    what-if starts there)."""
    await conn.copy_records_to_table(
        "round_inputs",
        records=[(uuid.UUID(i), data) for i, data in inputs],
        columns=["round_event_id", "input"],
    )


async def seed_trail(url: str, data_dir: Path, events: int, batch: int, pool: ProcessPoolExecutor) -> None:
    from services.infra.transparency import checkpointer_for

    per_workload = await asyncio.get_running_loop().run_in_executor(pool, seed.events_per_workload)
    settings = settings_for(url, data_dir)
    store = await EventStore.connect(url)
    conn = await asyncpg.connect(asyncpg_url(url))
    try:
        checkpointer = checkpointer_for(store, settings, None)
        seeder = Seeder(pool, 0, math.ceil(events / per_workload * 1.3) + CONCURRENT, 7)
        started = time.perf_counter()
        stored, since, checkpoints, ceiling, analyzed = 0, 0, 0, None, 0
        async for rows, inputs in seeder.waves():
            rows = rows[: events - stored]
            copied = {row[0] for row in rows}
            await copy_inputs(conn, [i for i in inputs if i[0] in copied])
            if ceiling is None:
                ceiling = await copy_ceiling(conn, rows, batch)
                # The first rows alone, then statistics: the chain trigger's plans, made on an empty table,
                # would scan the whole table for each row of the first batch.
                await copy_rows(conn, rows[:1000], batch)
                await conn.execute("ANALYZE events")
                stored, since, analyzed, rows = 1000, 1000, 1000, rows[1000:]
            for start in range(0, len(rows), batch):
                chunk = rows[start : start + batch]
                await copy_rows(conn, chunk, batch)
                stored += len(chunk)
                since += len(chunk)
                if since >= settings.checkpoint_every_events:
                    await checkpointer.checkpoint()
                    checkpoints, since = checkpoints + 1, 0
                if stored >= 2 * analyzed:
                    # What autovacuum does to a young table that doubled: without fresh statistics the
                    # chain trigger's cached plans, made on an empty table, scan it for every row.
                    await conn.execute("ANALYZE events")
                    analyzed = stored
            elapsed = time.perf_counter() - started
            print(f"  {stored:,} events, {stored / elapsed:,.0f} events/s, load {load_average()}", flush=True)
            if stored >= events:
                break
        await checkpointer.checkpoint()
        seeded = time.perf_counter() - started
        print(
            f"seeded {stored:,} events ({checkpoints + 1} signed checkpoints) in {seeded:.0f} s:"
            f" {stored / seeded:,.0f} events/s; COPY without the events triggers and indexes, same rows"
            f" (ceiling): {ceiling or 0:,.0f} events/s, ratio {stored / seeded / (ceiling or 1):.2f}"
        )
        started = time.perf_counter()
        await conn.execute("VACUUM ANALYZE events")  # what autovacuum does to a table that grew
        print(f"VACUUM ANALYZE events: {time.perf_counter() - started:.0f} s")
    finally:
        await conn.close()
        await store.close()


async def copy_ceiling(conn: asyncpg.Connection, rows: list[seed.Row], batch: int) -> float:
    """The same rows into a table of events' columns with no trigger and no index: COPY's pace on this
    server."""
    await conn.execute("CREATE TEMP TABLE copy_ceiling (LIKE events INCLUDING DEFAULTS INCLUDING IDENTITY)")
    # The hash columns are the chain trigger's to fill: here they stay NULL.
    await conn.execute(
        "ALTER TABLE copy_ceiling ALTER COLUMN stream_hash DROP NOT NULL,"
        " ALTER COLUMN chain_hash DROP NOT NULL"
    )
    try:
        started = time.perf_counter()
        for start in range(0, len(rows), batch):
            await conn.copy_records_to_table(
                "copy_ceiling", records=rows[start : start + batch], columns=seed.COLUMNS
            )
        return len(rows) / (time.perf_counter() - started)
    finally:
        await conn.execute("DROP TABLE copy_ceiling")


async def workload_count(store: EventStore) -> int:
    """How many workloads the seed wrote (svc-0 .. svc-N-1): a binary search on their streams."""

    async def exists(n: int) -> bool:
        return await store.stream_version(f"CloneSet/team-{n // 20}/svc-{n}") > 0

    high = 1
    while await exists(high):
        high *= 2
    low = high // 2
    while low + 1 < high:
        middle = (low + high) // 2
        low, high = (middle, high) if await exists(middle) else (low, middle)
    return high


Sample = tuple[str, str, str]  # namespace, workload, rollout id


async def pick_samples(conn: asyncpg.Connection, store: EventStore, count: int) -> list[Sample]:
    from services.infra import audit_queries

    workloads = await workload_count(store)
    rng = random.Random(11)
    samples: list[Sample] = []
    while len(samples) < count:
        n = rng.randrange(workloads)
        namespace, name = f"team-{n // 20}", f"svc-{n}"
        rollouts = [r["rollout_id"] for r in await audit_queries.rollouts(conn, namespace, name)]
        numbered = [r for r in rollouts if not r.endswith("#0")]
        if numbered:
            samples.append((namespace, name, rng.choice(numbered)))
    return samples


Timings = dict[str, list[float]]


async def time_each(
    timings: Timings,
    label: str,
    samples: list[Sample],
    call: Callable[[Sample], Awaitable[object]],
    budget_ms: float,
) -> None:
    """``call`` on each sample (warm first), until ``budget_ms`` are spent (at least MIN_SAMPLES calls)."""
    await call(samples[0])  # warm: figures are for a warm server
    spent: list[float] = []
    for sample in samples:
        started = time.perf_counter()
        await call(sample)
        spent.append((time.perf_counter() - started) * 1000)
        if len(spent) >= MIN_SAMPLES and sum(spent) > budget_ms:
            break  # a read that slow needs no more samples to tell
    timings[label] = spent
    print(f"  {label}: p50 {statistics.median(spent):.1f} ms", flush=True)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


async def time_reads(url: str, samples_wanted: int, budget_ms: float) -> Timings:
    from aiohttp.test_utils import TestClient, TestServer

    from services.cli.history import show_history
    from services.cli.ui import make_app
    from services.cli.watch import Sources
    from services.infra import audit_queries
    from services.replay.operations import recorded_from_round_input, replay_lines, what_if_rollout
    from services.replay.whatif import parse_overrides

    store = await EventStore.connect(url)
    conn = await asyncpg.connect(asyncpg_url(url))
    pool = await asyncpg.create_pool(asyncpg_url(url), min_size=1, max_size=4)
    timings: Timings = {}
    try:
        samples = await pick_samples(conn, store, samples_wanted)
        settings = Settings(database_url=url)

        async def history(s: Sample) -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                assert await show_history(settings, s[0], s[1], None) == 0

        await time_each(timings, "history NS/NAME", samples, history, budget_ms)

        async def history_sql(s: Sample) -> None:
            await audit_queries.rollouts(conn, s[0], s[1])
            await audit_queries.pod_actions(conn, s[0], s[1])

        # Its share that grows with the trail; the rest is the connection and the table's rendering (rich),
        # which grow with the workload's actions only.
        await time_each(timings, "history NS/NAME: its SQL alone", samples, history_sql, budget_ms)

        async def get(s: Sample) -> None:
            actions, rollout_id, _ = await Sources(None, conn, "").trail(s[0], s[1])  # type: ignore[arg-type]
            assert actions and rollout_id is not None
            await audit_queries.latest_max_unavailable(conn, rollout_id)

        await time_each(timings, "get NS/NAME (the trail's part)", samples, get, budget_ms)
        for label, (by, sql) in VIEWS.items():

            async def view(s: Sample, sql: str = sql, by: str = by) -> None:
                await conn.fetch(sql, *((s[2],) if by == "rollout" else (s[0], s[1])))

            await time_each(timings, label, samples, view, budget_ms)
        await time_each(timings, "replay ROLLOUT", samples, lambda s: replay_lines(store, s[2]), budget_ms)
        overrides = parse_overrides(["maxUnavailable=2"])
        await time_each(
            timings, "what-if ROLLOUT --set maxUnavailable=2", samples,
            lambda s: what_if_rollout(store, s[2], overrides), budget_ms,
        )  # fmt: skip
        started = [await recorded_from_round_input(store, *s) is not None for s in samples]
        print(f"  what-if started at the round's stored input for {sum(started)} of {len(started)} samples")
        async with TestClient(TestServer(make_app(pool, store))) as client:

            async def api(path: str, params: dict[str, str] | None = None) -> None:
                response = await client.get(path, params=params, headers={"Host": "localhost"})
                assert response.status == 200, await response.text()
                await response.read()

            await time_each(
                timings, "UI GET /api/rollouts", samples, lambda _: api("/api/rollouts"), budget_ms
            )
            await time_each(
                timings,
                "UI GET /api/rollout?id=ROLLOUT",
                samples,
                lambda s: api("/api/rollout", {"id": s[2]}),
                budget_ms,
            )
    finally:
        await pool.close()
        await conn.close()
        await store.close()
    return timings


async def time_checkpoints(url: str, data_dir: Path, runs: int, pool: ProcessPoolExecutor) -> list[float]:
    """`rollbook audit checkpoint` after each ROLLBOOK_CHECKPOINT_EVERY_EVENTS new events."""
    from services.infra.transparency import checkpointer_for

    settings = settings_for(url, data_dir)
    store = await EventStore.connect(url)
    conn = await asyncpg.connect(asyncpg_url(url))
    spent: list[float] = []
    try:
        checkpointer = checkpointer_for(store, settings, None)
        await checkpointer.checkpoint()  # the tree in memory, as the running auditor holds it
        # Workloads no run wrote yet (each run appends more than their number of events), after the trail.
        head, last = await conn.fetchrow(
            "SELECT global_position, occurred_at FROM events ORDER BY global_position DESC LIMIT 1"
        )
        after = (last - seed.T0).total_seconds() + WAVE_SECONDS
        seeder = Seeder(pool, 1_000_000 + head, CONCURRENT * 2, 13, after)
        async for rows, _inputs in seeder.waves():
            for start in range(0, len(rows), settings.checkpoint_every_events):
                await copy_rows(conn, rows[start : start + settings.checkpoint_every_events], 10_000)
                began = time.perf_counter()
                taken = await checkpointer.checkpoint()
                spent.append((time.perf_counter() - began) * 1000)
                assert taken is not None
                if len(spent) >= runs:
                    break
            if len(spent) >= runs:
                break
    finally:
        await conn.close()
        await store.close()
    return spent


def read_range(url: str, duty: Duty, start: int, end: int) -> int:
    """The rows of one range read as `audit verify`'s range workers read them, without hashing."""

    async def run() -> int:
        store = await EventStore.connect(url, pool_size=1, duty=duty)
        try:
            return sum([len(batch) async for batch in store.read_chain_batches(start, 5000, end)])
        finally:
            await store.close()

    return asyncio.run(run())


async def read_ceiling(store: EventStore, ranges: list[LogRange]) -> float:
    """Events/s of reading the log without hashing: in one go, or the ranges at once in processes."""
    started = time.perf_counter()
    if not ranges:
        rows = sum([len(batch) async for batch in store.read_chain_batches(0, 5000)])
        return rows / (time.perf_counter() - started)
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(len(ranges), mp_context=multiprocessing.get_context("spawn")) as pool:
        counts = await asyncio.gather(
            *(
                loop.run_in_executor(
                    pool, read_range, store.database_url, store.duty, r.start_position, r.end_position
                )
                for r in ranges
            )
        )
    return sum(counts) / (time.perf_counter() - started)


class CpuMeter:
    """CPU seconds spent by this process and its children (the range workers, counted once they exit),
    and by the Postgres backends serving this database other than its own, read from /proc every 0.1 s
    (so a backend's last 0.1 s may be missed; nothing when the server runs on another machine)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.backends: dict[int, tuple[float, float]] = {}  # pid -> (first seen, last seen) CPU seconds
        self.python = 0.0

    @staticmethod
    def _rusage() -> float:
        spent = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            usage = resource.getrusage(who)
            spent += usage.ru_utime + usage.ru_stime
        return spent

    @staticmethod
    def _backend_cpu(pid: int) -> float | None:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime

    async def _sample(self, conn: asyncpg.Connection, stop: asyncio.Event, *, started: bool) -> None:
        """Each backend's CPU time until now; from 0 for one that started after the first sample."""
        while True:
            pids = await conn.fetch(
                "SELECT pid FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            for (pid,) in pids:
                spent = self._backend_cpu(pid)
                if spent is not None:
                    first, _ = self.backends.get(pid, (0.0 if started else spent, spent))
                    self.backends[pid] = (first, spent)
            if stop.is_set():
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)

    async def measure(self, work: Awaitable[Any]) -> Any:
        conn = await asyncpg.connect(asyncpg_url(self.url))
        stop = asyncio.Event()
        stop.set()
        await self._sample(conn, stop, started=False)
        stop = asyncio.Event()
        before = self._rusage()
        sampling = asyncio.create_task(self._sample(conn, stop, started=True))
        try:
            return await work
        finally:
            self.python = self._rusage() - before
            stop.set()
            await sampling
            await conn.close()

    @property
    def postgres(self) -> float:
        return sum(last - first for first, last in self.backends.values())


@dataclass
class VerifyTiming:
    processes: int
    ranges: int
    events: int
    rate: float
    ceiling: float
    load: str
    python_us: float  # CPU per event
    postgres_us: float


async def time_full_verify(url: str, data_dir: Path, processes: list[int]) -> list[VerifyTiming]:
    """A full `audit verify` with each number of processes, each after reading the same rows the same way
    (one reader, or the same ranges at once) without hashing: its ceiling."""
    from services.cli.replay import verify_trail
    from services.infra.transparency import trusted_verifiers
    from services.model.signed_note import SignedCheckpoint
    from services.replay.audit import Parallel, plan_ranges

    store = await EventStore.connect(url)
    timings = []
    try:
        trusted = trusted_verifiers(settings_for(url, data_dir))
        bodies = [SignedCheckpoint.open(note, trusted).body for note in await store.signed_notes()]
        for count in processes:
            settings = msgspec.structs.replace(settings_for(url, data_dir), audit_verify_processes=count)
            parallel = Parallel(store.database_url, store.duty, count)
            ranges = plan_ranges(bodies, parallel) if count > 1 else []
            load = load_average()
            ceiling = await read_ceiling(store, ranges)
            meter = CpuMeter(url)
            started = time.perf_counter()
            report = await meter.measure(
                verify_trail(store, settings, trusted, max_age=float("inf"), bus=False)
            )
            elapsed = time.perf_counter() - started
            if report.findings:
                raise SystemExit(f"audit verify found {[f.describe() for f in report.findings][:3]}")
            if report.ranges_joined != len(ranges):
                raise SystemExit(f"{report.ranges_joined} of {len(ranges)} ranges joined")
            per_event = 1e6 / max(report.rows, 1)
            timings.append(
                VerifyTiming(
                    count,
                    len(ranges),
                    report.rows,
                    report.rows / elapsed,
                    ceiling,
                    load,
                    meter.python * per_event,
                    meter.postgres * per_event,
                )
            )
    finally:
        await store.close()
    return timings


async def database_size(url: str) -> str:
    conn = await asyncpg.connect(asyncpg_url(url))
    try:
        total, events, count = await conn.fetchrow(
            "SELECT pg_database_size(current_database()), pg_total_relation_size('events'),"
            " (SELECT count(*) FROM events)"
        )
        return (
            f"{count:,} events; database {total / 2**30:.2f} GiB,"
            f" events with its indexes {events / 2**30:.2f} GiB"
        )
    finally:
        await conn.close()


def report(timings: Timings, checkpoints: list[float], verify: list[VerifyTiming]) -> None:
    if timings or checkpoints:
        print(f"\n| read | n | p50 ms | p95 ms | goal p95 <= {GOAL_MS:.0f} ms |")
        print("|---|---|---|---|---|")
    rows = list(timings.items())
    if checkpoints:
        rows.append(("audit checkpoint (new events since the last)", checkpoints))
    for label, spent in rows:
        verdict = "met" if p95(spent) <= GOAL_MS else "MISSED"
        print(f"| {label} | {len(spent)} | {statistics.median(spent):.1f} | {p95(spent):.1f} | {verdict} |")
    for v in verify:
        verdict = "met" if v.rate >= GOAL_VERIFY else "MISSED"
        how = "one process" if v.processes == 1 else f"{v.processes} processes, {max(v.ranges, 1)} range(s)"
        print(
            f"\nfull audit verify ({how}): {v.events:,} events at {v.rate:,.0f} events/s"
            f" (goal >= {GOAL_VERIFY:,.0f}: {verdict}); reading the same rows the same way without"
            f" hashing {v.ceiling:,.0f} events/s, ratio {v.rate / v.ceiling:.2f}; load before {v.load};"
            f" CPU per event: Python {v.python_us:.1f} µs, Postgres {v.postgres_us:.1f} µs (sampled)"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000, help="events to seed")
    parser.add_argument("--batch", type=int, default=10_000, help="rows per COPY")
    parser.add_argument("--samples", type=int, default=40, help="workloads/rollouts each read is timed on")
    parser.add_argument("--checkpoints", type=int, default=5, help="incremental checkpoints timed")
    parser.add_argument(
        "--budget",
        type=float,
        default=60.0,
        help="seconds a read is sampled for at most (at least 5 samples)",
    )
    parser.add_argument(
        "--no-verify", action="store_true", help="skip the full verify (it reads the whole log)"
    )
    parser.add_argument(
        "--verify-processes",
        default="1,2",
        help="the full verify's numbers of processes, comma-separated (1: one read in this process)",
    )
    parser.add_argument("--verify-only", action="store_true", help="time only the full verify")
    parser.add_argument("--keep", action="store_true", help="keep the database for --reuse")
    parser.add_argument("--reuse", metavar="DATABASE", help="a database --keep kept: skip seeding")
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    server = args.database_url or Settings.from_env().database_url or "postgresql://root@127.0.0.1:5432/test"
    name = args.reuse or f"rollbook_bench_trail_{uuid.uuid4().hex[:8]}"
    url = with_database(server, name)
    data_dir = Path(tempfile.gettempdir()) / f"{name}.audit"  # the signing key, kept with --keep
    print(f"database {name}; load average {load_average()}", flush=True)
    keep = args.keep or args.reuse is not None
    with ProcessPoolExecutor(1) as pool:
        try:
            if args.reuse is None:
                await create_database(server, name)
                await upgrade_async(url)
                data_dir.mkdir()
                await seed_trail(url, data_dir, args.events, args.batch, pool)
            elif not data_dir.is_dir():
                raise SystemExit(f"no signing key of {name} at {data_dir}: seed it again with --keep")
            print(await database_size(url), flush=True)
            timings = {} if args.verify_only else await time_reads(url, args.samples, args.budget * 1000)
            checkpoints = (
                await time_checkpoints(url, data_dir, args.checkpoints, pool)
                if args.checkpoints and not args.verify_only
                else []
            )
            processes = [int(n) for n in args.verify_processes.split(",")]
            verify = [] if args.no_verify else await time_full_verify(url, data_dir, processes)
            report(timings, checkpoints, verify)
            print(f"load average after: {load_average()}")
            if keep:
                print(f"kept: --reuse {name}")
        finally:
            if not keep:
                await drop_database_and_roles(server, name)
                for path in sorted(data_dir.glob("**/*"), reverse=True):
                    path.rmdir() if path.is_dir() else path.unlink()
                with contextlib.suppress(FileNotFoundError):
                    data_dir.rmdir()


if __name__ == "__main__":
    asyncio.run(main())
