"""Crash every service with SIGKILL in the middle of a rollout, restart it, and the rollout still
completes with nothing applied twice and nothing lost between Postgres and the bus."""

from __future__ import annotations

import pytest

from tests.e2e.audit import fetch
from tests.e2e.cluster import Cluster, restart_count, seed_cloneset, with_image
from tests.e2e.test_audit_trail import NAME, all_on, assert_trail_consistent
from tests.plugins.stack import Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]


async def outcomes(database_url: str) -> int:
    rows = await fetch(
        database_url,
        "SELECT count(*) FROM events WHERE type LIKE 'PodAction%' AND type <> 'PodActionRequested'",
    )
    return int(rows[0][0])


async def test_sigkill_each_service_mid_rollout(stack: Stack, cluster: Cluster) -> None:
    services = ("auditor", "watcher", "planner", "executor")
    await stack.start(*services)
    strategy = {
        "type": "InPlaceIfPossible",
        "maxUnavailable": 1,
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 1},
    }
    seed = seed_cloneset("cloneset-sample-data.yaml", updateStrategy=strategy)
    await cluster.create_cloneset(seed)
    await wait_for(lambda: all_on(cluster, "nginx:alpine"), within=60, what="5 ready pods")
    pods_before = await cluster.pods(NAME)

    database_url = stack.settings.database_url
    await cluster.patch_cloneset(NAME, with_image(seed, "nginx:mainline"))
    for service in ("executor", "planner", "watcher", "auditor"):
        before = await outcomes(database_url)

        async def progressed(before: int = before) -> bool:
            return await outcomes(database_url) > before

        await wait_for(progressed, within=60, what=f"rollout progress before killing the {service}")
        await stack.kill(service)
        await stack.start(service)

    await wait_for(
        lambda: all_on(cluster, "nginx:mainline"), within=120, what="rollout done after the crashes"
    )
    after = await cluster.pods(NAME)
    # In place, once: same pods, each container restarted exactly once.
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == {
        n: p["metadata"]["uid"] for n, p in pods_before.items()
    }
    assert {n: restart_count(p) for n, p in after.items()} == {
        n: restart_count(p) + 1 for n, p in pods_before.items()
    }
    await assert_trail_consistent(stack, database_url)
    assert stack.dead() == []
