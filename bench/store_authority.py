"""What the executor's store check costs per pod action (services/executor/authority.py).

    .venv/bin/python bench/store_authority.py [--actions N] [--rounds R] [--database-url URL]

Creates its own database (random name) on the server of --database-url / ROLLBOOK_DATABASE_URL (which must
be on this machine: server CPU is read from /proc/<pid>/stat of the backend), migrates it, stores N
in-place actions as the planner does (RoundPlanned, then markNotReady and updateInPlace per pod, on the
workload's actions stream) and drops it at the end.

Each round runs the executor's per-action query (``BEFORE_ACTING_SQL`` of services/infra/store.py, one per
action, as the executor sends it) over every stored updateInPlace twice: as before the check (no carried
payload: the event comparison is skipped) and with it (the payload the bus message carried, compared with the
stored one), the cases taking turns. It prints, per action, the medians of server CPU, client CPU (including
reading the payload out of the message) and wall time, the difference (what the check costs), and the ceiling:
how many checked actions per second one connection sustains, beside the in-place rate of bench/scale.py."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from bench.eventstore import _process_cpu, load_average
from services.executor.service import outcome_id
from services.infra.bus import _carried_decoder
from services.infra.database import asyncpg_url, upgrade_async
from services.infra.settings import Settings
from services.infra.store import BEFORE_ACTING_SQL, EventStore
from services.kinds.registry import CLONESET
from services.model.events import Envelope, PodActionRequested, RoundPlanned, encode, new_event
from services.model.streams import derived_id
from tests.plugins.database import drop_database_and_roles

# bench/scale.py's in-place figure on a quiet 2-core machine (docs/performance.md): pods per second, each
# pod one updateInPlace (and, with a grace period, a markNotReady).
INPLACE_PODS_PER_SECOND = 68.0


def planned_round(workload: str, pods: int) -> list[Envelope]:
    now = datetime.now(UTC)
    stream = CLONESET.decisions_stream("default", workload)
    round_id = derived_id("round", workload)
    events = [
        new_event(
            RoundPlanned(through={f"CloneSet/default/{workload}": 1}, now=now, input_sha256="0" * 64),
            stream=stream,
            stream_version=1,
            occurred_at=now,
            event_id=round_id,
            correlation_id="r1",
        )
    ]
    for index in range(pods):
        pod = f"{workload}-{index}"
        events.append(
            new_event(
                PodActionRequested(
                    action_id=f"{workload}-{index}-update",
                    action="updateInPlace",
                    namespace="default",
                    pod=pod,
                    rollout_id="r1",
                    revision=f"{workload}-7656fc4998",
                    details={
                        "patch": {"spec": {"containers": [{"name": "app", "image": "nginx:mainline"}]}},
                        "uid": str(uuid.uuid4()),
                        "resourceVersion": str(1000 + index),
                        "notReady": {
                            "type": "InPlaceUpdateReady",
                            "status": "False",
                            "reason": "StartInPlaceUpdate",
                        },
                        "revisionLabel": f"{workload}-7656fc4998",
                    },
                ),
                stream=stream,
                stream_version=len(events) + 1,
                occurred_at=now,
                causation_id=round_id,
                correlation_id="r1",
            )
        )
    return events


async def run(args: argparse.Namespace) -> None:
    base = asyncpg_url(args.database_url)
    name = f"rollbook_bench_authority_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(base)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = base.rsplit("/", 1)[0] + "/" + name
    try:
        await upgrade_async(url)
        store = await EventStore.connect(url)
        try:
            workloads = max(1, args.actions // 100)
            actions: list[tuple[Envelope, bytes]] = []
            for w in range(workloads):
                events = planned_round(f"web{w}", min(100, args.actions))
                await store.append(events, expected_version=0)
                actions += [(e, encode(e)) for e in events[1:]]
        finally:
            await store.close()
        conn = await asyncpg.connect(url)
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        statement = await conn.prepare(BEFORE_ACTING_SQL)
        print(f"{len(actions)} stored actions; load average {load_average()}")

        async def case(checked: bool) -> tuple[float, float, float]:
            server0, client0, wall0 = _process_cpu(pid) or 0.0, time.process_time(), time.perf_counter()
            for envelope, data in actions:
                request = envelope.payload
                assert isinstance(request, PodActionRequested)
                carried = bytes(_carried_decoder.decode(data).payload).decode() if checked else None
                row = await statement.fetchrow(
                    outcome_id(request.action_id),
                    envelope.stream,
                    envelope.causation_id,
                    envelope.stream_version,
                    request.pod,
                    envelope.event_id if checked else None,
                    envelope.correlation_id,
                    carried,
                )
                assert row is not None and row[1] is (True if checked else None), row
            wall = time.perf_counter() - wall0
            server = (_process_cpu(pid) or 0.0) - server0
            client = time.process_time() - client0
            n = len(actions)
            return server / n * 1e6, client / n * 1e6, wall / n * 1e6

        results: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
        await case(True)  # warm the caches and the plan
        for _ in range(args.rounds):
            for checked in (False, True):
                results[checked].append(await case(checked))
        await conn.close()
    finally:
        await admin.close()
        await drop_database_and_roles(args.database_url, name)

    def medians(checked: bool) -> tuple[float, float, float]:
        rows = results[checked]
        return tuple(statistics.median(r[i] for r in rows) for i in range(3))  # type: ignore[return-value]

    before, after = medians(False), medians(True)
    print("\nPer action, microseconds (median of the rounds): server CPU, client CPU, wall")
    print(f"  without the check  {before[0]:8.1f} {before[1]:8.1f} {before[2]:8.1f}")
    print(f"  with the check     {after[0]:8.1f} {after[1]:8.1f} {after[2]:8.1f}")
    added_cpu = (after[0] - before[0]) + (after[1] - before[1])
    cost = [a - b for a, b in zip(after, before, strict=True)]
    print(f"  the check costs    {cost[0]:8.1f} {cost[1]:8.1f} {cost[2]:8.1f}")
    ceiling = 1e6 / after[2]
    print(
        f"\nceiling: {ceiling:,.0f} checked actions/s on one connection (the executor keeps up to 16); "
        f"bench/scale.py in place: ~{INPLACE_PODS_PER_SECOND:.0f} pods/s"
    )
    share = added_cpu * 2 * INPLACE_PODS_PER_SECOND / 1e6  # up to 2 actions per pod
    print(
        f"added CPU at that rate: {share * 100:.2f}% of one core ({added_cpu:.1f} us per action, 2 per pod)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--actions", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database-url", default=Settings.from_env().database_url)
    args = parser.parse_args()
    if not args.database_url:
        parser.error("needs a Postgres on this machine: --database-url or ROLLBOOK_DATABASE_URL")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
