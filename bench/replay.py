"""Replay and verify benchmark: a log of --events events (default 1,000,000) over many workloads, then
events/s of replay (read + decode + fold) and verify (fold + re-plan + compare). Prints figures; not a test.

    .venv/bin/python bench/replay.py [--events N] [--replicas R] [--database-url URL] [--keep]

The log is real: each workload's history is produced by the planner's own code path (WorkloadState fold,
plan, decisions_for, round_envelopes) against the cluster model (services/replay/simulation.py)
(create R pods, then an in-place image update with maxUnavailable 1), with observations and outcomes as
the watcher and executors would record them. Generated once per distinct workload shape is not enough
(names are in every input hash), so every workload is simulated; generation is reported separately. The
events are bulk-loaded with COPY (EventStore.import_events), hash chain trigger included.

It creates its own database (random name) on the server of --database-url / ROLLBOOK_DATABASE_URL
(default postgresql://root@127.0.0.1:5432/test), migrates it, and drops it at the end (--keep keeps it).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from services.infra.database import asyncpg_url, upgrade_async
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.cloneset.rules.workload_state import WorkloadState
from services.kinds.registry import CLONESET
from services.model.events import Envelope
from services.replay.audit import audit_log
from services.replay.operations import PAGE_SIZE, cyclic_gc_paused, verify_all
from services.replay.simulation import T0, WorkloadSimulation
from tests.plugins.database import drop_database_and_roles


def generate(total: int, replicas: int) -> tuple[list[Envelope], int]:
    """Whole workloads until ``total`` events; returns the events (workload by workload) and the count of
    workloads. Workloads start a second apart, so their histories interleave in time, not in the log."""
    events: list[Envelope] = []
    workloads = 0
    while len(events) < total:
        simulation = WorkloadSimulation(
            f"team-{workloads % 50:02d}", f"app-{workloads:06d}", replicas, T0 + timedelta(seconds=workloads)
        )
        events.extend(simulation.run())
        workloads += 1
    return events, workloads


async def replay(store: EventStore) -> tuple[int, int]:
    """Read + decode + fold every event into its workload's state, in global order."""
    states: dict[str, WorkloadState] = {}  # stream -> its workload's state (three streams share one)
    workloads: dict[tuple[str, str], WorkloadState] = {}
    count = 0
    async for batch in store.read_all_batches(0, PAGE_SIZE):
        for stored in batch:
            envelope = stored.envelope
            state = states.get(envelope.stream)
            if state is None:
                key = CLONESET.workload_of(envelope.stream)
                if key is None:
                    continue  # not a CloneSet's
                state = states[envelope.stream] = workloads.get(key) or WorkloadState(*key)
                workloads[key] = state
            state.fold(envelope)
        count += len(batch)
    return count, len(workloads)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument(
        "--database-url", default=Settings.from_env().database_url or "postgresql://root@127.0.0.1:5432/test"
    )
    parser.add_argument("--keep", action="store_true", help="keep the database (its name is printed)")
    args = parser.parse_args()

    started = time.perf_counter()
    with cyclic_gc_paused():
        events, workloads = generate(args.events, args.replicas)
    generated = time.perf_counter() - started
    print(
        f"generated {len(events):,} events, {workloads:,} workloads in {generated:.1f}s"
        f" ({len(events) / generated:,.0f} events/s, the planner's code path)"
    )

    name = f"rollbook_bench_replay_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(asyncpg_url(args.database_url))
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    url = args.database_url.rsplit("/", 1)[0] + "/" + name
    try:
        await upgrade_async(url)
        store = await EventStore.connect(url)
        try:
            started = time.perf_counter()
            for start in range(0, len(events), 20_000):
                await store.import_events(events[start : start + 20_000])
            loaded = time.perf_counter() - started
            print(
                f"loaded with COPY (hash chain trigger on) in {loaded:.1f}s"
                f" ({len(events) / loaded:,.0f} events/s)"
            )
            del events
            gc.collect()
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"load average before timing: {load} (2 cores, shared)")

            started, cpu = time.perf_counter(), time.process_time()
            with cyclic_gc_paused():  # as the replay and verify operations do
                count, seen = await replay(store)
            replayed, replay_cpu = time.perf_counter() - started, time.process_time() - cpu
            print(
                f"replay: {count:,} events, {seen:,} workloads in {replayed:.1f}s:"
                f" {count / replayed:,.0f} events/s (goal >= 100,000);"
                f" {count / replay_cpu:,.0f} per CPU-second of this process"
            )

            started, cpu = time.perf_counter(), time.process_time()
            reports = await verify_all(store)
            verified, verify_cpu = time.perf_counter() - started, time.process_time() - cpu
            total = sum(r.events for r in reports)
            rounds = sum(r.rounds for r in reports)
            dirty = [r for r in reports if not r.clean]
            print(
                f"verify: {total:,} events, {rounds:,} rounds, {len(reports):,} workloads in {verified:.1f}s:"
                f" {total / verified:,.0f} events/s (goal >= 20,000);"
                f" {total / verify_cpu:,.0f} per CPU-second of this process; divergences: {len(dirty)}"
            )
            for report in dirty[:3]:
                print("  " + (report.divergence.describe() if report.divergence else ""))

            started, cpu = time.perf_counter(), time.process_time()
            audit = await audit_log(store)
            audited, audit_cpu = time.perf_counter() - started, time.process_time() - cpu
            print(
                f"audit verify (hash chain): {audit.rows:,} events in {audited:.1f}s:"
                f" {audit.rows / audited:,.0f} events/s; {audit.rows / audit_cpu:,.0f} per CPU-second;"
                f" findings: {len(audit.findings)}"
            )
        finally:
            await store.close()
    finally:
        if args.keep:
            print(f"kept database {name}")
        else:
            await drop_database_and_roles(args.database_url, name)


if __name__ == "__main__":
    asyncio.run(main())
