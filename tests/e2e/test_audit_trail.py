"""The audit trail of a rollout, checked with SQL; two executors sharing the work."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import pytest_asyncio

from services.domain.bus import Bus
from services.domain.store import EventStore
from services.planner.replay import replay_workload
from services.simcluster import SimCluster, SimConfig, Timing
from tests.e2e.audit import (
    action_terminals,
    available_at_completion,
    created_uids,
    min_available_during_rollout,
    published_event_ids,
    stored_event_ids,
)
from tests.e2e.cluster import Cluster, image_of, is_ready, seed_cloneset, with_image
from tests.plugins.simcluster import MakeSimCluster
from tests.plugins.stack import Stack, wait_for

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
    """Every requested action has exactly one terminal event and was applied at most once; every event
    stored was published exactly once (by id) and vice versa."""

    async def all_settled() -> bool:
        rows = await action_terminals(database_url)
        return bool(rows) and all(r["terminals"] >= 1 for r in rows)

    # Actions retried after an API error may still be in flight when the pods already look done.
    await wait_for(all_settled, within=40, what="a terminal event for every requested action")
    terminals = await action_terminals(database_url)
    wrong = [(r["action"], r["action_id"], r["terminals"]) for r in terminals if r["terminals"] != 1]
    assert wrong == []
    assert [r["action_id"] for r in terminals if r["applied"] > 1] == []
    assert [r["action_id"] for r in await created_uids(database_url) if r["uids"] != 1] == []

    bus = await Bus.connect(stack.settings, name="rollbook-e2e-audit")
    try:

        async def relayed() -> bool:
            return set(await published_event_ids(bus)) == set(await stored_event_ids(database_url))

        await wait_for(relayed, within=20, what="every stored event published")
        published = await published_event_ids(bus)
        stored = await stored_event_ids(database_url)
        assert len(stored) == len(set(published)) == len(published)
        assert [i for i, n in Counter(published).items() if n > 1] == []
    finally:
        await bus.close()

    store = await EventStore.connect(database_url)
    try:
        report = await replay_workload(store, "default", NAME)
    finally:
        await store.close()
    assert report.rounds > 0 and report.decisions > 0
    assert report.divergences == [], "replaying the recorded rounds did not reproduce the decisions"


async def test_two_executors_in_place_rollout_audit_trail(stack: Stack, cluster: Cluster) -> None:
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

    await cluster.patch_cloneset(NAME, with_image(seed, "nginx:mainline"))
    status = await wait_for(lambda: all_on(cluster, "nginx:mainline"), within=90, what="rollout done")

    database_url = stack.settings.database_url
    revision = status["updateRevision"]
    await wait_for(lambda: _completed(database_url, revision), within=20, what="RolloutCompleted recorded")
    assert await min_available_during_rollout(database_url, "default", NAME, revision) >= 5 - 2
    # Complete means updated and back in service: never recorded while an updated pod is still restarting.
    assert await available_at_completion(database_url, "default", NAME, revision) == 5
    await assert_trail_consistent(stack, database_url)
    assert stack.dead() == []


async def _completed(database_url: str, revision: str) -> bool:
    from tests.e2e.audit import fetch

    rows = await fetch(
        database_url,
        "SELECT 1 FROM events WHERE type = 'RolloutCompleted' AND payload->>'revision' = $1",
        revision,
    )
    return bool(rows)
