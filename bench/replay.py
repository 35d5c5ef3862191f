"""Replay and verify benchmark: a log of --events events (default 1,000,000) over many workloads, then
events/s of replay (read + decode + fold) and verify (fold + re-plan + compare). Prints figures; not a test.

    /work/venv/bin/python bench/replay.py [--events N] [--replicas R] [--database-url URL] [--keep]

The log is real: each workload's history is produced by the planner's own code path (WorkloadState fold,
plan_json, decisions_for, round_envelopes) against the cluster model of services/replay/cluster_model.py
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
import copy
import gc
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import asyncpg
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from services.domain.database import asyncpg_url, upgrade_async
from services.domain.events import (
    Envelope,
    ObjectObserved,
    PodActionRequested,
    PodActionSucceeded,
    RequeueDue,
    RequeueScheduled,
    new_event,
)
from services.domain.settings import Settings
from services.domain.store import EventStore
from services.domain.streams import actions_stream, decisions_stream, derived_id, observed_stream, workload_of
from services.planner.service import decide, decisions_for, round_envelopes
from services.planner.workload_state import WorkloadState, encode_input
from services.replay.cluster_model import ClusterModel
from services.replay.operations import cyclic_gc_paused, verify_all

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TIMINGS = {
    "createPod": {"effect": 0.2, "ready": 3.0},
    "updateInPlace": {"effect": 0.2, "ready": 2.0},
    "markNotReady": {"effect": 0.1},
    "markReady": {"effect": 0.1},
}


def base_cloneset(name: str, namespace: str, replicas: int, strategy: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": name, "namespace": namespace, "uid": "", "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "nginx:alpine"}]},
            },
            "updateStrategy": strategy,
        },
    }


class WorkloadSimulation:
    """One workload through the planner's code path and the cluster model: every event as recorded."""

    def __init__(self, namespace: str, name: str, replicas: int, start: datetime) -> None:
        self.namespace, self.name = namespace, name
        v1 = base_cloneset(name, namespace, replicas, {"type": "InPlaceIfPossible", "maxUnavailable": 1})
        v1["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}"))
        v2 = copy.deepcopy(v1)
        v2["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:mainline"
        v2["metadata"]["generation"] = 2
        self.model = ClusterModel(v1, t0=start, timings=TIMINGS, uid_prefix=v1["metadata"]["uid"])
        self.model.schedule_spec(30.0, v2)
        self.state = WorkloadState(namespace, name)
        self.events: list[Envelope] = []
        self.versions: dict[str, int] = {}
        self.emitted: dict[tuple[str, str], bytes] = {}  # (kind, name) -> the object as last observed
        self.resource_version = 0

    def emit(self, payload: Any, stream: str, *, at: datetime, **ids: Any) -> Envelope:
        version = self.versions.get(stream, 0) + 1
        self.versions[stream] = version
        envelope = new_event(payload, stream=stream, stream_version=version, occurred_at=at, **ids)
        self.events.append(envelope)
        self.state.fold(envelope)
        return envelope

    def observe(self) -> None:
        model, now = self.model, self.model.moment()
        current: dict[tuple[str, str], dict[str, Any]] = {("CloneSet", self.name): model.cloneset}
        current.update({("Pod", n): p for n, p in model.pods.items()})
        current.update({("PersistentVolumeClaim", n): p for n, p in model.pvcs.items()})
        for key in sorted(set(self.emitted) | set(current)):
            obj = current.get(key)
            before = self.emitted.get(key)
            if obj is not None and before is not None and msgspec.json.encode(obj) == before:
                continue
            self.resource_version += 1
            kind, name = key
            change: Literal["ADDED", "MODIFIED", "DELETED"] = (
                "DELETED" if obj is None else "ADDED" if before is None else "MODIFIED"
            )
            shown = copy.deepcopy(obj) if obj is not None else msgspec.json.decode(before or b"{}")
            shown.setdefault("metadata", {})["resourceVersion"] = str(self.resource_version)
            uid = str(shown["metadata"].get("uid", ""))
            self.emit(
                ObjectObserved(
                    kind=kind,
                    namespace=self.namespace,
                    name=name,
                    uid=uid,
                    resource_version=str(self.resource_version),
                    change=change,
                    object=shown,
                ),
                observed_stream(self.namespace, self.name),
                at=now,
                event_id=derived_id(uid, self.resource_version, change),
            )
            if obj is None:
                self.emitted.pop(key, None)
            else:
                self.emitted[key] = msgspec.json.encode(obj)

    def outcomes(self) -> None:
        for action_id in self.model.applied:
            self.emit(
                PodActionSucceeded(action_id=action_id),
                actions_stream(self.namespace, self.name),
                at=self.model.moment(),
                event_id=derived_id("outcome", action_id),
            )
        self.model.applied.clear()

    def plan_round(self) -> None:
        state = self.state
        if state.cloneset is None or state.now is None or state.pending():
            return
        data, digest = encode_input(state.plan_input())
        plan = decide(data)
        decisions = decisions_for(state, plan)
        if not decisions:
            return
        envelopes = round_envelopes(state, digest, plan, decisions)
        for envelope in envelopes:
            self.events.append(envelope)
            state.fold(envelope)
        self.versions[envelopes[0].stream] = envelopes[-1].stream_version
        requests = [e.payload for e in envelopes if isinstance(e.payload, PodActionRequested)]
        ids = [r.action_id for r in requests if r.action != "setPodsToDelete"]
        self.model.apply_plan({**plan, "requeueAfterSeconds": None}, ids)
        for envelope in envelopes:
            if isinstance(envelope.payload, RequeueScheduled):
                offset = (envelope.payload.due_at - self.model.t0).total_seconds()
                self.model._at(offset, "requeue", None)

    def fire_timers(self) -> None:
        now = self.model.moment()
        for scheduled, due in sorted(self.state.schedules.items(), key=lambda item: item[1]):
            if due <= now:
                self.emit(
                    RequeueDue(due_at=due, scheduled_by=uuid.UUID(scheduled)),
                    decisions_stream(self.namespace, self.name),
                    at=due,
                    event_id=derived_id("requeue-due", scheduled),
                )

    def run(self, limit: int = 2000) -> list[Envelope]:
        self.observe()
        self.plan_round()
        while len(self.events) < limit:
            what = self.model.step()
            if what is None:
                break
            self.observe()
            self.outcomes()
            if what == "requeue":
                self.fire_timers()
            self.plan_round()
        return self.events


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
    async for batch in store.read_all_batches(0, 5000):
        for stored in batch:
            envelope = stored.envelope
            state = states.get(envelope.stream)
            if state is None:
                key = workload_of(envelope.stream)
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

            started = time.perf_counter()
            with cyclic_gc_paused():  # as the replay and verify operations do
                count, seen = await replay(store)
            replayed = time.perf_counter() - started
            print(
                f"replay: {count:,} events, {seen:,} workloads in {replayed:.1f}s:"
                f" {count / replayed:,.0f} events/s (goal >= 100,000)"
            )

            started = time.perf_counter()
            reports = await verify_all(store)
            verified = time.perf_counter() - started
            total = sum(r.events for r in reports)
            rounds = sum(r.rounds for r in reports)
            dirty = [r for r in reports if not r.clean]
            print(
                f"verify: {total:,} events, {rounds:,} rounds, {len(reports):,} workloads in {verified:.1f}s:"
                f" {total / verified:,.0f} events/s (goal >= 20,000); divergences: {len(dirty)}"
            )
            for report in dirty[:3]:
                print("  " + (report.divergence.describe() if report.divergence else ""))
        finally:
            await store.close()
    finally:
        if args.keep:
            print(f"kept database {name}")
        else:
            admin = await asyncpg.connect(asyncpg_url(args.database_url))
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
