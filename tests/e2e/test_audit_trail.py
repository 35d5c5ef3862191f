"""The audit trail of a rollout, checked with SQL; two executors sharing the work."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import nats.js.errors
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from services.infra.bus import Bus
from services.infra.store import EventStore
from services.replay.operations import verify_target
from services.simcluster import SimCluster, SimConfig, Timing
from tests.e2e.audit import (
    action_terminals,
    available_at_completion,
    created_uids,
    fetch,
    min_available_during_rollout,
    published_event_ids,
    stored_event_ids,
)
from tests.e2e.cluster import Cluster, image_of, is_ready, restart_count, seed_cloneset, with_image
from tests.plugins.simcluster import MakeSimCluster
from tests.plugins.stack import Stack, wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]


@pytest_asyncio.fixture(loop_scope="session")
async def simcluster(make_simcluster: MakeSimCluster) -> SimCluster:
    # Readiness lags a container (re)start, as on a real node: completion must wait for it.
    return await make_simcluster(SimConfig(timing=Timing(ready=0.4)))


NAME = "sample-data"


async def all_on(cluster: Cluster, image: str, count: int = 5) -> Any:
    pods = await cluster.pods(NAME)
    status = (await cluster.cloneset(NAME)).get("status") or {}
    if (
        len(pods) == count
        and all(is_ready(p) and image_of(p) == image for p in pods.values())
        and status.get("updatedReadyReplicas") == count
        and status.get("currentRevision") == status.get("updateRevision")
    ):
        return status
    return None


async def assert_trail_consistent(stack: Stack, database_url: str) -> None:
    """Every requested action has exactly one terminal event; every created pod has one uid per action; every
    event stored was published exactly once (by id) and vice versa; replay reproduces the decisions.

    The terminal event alone cannot show that an action was applied only once (its id is uuid5(action_id),
    so a second executor's report collapses into the first): see assert_applied_once."""

    async def all_settled() -> bool:
        rows = await action_terminals(database_url)
        return bool(rows) and all(r["terminals"] >= 1 for r in rows)

    # Actions retried after an API error may still be in flight when the pods already look done.
    await wait_for(all_settled, within=40, what="a terminal event for every requested action")
    terminals = await action_terminals(database_url)
    wrong = [(r["action"], r["action_id"], r["terminals"]) for r in terminals if r["terminals"] != 1]
    assert wrong == []
    assert [r["action_id"] for r in await created_uids(database_url) if r["uids"] != 1] == []

    bus = await Bus.connect(stack.settings, name="rollbook-e2e-audit")
    try:

        async def relayed() -> bool:
            try:
                published = await published_event_ids(bus)
            except nats.js.errors.ServiceUnavailableError:
                return False  # a stream whose leader node was just killed answers 503 until one is elected
            return set(published) == set(await stored_event_ids(database_url))

        await wait_for(relayed, within=20, what="every stored event published")
        published = await published_event_ids(bus)
        stored = await stored_event_ids(database_url)
        assert len(stored) == len(set(published)) == len(published)
        assert [i for i, n in Counter(published).items() if n > 1] == []
    finally:
        await bus.close()

    store = await EventStore.connect(database_url)
    try:
        report = await verify_target(store, f"default/{NAME}")
    finally:
        await store.close()
    assert report.rounds > 0 and report.decisions > 0
    assert report.divergence is None, "replaying the recorded rounds did not reproduce the decisions"


SUCCEEDED_BY_ACTION_SQL = """
SELECT r.payload->>'action' AS action, count(DISTINCT r.payload->>'action_id') AS actions
FROM events AS r
JOIN events AS t ON t.type = 'PodActionSucceeded' AND t.payload->>'action_id' = r.payload->>'action_id'
WHERE r.type = 'PodActionRequested'
GROUP BY 1
"""


def fresh_applications(metrics_text: str) -> Counter[str]:
    """rollbook_actions_applied_total{already_applied="false"} by action, from one executor's /metrics."""
    applied: Counter[str] = Counter()
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if (
                sample.name == "rollbook_actions_applied_total"
                and sample.labels["already_applied"] == "false"
            ):
                applied[sample.labels["action"]] += int(sample.value)
    return applied


async def assert_applied_once(stack: Stack, executors: list[str], database_url: str) -> None:
    """No action was carried out twice: across the executors (none restarted, so their counters cover the
    whole run), the applications that found no action id on the object (already_applied=false) are at most
    one per succeeded action, per action type. An executor repeating another's work counts one more; a
    redelivery that finds the action already done counts as already_applied=true. (Fewer is possible
    without a double application: a create whose response was lost is found on the retry, "already".)"""
    succeeded = Counter(
        {r["action"]: int(r["actions"]) for r in await fetch(database_url, SUCCEEDED_BY_ACTION_SQL)}
    )
    applied: Counter[str] = Counter()
    per_executor: dict[str, Counter[str]] = {}
    for name in executors:
        per_executor[name] = fresh_applications(await stack.get_text(name, "/metrics"))
        applied += per_executor[name]
    assert applied["updateInPlace"] > 0, f"no in-place update counted on /metrics: {per_executor}"
    twice = {
        action: applied[action] - succeeded[action]
        for action in applied
        if applied[action] > succeeded[action]
    }
    assert twice == {}, f"applied more often than succeeded: {twice}; per executor: {per_executor}"


async def test_two_executors_in_place_rollout_audit_trail(
    stack: Stack, cluster: Cluster, tmp_path: Path
) -> None:
    await stack.start("auditor", "watcher", "planner", "executor")
    await stack.start("executor", name="executor-2")
    strategy = {
        "type": "InPlaceIfPossible",
        "maxUnavailable": 2,
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 1},
    }
    seed = seed_cloneset("cloneset-sample-data.yaml", updateStrategy=strategy)
    await cluster.create_cloneset(seed)
    await wait_for(lambda: all_on(cluster, "nginx:alpine"), within=60, what="5 ready pods")
    pods_before = await cluster.pods(NAME)

    await cluster.patch_cloneset(NAME, with_image(seed, "nginx:mainline"))
    status = await wait_for(lambda: all_on(cluster, "nginx:mainline"), within=90, what="rollout done")
    # In place, once: the same pods, each restarted exactly once by its image update.
    after = await cluster.pods(NAME)
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == {
        n: p["metadata"]["uid"] for n, p in pods_before.items()
    }
    assert {n: restart_count(p) for n, p in after.items()} == {
        n: restart_count(p) + 1 for n, p in pods_before.items()
    }

    database_url = stack.settings.database_url
    revision = status["updateRevision"]
    await wait_for(lambda: _completed(database_url, revision), within=20, what="RolloutCompleted recorded")
    assert await min_available_during_rollout(database_url, "default", NAME, revision) >= 5 - 2
    # Complete means updated and back in service: never recorded while an updated pod is still restarting.
    assert await available_at_completion(database_url, "default", NAME, revision) == 5
    await assert_trail_consistent(stack, database_url)
    await assert_applied_once(stack, ["executor", "executor-2"], database_url)
    await assert_receipt_verifies_offline(stack, f"default/{NAME}@{revision}", tmp_path)
    assert stack.dead() == []


async def assert_receipt_verifies_offline(stack: Stack, rollout: str, directory: Path) -> None:
    """The auditor signed checkpoints with the key it created in the data dir: the trail verifies, and the
    rollout's receipt verifies with no server reachable, by rollbook and by docs/verify_receipt.py."""
    from services.infra.supervisor import settings_env

    def rollbook(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "services.cli.main", *args],
            cwd=REPO_ROOT, env={**os.environ, **settings_env(stack.settings), **env},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    signed = await asyncio.to_thread(rollbook, "audit", "checkpoint")  # covers the rollout's last events
    assert signed.returncode == 0, signed.stderr
    verified = await asyncio.to_thread(rollbook, "audit", "verify")
    assert verified.returncode == 0 and verified.stdout.startswith("OK: "), verified
    key = (await asyncio.to_thread(rollbook, "audit", "public-key")).stdout.strip()
    receipt = directory / "receipt.json"
    namespace_name, _, revision = rollout.partition("@")
    exported = await asyncio.to_thread(
        rollbook, "audit", "export", namespace_name, "--rollout", revision, "-o", str(receipt)
    )
    assert exported.returncode == 0, exported.stderr
    nowhere = {
        "ROLLBOOK_DATABASE_URL": "postgresql://nobody@127.0.0.1:9/none",
        "ROLLBOOK_NATS_URL": "nats://127.0.0.1:9",
    }
    checked = await asyncio.to_thread(
        rollbook, "audit", "verify-receipt", str(receipt), "--public-key", key, **nowhere
    )
    assert checked.returncode == 0 and checked.stdout.startswith("OK: "), checked
    script = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-I", str(REPO_ROOT / "docs" / "verify_receipt.py"), str(receipt), key],
        cwd="/", capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert script.returncode == 0 and f"of {rollout} in a log of" in script.stdout, script


async def _completed(database_url: str, revision: str) -> bool:
    rows = await fetch(
        database_url,
        "SELECT 1 FROM events WHERE type = 'RolloutCompleted' AND payload->>'revision' = $1",
        revision,
    )
    return bool(rows)
