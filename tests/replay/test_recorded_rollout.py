"""A real rollout recorded end to end by the four services (scale 0 -> 5, a partitioned in-place update,
pod actions failing with 422 and retried), then replayed, verified and re-planned from the event store
alone, with the services stopped."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest

from services.infra.database import asyncpg_url
from services.infra.store import EventStore
from services.infra.supervisor import settings_env
from services.kinds.cloneset.rules.model import Plan, PlanInput
from services.kinds.cloneset.rules.plan import plan
from services.kinds.cloneset.rules.status import ACTION_CLASSES, FAILURE_CONDITIONS, condition_time
from services.model.events import PartitionStepPlanned, PodActionFailed, PodActionRequested, StatusPlanned
from services.replay.operations import replay_at, verify_all, verify_target, what_if_rollout
from services.replay.reads import workload_events
from services.simcluster import SimCluster
from services.simcluster.faults import FaultConfig
from tests.e2e.cluster import Cluster, image_of, is_ready, seed_cloneset, with_image
from tests.plugins.stack import REPO_ROOT, Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

NAME = "sample-data"
WORKLOAD = f"default/{NAME}"
_raw = msgspec.json.Decoder(dict[str, Any])


def decide_ignoring_max_unavailable(plan_input: PlanInput) -> Plan:
    """The planner with one rule changed on purpose: maxUnavailable is taken as 100%."""
    cloneset = copy.deepcopy(plan_input.clone_set)  # the input holds the folded objects: not ours to edit
    cloneset["spec"].setdefault("updateStrategy", {})["maxUnavailable"] = "100%"
    return plan(msgspec.structs.replace(plan_input, clone_set=cloneset))


async def updated(cluster: Cluster, image: str, count: int) -> Any:
    pods = await cluster.pods(NAME)
    status = (await cluster.cloneset(NAME)).get("status") or {}
    if len(pods) == 5 and all(is_ready(p) for p in pods.values()) and status.get("updatedReplicas") == count:
        if sum(image_of(p) == image for p in pods.values()) == count and status.get("readyReplicas") == 5:
            return pods
    return None


async def log_dump(database_url: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(asyncpg_url(database_url))
    try:
        rows = await conn.fetch(
            "SELECT global_position, event_id, stream, stream_version, type, schema_version, occurred_at,"
            " recorded_at, causation_id, correlation_id, payload::text, stream_hash, chain_hash"
            " FROM events ORDER BY global_position"
        )
    finally:
        await conn.close()
    return [tuple(r) for r in rows]


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **settings_env(stack.settings)}
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_record_replay_verify_and_what_if(
    stack: Stack, cluster: Cluster, simcluster: SimCluster, tmp_path: Path
) -> None:
    # --- record: scale 0 -> 5, then a partitioned in-place update whose first pod actions fail --------
    await stack.start("auditor", "watcher", "planner", "executor")
    strategy = {
        "type": "InPlaceIfPossible",
        "partition": 2,
        "maxUnavailable": "20%",
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 1},
    }
    seed = seed_cloneset("cloneset-sample-data.yaml", updateStrategy=strategy)
    await cluster.create_cloneset(seed)
    await wait_for(lambda: updated(cluster, "nginx:alpine", 5), within=60, what="5 ready pods")

    database_url = stack.settings.database_url
    store = await EventStore.connect(database_url)
    try:
        await stack.stop("executor")
        await cluster.patch_cloneset(NAME, with_image(seed, "nginx:mainline"))
        simcluster.faults.configure(FaultConfig(write_error_rate=1.0, write_error_codes=(422,)))
        try:
            await stack.start("executor")

            async def failed_action() -> bool:
                events = await workload_events(store, "default", NAME)
                return any(isinstance(e.envelope.payload, PodActionFailed) for e in events)

            await wait_for(failed_action, within=30, what="a pod action failed by the API")
        finally:
            simcluster.faults.configure(FaultConfig())
        await wait_for(lambda: updated(cluster, "nginx:mainline", 3), within=60, what="3 of 5 updated")
        await cluster.patch_cloneset(NAME, {"spec": {"updateStrategy": {"partition": 0}}})
        final_pods = await wait_for(
            lambda: updated(cluster, "nginx:mainline", 5), within=60, what="5 updated"
        )
        revision = (await cluster.cloneset(NAME))["status"]["updateRevision"]
        rollout = f"{WORKLOAD}@{revision}#1"

        async def completed() -> bool:
            events = await workload_events(store, "default", NAME)
            return any(
                e.envelope.type == "RolloutCompleted" and e.envelope.correlation_id == rollout for e in events
            )

        await wait_for(completed, within=30, what="RolloutCompleted recorded")

        async def failures_cleared() -> bool:
            conditions = ((await cluster.cloneset(NAME)).get("status") or {}).get("conditions") or []
            mine = [c for c in conditions if c["type"] in FAILURE_CONDITIONS]
            return bool(mine) and all(c["status"] == "False" for c in mine)

        await wait_for(failures_cleared, within=30, what="FailedScale/FailedUpdate False on the CloneSet")
        await stack.stop_all()  # everything below reads the event store alone

        stored = await workload_events(store, "default", NAME)
        events = [e.envelope for e in stored]
        failed = {e.payload.action_id for e in events if isinstance(e.payload, PodActionFailed)}
        requests = {
            e.payload.action_id: e.payload for e in events if isinstance(e.payload, PodActionRequested)
        }
        assert failed and all(requests[a].pod for a in failed)
        # The failed action was tried again: a later request for the same pod and action kind succeeded.
        retried = {(requests[a].action, requests[a].pod) for a in failed}
        assert any((r.action, r.pod) in retried and a not in failed for a, r in requests.items()), (
            "a failed pod action was never retried"
        )

        # --- the CloneSet's status reported the failure, then its retry succeeding ---------------------
        kinds = {ACTION_CLASSES[requests[a].action] for a in failed if requests[a].action in ACTION_CLASSES}
        assert kinds
        failed_at = {condition_time(e.occurred_at) for e in events if isinstance(e.payload, PodActionFailed)}
        planned = [e.payload.status for e in events if isinstance(e.payload, StatusPlanned)]
        for kind in kinds:
            shown = [c for status in planned for c in status.get("conditions") or [] if c["type"] == kind]
            failing = [c for c in shown if c["status"] == "True"]
            assert failing, f"no planned status carried {kind}: {shown}"
            assert all("HTTP 422" in c["message"] for c in failing), failing
            assert {c["lastTransitionTime"] for c in failing} <= failed_at
            assert shown[-1]["status"] == "False", f"{kind} never cleared after the retry: {shown[-1]}"
        written = (await cluster.cloneset(NAME))["status"].get("conditions") or []
        assert {c["type"]: c["status"] for c in written if c["type"] in kinds} == dict.fromkeys(
            kinds, "False"
        )

        # --- replay reproduces the state the cluster reached -------------------------------------------
        summary, _ = await replay_at(store, WORKLOAD)
        assert {n: (p["uid"], p["images"], p["ready"]) for n, p in summary["pods"].items()} == {
            n: (p["metadata"]["uid"], [c["image"] for c in p["spec"]["containers"]], True)
            for n, p in final_pods.items()
        }
        assert summary["updateRevision"] == revision and summary["actions"]["pending"] == []

        # --- verify is clean, for the workload, the rollout and the whole log --------------------------
        report = await verify_target(store, WORKLOAD)
        assert report.clean, report.divergence and report.divergence.describe()
        assert report.rounds > 5 and report.decisions > report.rounds
        assert (await verify_target(store, rollout)).clean
        assert all(r.clean for r in await verify_all(store))
        done = cli(stack, "verify", "--all")
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"OK {WORKLOAD}" in done.stdout

        # --- a changed rule diverges at the first decision it changes ----------------------------------
        changed = await verify_target(store, WORKLOAD, decide_ignoring_max_unavailable)
        first_step = next(
            e
            for e in events
            if isinstance(e.payload, PartitionStepPlanned) and e.payload.rollout_id == rollout
        )
        divergence = changed.divergence
        assert divergence is not None
        assert (divergence.event_id, divergence.field) == (
            str(first_step.event_id),
            "payload.max_unavailable",
        )
        assert (divergence.recorded, divergence.replayed) == (1, 5)
        diverged = cli(stack, "verify", WORKLOAD, "--decide", f"{__name__}:decide_ignoring_max_unavailable")
        assert diverged.returncode == 1
        assert str(first_step.event_id) in diverged.stdout and "payload.max_unavailable" in diverged.stdout
        as_json = cli(
            stack, "verify", "--all", "--json", "--decide", f"{__name__}:decide_ignoring_max_unavailable"
        )
        assert as_json.returncode == 1
        (reported,) = msgspec.json.decode(as_json.stdout)
        assert reported["divergence"]["event_id"] == str(first_step.event_id)

        # --- what-if: partition 0, maxUnavailable 100% --------------------------------------------------
        before = await log_dump(database_url)
        result = await what_if_rollout(store, rollout, {"partition": 0, "maxUnavailable": "100%"})
        assert result.replanned.completed
        assert result.replanned.steps < result.recorded.steps, (result.recorded, result.replanned)
        assert result.replanned.duration_seconds < result.recorded.duration_seconds
        assert result.replanned.max_unavailable > result.recorded.max_unavailable
        shown = cli(
            stack, "what-if", rollout, "--set", "updateStrategy.partition=0", "--set", "maxUnavailable=100%"
        )
        assert shown.returncode == 0, shown.stderr
        assert "steps" in shown.stdout and "duration" in shown.stdout
        assert await log_dump(database_url) == before, "a what-if changed the recorded events"

        # --- and the log itself is intact --------------------------------------------------------------
        audit = cli(stack, "audit", "verify", "--no-bus")
        assert audit.returncode == 0, audit.stdout + audit.stderr
        replay = cli(stack, "replay", rollout)
        assert replay.returncode == 0 and "PodActionFailed" in replay.stdout
        records = [
            msgspec.json.decode(line) for line in cli(stack, "replay", rollout, "--json").stdout.splitlines()
        ]
        assert len(records) == len(replay.stdout.splitlines())
        assert records[-1]["state"]["pods"] == summary["pods"]
        # Time travel: the state right after the first failure shows it, and no update applied yet.
        first_failure = next(e for e in stored if isinstance(e.envelope.payload, PodActionFailed))
        failure = first_failure.envelope.payload
        assert isinstance(failure, PodActionFailed)
        at = cli(stack, "replay", WORKLOAD, "--position", str(first_failure.global_position))
        assert at.returncode == 0, at.stderr
        then = msgspec.json.decode(at.stdout)
        assert then["atPosition"] == first_failure.global_position
        assert then["state"]["actions"]["failed"] == [failure.action_id]
        at_time = cli(stack, "replay", WORKLOAD, "--at", first_failure.recorded_at.isoformat())
        assert msgspec.json.decode(at_time.stdout)["atPosition"] >= first_failure.global_position
    finally:
        await store.close()
