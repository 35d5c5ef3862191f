"""The auditor's cost per event: the relay (store -> bus) and the audit of the bus (bus -> store), in-process.

    .venv/bin/python bench/auditor.py [--events 5000] [--database-url URL] [--nats-url URL]

A fresh database on the server of --database-url (default ROLLBOOK_DATABASE_URL) gets --events pod-action
events (~700 bytes of payload each), appended before anything runs; a scratch JetStream stream on
--nats-url (default ROLLBOOK_NATS_URL, else an embedded nats-server) takes the messages. Two phases:

1. live: the relay and the audit run together, as in the auditor, until the audit has settled every
   event the relay published.
2. backlog: the audit walks the same stream again from its start with no relay beside it (an auditor
   restarted behind the bus, or another replica's messages): every message is read.
3. trickle (--trickle events, on a database and stream of their own): the relay and the audit run while
   events are appended 5 at a time every 20 ms, as a rollout appends them; besides the CPU (which here
   includes the appends'), the time from an append's commit to the audit's settling of each event (mean
   and 95th percentile): the relay's wake-up is what sets it.

Each phase also prints the stream messages the audit read per event (a read is a request and its answer
on the bus; what the relay beside it published needs none).

Per phase: this process's CPU ms per event, the CPU ms per event of the Postgres backends serving this
database (read from /proc, so other users of the server do not count), and Postgres transactions per
event (pg_stat_database.xact_commit of this database). The load average is printed beside each figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

import asyncpg  # noqa: E402
import msgspec  # noqa: E402

from bench.eventstore import _process_cpu, build_events  # noqa: E402
from services.auditor.bus_loss import Sent  # noqa: E402
from services.auditor.service import Audit, KnownStored, Relay  # noqa: E402
from services.infra.bus import Bus  # noqa: E402
from services.infra.database import asyncpg_url, upgrade_async  # noqa: E402
from services.infra.embedded import resolved_settings  # noqa: E402
from services.infra.settings import Settings  # noqa: E402
from services.infra.store import EventStore  # noqa: E402
from services.model.events import Envelope  # noqa: E402
from tests.plugins.database import fresh_database  # noqa: E402


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}"


class DatabaseMeter:
    """CPU of this database's backends and its committed transactions, from a connection of its own."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def backend_cpu(self) -> dict[int, float]:
        rows = await self.conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return {int(r[0]): cpu for r in rows if (cpu := _process_cpu(int(r[0]))) is not None}

    async def commits(self) -> int:
        await self.conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(
            await self.conn.fetchval(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            )
        )


def no_extra() -> str:
    return ""


async def measure(
    name: str,
    meter: DatabaseMeter,
    events: int,
    work: asyncio.Future[Any],
    extra: Callable[[], str] = no_extra,
) -> None:
    db_before, commits_before = await meter.backend_cpu(), await meter.commits()
    cpu_before = time.process_time()
    started = time.perf_counter()
    await work
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    db_after = await meter.backend_cpu()
    db = sum(t - db_before.get(pid, 0.0) for pid, t in db_after.items())
    await asyncio.sleep(0.6)  # the statistics collector reports at most every 500 ms
    commits = await meter.commits() - commits_before
    print(
        f"  {name:<8} {events} events in {elapsed:.2f} s: auditor {cpu * 1000 / events:.3f} ms/event, "
        f"postgres {db * 1000 / events:.3f} ms/event, {commits / events:.2f} transactions/event{extra()}; "
        f"{load()}",
        flush=True,
    )


class TimedAudit(Audit):
    """The audit, noting when it settles each event."""

    def __init__(self, store: EventStore, bus: Bus, known: KnownStored) -> None:
        super().__init__(store, bus, known)
        self.settled_at: dict[uuid.UUID, float] = {}

    def settle_relayed(self, sent: Sent) -> None:
        self.settled_at[sent.event_id] = time.monotonic()
        super().settle_relayed(sent)

    async def check(
        self, envelope: Envelope, subject: str, seq: int, headers: Mapping[str, str] | None, data: bytes
    ) -> None:
        self.settled_at[envelope.event_id] = time.monotonic()
        await super().check(envelope, subject, seq, headers, data)


async def trickle(bus: Bus, store: EventStore, meter: DatabaseMeter, events: list[Envelope]) -> None:
    """Phase 3: appends 5 events every 20 ms while the relay and the audit run."""
    committed: dict[uuid.UUID, float] = {}
    audit = TimedAudit(store, bus, KnownStored())
    relay = Relay(store, bus, audit.known)
    stopping = asyncio.Event()
    tasks = [asyncio.create_task(audit.run(stopping)), asyncio.create_task(relay.run(stopping))]
    await relay.caught_up.wait()

    async def append_and_settle() -> None:
        for start in range(0, len(events), 5):
            chunk = events[start : start + 5]
            await store.append_many(chunk)
            now = time.monotonic()
            committed.update((e.event_id, now) for e in chunk)
            await asyncio.sleep(0.02)
        while audit.stats.walked < len(events):
            for task in tasks:
                if task.done():
                    task.result()  # the relay or the audit failed: say why
            await asyncio.sleep(0.01)

    def latency() -> str:
        ordered = sorted(audit.settled_at[e.event_id] - committed[e.event_id] for e in events)
        p95 = ordered[int(len(ordered) * 0.95)]
        return (
            f", store->audit {sum(ordered) / len(ordered) * 1000:.1f} ms mean, {p95 * 1000:.1f} ms p95"
            f"; audit reads/event {audit.stats.read / len(events):.2f}"
        )

    try:
        await measure("trickle", meter, len(events), asyncio.ensure_future(append_and_settle()), latency)
    finally:
        stopping.set()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run_until_settled(bus: Bus, store: EventStore, events: int, relay: Relay | None) -> Audit:
    audit = Audit(store, bus, relay.known if relay is not None else None)
    stopping = asyncio.Event()
    tasks = [asyncio.create_task(audit.run(stopping))]
    if relay is not None:
        tasks.append(asyncio.create_task(relay.run(stopping)))
    try:
        while audit.stats.walked < events:
            if any(t.done() for t in tasks):
                for t in tasks:
                    if t.done():
                        t.result()
            await asyncio.sleep(0.01)
    finally:
        stopping.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    if audit.stats.dead_lettered or audit.stats.quarantined:
        raise RuntimeError(f"the audit did not settle cleanly: {audit.stats}")
    return audit


def reads(run: asyncio.Future[Audit], events: int) -> str:
    return f"; audit reads/event {run.result().stats.read / events:.2f}"


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--trickle", type=int, default=1000, help="events of the trickle phase")
    parser.add_argument("--database-url", default="")
    parser.add_argument("--nats-url", default="")
    args = parser.parse_args()
    env = Settings.from_env()
    server = args.database_url or env.database_url or "postgresql://root@127.0.0.1:5432/test"
    suffix = uuid.uuid4().hex[:8]
    base = msgspec.structs.replace(
        env,
        database_url="",
        nats_url=args.nats_url or env.nats_url,
        stream_name=f"RBAUDITBENCH_{suffix}",
        subject_prefix=f"rbauditbench{suffix}",
    )
    async with (
        fresh_database(server, "rollbook_auditbench") as url,
        resolved_settings(base, migrate=False) as s,
    ):
        await upgrade_async(url)
        store = await EventStore.connect(url)
        bus = await Bus.connect(s, name="rollbook-auditor-bench")
        bus.bodies = store.read_event
        meter = DatabaseMeter(await asyncpg.connect(asyncpg_url(url)))
        try:
            await bus.ensure_stream()
            batch = build_events(args.events)
            for start in range(0, len(batch), 100):
                await store.append_many(batch[start : start + 100])
            print(f"auditor, {args.events} events of ~700 bytes payload; {load()}", flush=True)
            relay = Relay(store, bus, KnownStored())
            live = asyncio.ensure_future(run_until_settled(bus, store, args.events, relay))
            await measure("live", meter, args.events, live, lambda: reads(live, args.events))
            # Walked again from the stream's start: the bench's login may delete the audit's row.
            await meter.conn.execute("DELETE FROM audit_cursor")
            backlog = asyncio.ensure_future(run_until_settled(bus, store, args.events, None))
            await measure("backlog", meter, args.events, backlog, lambda: reads(backlog, args.events))
        finally:
            await meter.conn.close()
            try:
                await bus.js.delete_stream(bus.stream)
            finally:
                await bus.close()
                await store.close()
    if args.trickle:
        await trickle_phase(server, base, args.trickle)


async def trickle_phase(server: str, base: Settings, count: int) -> None:
    suffix = uuid.uuid4().hex[:8]
    settings = msgspec.structs.replace(
        base, stream_name=f"RBAUDITTRICKLE_{suffix}", subject_prefix=f"rbaudittrickle{suffix}"
    )
    async with (
        fresh_database(server, "rollbook_auditbench") as url,
        resolved_settings(settings, migrate=False) as s,
    ):
        await upgrade_async(url)
        store = await EventStore.connect(url)
        bus = await Bus.connect(s, name="rollbook-auditor-bench")
        meter = DatabaseMeter(await asyncpg.connect(asyncpg_url(url)))
        try:
            await bus.ensure_stream()
            await trickle(bus, store, meter, build_events(count))
        finally:
            await meter.conn.close()
            try:
                await bus.js.delete_stream(bus.stream)
            finally:
                await bus.close()
                await store.close()


if __name__ == "__main__":
    asyncio.run(main())
