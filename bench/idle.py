"""What an idle cluster adds to the trail: a steady CloneSet whose pods' readiness flaps, and the rows
rollbook stores for it. Goal: at most one row per real change of a pod's ready state.

    .venv/bin/python bench/idle.py [--replicas 1000] [--flap-share 0.01] [--minutes 10] [--down 10]
                                   [--progress-deadline 0] [--idle-seconds 30]
                                   [--database-url URL] [--nats-url URL]

The four services as child processes and a simcluster (zero-delay kubelet) in this process
(bench/_service_stack.py), real Postgres and NATS. One CloneSet of --replicas pods is created and left to
settle (status ready, then no row stored for --quiet seconds). Then, for --minutes, --flap-share of the
pods a minute (spread evenly over the minute) have their readiness probe fail for --down seconds and then
pass again (SimCluster.fail_readiness: containerStatuses[].ready and the Ready/ContainersReady conditions
change, as a kubelet reports a probe). A watch on the pods counts the real changes of a pod's ready state
(its Ready condition going False or True) the API server reported over the window.

Printed: the real changes, the rows appended to ``events`` over the window (until the trail is quiet
again) by type and by stream kind, rows per real change, rows and bytes per hour at this rate, and every
row a pod's ready change does not explain (a pod observation whose Ready did not change, a CloneSet status
write, planner or executor events), with load averages (this machine's cores are shared). Before the
flaps, the CPU each service spends a second while the cluster is steady and nothing happens, over
--idle-seconds (what a quiet cluster costs: polls, timers, Lease renewals).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

import aiohttp  # noqa: E402
import asyncpg  # noqa: E402
from kubernetes_asyncio import config  # noqa: E402

from bench._service_stack import service_stack  # noqa: E402
from services.infra.database import asyncpg_url  # noqa: E402
from services.simcluster import NodeConfig, SimCluster, SimConfig  # noqa: E402
from tests.e2e.cluster import Cluster, seed_cloneset  # noqa: E402
from tests.plugins.stack import Stack  # noqa: E402

NAME = "sample"
NAMESPACE = "default"

# Every row after a position, with the previous observation of the same object (for what changed).
ROWS_SQL = """
SELECT global_position, stream, type, pg_column_size(e.*) AS bytes, payload->>'kind' AS kind,
       payload->'object'->'status' AS status, previous
FROM (
    SELECT *, lag(payload->'object'->'status') OVER (
        PARTITION BY stream, payload->>'uid' ORDER BY global_position) AS previous
    FROM events WHERE type = 'ObjectObserved'
) AS e WHERE global_position > $1
UNION ALL
SELECT global_position, stream, type, pg_column_size(e.*), NULL, NULL, NULL
FROM events AS e WHERE global_position > $1 AND type <> 'ObjectObserved'
ORDER BY 1
"""


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}"


def pod_ready(status: dict[str, Any] | None) -> bool | None:
    for condition in (status or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return None


def stream_kind(stream: str) -> str:
    """``<Kind>/<ns>/<name>[/<suffix>]`` -> ``<Kind>[/<suffix>]``."""
    parts = stream.split("/", 3)
    return parts[0] + (f"/{parts[3]}" if len(parts) > 3 else "")


def changed_keys(status: dict[str, Any] | None, previous: dict[str, Any] | None) -> str:
    """The status fields that differ (top level), to say what an unexplained observation changed."""
    now, before = status or {}, previous or {}
    keys = sorted(k for k in set(now) | set(before) if now.get(k) != before.get(k))
    return ",".join(keys) or "nothing in status"


@dataclass
class ReadyWatch:
    """Counts the real changes of the pods' ready state the API server reports, from a resourceVersion on."""

    url: str
    resource_version: str
    ready: dict[str, bool]
    changes: int = 0
    by_pod: Counter[str] = field(default_factory=Counter)
    task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        params = {"watch": "1", "resourceVersion": self.resource_version, "allowWatchBookmarks": "true"}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"{self.url}/api/v1/namespaces/{NAMESPACE}/pods", params=params) as response,
        ):
            response.raise_for_status()
            async for line in response.content:
                event = json.loads(line)
                if event["type"] not in ("ADDED", "MODIFIED", "DELETED"):
                    continue
                pod = event["object"]
                name = pod["metadata"]["name"]
                now = pod_ready(pod.get("status")) if event["type"] != "DELETED" else None
                if now is not None and name in self.ready and self.ready[name] != now:
                    self.changes += 1
                    self.by_pod[name] += 1
                if now is None:
                    self.ready.pop(name, None)
                else:
                    self.ready[name] = now


async def trail_position(database_url: str) -> int:
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        return int(await connection.fetchval("SELECT coalesce(max(global_position), 0) FROM events"))
    finally:
        await connection.close()


async def until_quiet(database_url: str, quiet: float, within: float) -> int:
    """Wait until no row was stored for ``quiet`` seconds; the last position."""
    deadline = time.monotonic() + within
    position, since = await trail_position(database_url), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            raise SystemExit(f"the trail did not go quiet within {within:.0f} s (position {position})")
        await asyncio.sleep(0.25)
        now = await trail_position(database_url)
        if now != position:
            position, since = now, time.monotonic()
    return position


async def flap(sim: SimCluster, pods: list[str], args: argparse.Namespace) -> int:
    """--flap-share of ``pods`` a minute for --minutes, evenly spread: each one's readiness fails for
    --down seconds then passes again. The flaps made (each is two changes of the ready state)."""
    rng = random.Random(args.seed)
    total = max(1, round(args.flap_share * len(pods) * args.minutes))
    interval = 60.0 * args.minutes / total
    recoveries: list[asyncio.Task[None]] = []

    async def recover(name: str) -> None:
        await asyncio.sleep(args.down)
        sim.fail_readiness(NAMESPACE, name, failing=False)

    started = time.monotonic()
    down: set[str] = set()
    for index in range(total):
        await asyncio.sleep(max(0.0, started + index * interval - time.monotonic()))
        name = rng.choice([p for p in pods if p not in down])
        sim.fail_readiness(NAMESPACE, name)
        down.add(name)
        task = asyncio.create_task(recover(name))
        task.add_done_callback(lambda _, n=name: down.discard(n))  # type: ignore[misc]
        recoveries.append(task)
    await asyncio.sleep(max(0.0, started + total * interval - time.monotonic()))
    await asyncio.gather(*recoveries)
    return total


async def main(args: argparse.Namespace) -> None:
    nodes = max(3, math.ceil(args.replicas / 100))
    max_pods = max(110, math.ceil(1.5 * args.replicas / nodes))
    sim_config = SimConfig(nodes=tuple(NodeConfig(f"sim-node-{i}", max_pods=max_pods) for i in range(nodes)))
    async with service_stack(args.database_url, args.nats_url, sim_config) as running:
        stack, sim, database_url = running.stack, running.sim, running.database_url
        await stack.start("auditor", "watcher", "planner", "executor", ready_timeout=300)
        api = await config.new_client_from_config(config_file=str(sim.kubeconfig_path))
        async with api:
            cluster = Cluster(api)
            print(f"one CloneSet of {args.replicas} pods on {nodes} nodes; {load()}", flush=True)
            started = time.perf_counter()
            spec: dict[str, Any] = {"replicas": args.replicas}
            if args.progress_deadline:
                spec["progressDeadlineSeconds"] = args.progress_deadline
            await cluster.create_cloneset(seed_cloneset("cloneset-sample.yaml", **spec))
            while True:
                status = (await cluster.cloneset(NAME)).get("status") or {}
                if status.get("readyReplicas") == args.replicas == status.get("updatedReadyReplicas"):
                    break
                if time.perf_counter() - started > args.timeout:
                    raise SystemExit(f"not ready within {args.timeout} s: {status}")
                await asyncio.sleep(0.5)
            start = await until_quiet(database_url, args.quiet, args.timeout)
            print(f"  steady after {time.perf_counter() - started:.1f} s, trail at {start}; {load()}")
            if args.idle_seconds > 0:
                print("  " + await idle_cpu(stack, args.idle_seconds), flush=True)
                start = await until_quiet(database_url, args.quiet, args.timeout)

            pods = await cluster.pods(NAME)
            listing: Any = await cluster.core.list_namespaced_pod(NAMESPACE, _preload_content=False)
            resource_version = json.loads(await listing.read())["metadata"]["resourceVersion"]
            ready = {name: bool(pod_ready(pod.get("status"))) for name, pod in pods.items()}
            watch = ReadyWatch(sim.url, resource_version, ready)
            watch.task = asyncio.create_task(watch.run())
            window_started = time.perf_counter()
            flaps = await flap(sim, sorted(pods), args)
            end = await until_quiet(database_url, args.quiet, args.timeout)
            window = time.perf_counter() - window_started
            watch.task.cancel()
            await asyncio.gather(watch.task, return_exceptions=True)
            connection = await asyncpg.connect(asyncpg_url(database_url))
            try:
                rows = await connection.fetch(ROWS_SQL, start)
            finally:
                await connection.close()
    print(
        f"  idle window {window:.1f} s (until the trail was quiet again, position {end}): {flaps} readiness "
        f"flaps made ({2 * flaps} ready changes asked); {load()}"
    )
    report(watch, rows, window)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far (Linux /proc), 0 when it is gone."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


async def idle_cpu(stack: Stack, seconds: float) -> str:
    """CPU each service spends a second while nothing happens (the CloneSet steady, nothing flapped)."""
    pids = {name: child.process.pid for name, child in stack.children.items()}
    before, started = {name: cpu_seconds(pid) for name, pid in pids.items()}, time.perf_counter()
    await asyncio.sleep(seconds)
    elapsed = time.perf_counter() - started
    spent = {name: (cpu_seconds(pid) - before[name]) * 1000 / elapsed for name, pid in pids.items()}
    each = ", ".join(f"{name} {ms:.1f}" for name, ms in sorted(spent.items(), key=lambda item: -item[1]))
    return f"idle CPU over {elapsed:.0f} s, ms a second: {sum(spent.values()):.1f} ({each}); {load()}"


def explain(row: asyncpg.Record) -> str:
    """Why a row was stored: a pod's ready change, or what else."""
    if row["type"] != "ObjectObserved":
        return row["type"]
    status = json.loads(row["status"]) if row["status"] else None
    previous = json.loads(row["previous"]) if row["previous"] else None
    if row["kind"] == "Pod":
        if pod_ready(status) != pod_ready(previous):
            return "Pod observed: its ready state changed"
        return f"Pod observed, ready unchanged (changed: {changed_keys(status, previous)})"
    return f"{row['kind']} observed (changed: {changed_keys(status, previous)})"


def report(watch: ReadyWatch, rows: list[asyncpg.Record], window: float) -> None:
    changes = watch.changes
    total = len(rows)
    size = sum(int(r["bytes"]) for r in rows)
    hours = window / 3600
    print(f"  real changes of a pod's ready state (pod watch): {changes} on {len(watch.by_pod)} pods")
    print(f"  rows appended: {total}, {size / 1024:.1f} KiB (row bytes as stored, before indexes and WAL)")
    by_stream = Counter(f"{r['type']} in {stream_kind(r['stream'])}" for r in rows)
    print("  by type and stream: " + ", ".join(f"{k} {n}" for k, n in by_stream.most_common()))
    print(f"  rows per real change: {total / max(changes, 1):.2f}  goal <= 1")
    print(
        f"  rows per hour at this rate: {total / hours:,.0f}; bytes per hour: {size / hours / 1024:,.0f} KiB"
    )
    reasons = Counter(explain(r) for r in rows)
    explained = reasons.pop("Pod observed: its ready state changed", 0)
    print(f"  rows a pod's ready change explains: {explained}")
    print(
        f"  rows it does not: {sum(reasons.values())}"
        + "".join(f"\n    {n:6d}  {reason}" for reason, n in reasons.most_common())
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--flap-share", type=float, default=0.01, help="share of the pods flapped a minute")
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the idle window")
    parser.add_argument("--down", type=float, default=10.0, help="seconds a flapped pod stays not ready")
    parser.add_argument(
        "--quiet", type=float, default=5.0, help="seconds without a row that count as settled"
    )
    parser.add_argument(
        "--progress-deadline", type=int, default=0, help="spec.progressDeadlineSeconds (0: unset)"
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=30.0,
        help="before the flaps: seconds over which each service's idle CPU is measured (0: skip)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to settle, before and after")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("ROLLBOOK_DATABASE_URL", "postgresql://root@127.0.0.1:5432/test"),
    )
    parser.add_argument("--nats-url", default=os.environ.get("ROLLBOOK_NATS_URL", "nats://127.0.0.1:4222"))
    asyncio.run(main(parser.parse_args()))
