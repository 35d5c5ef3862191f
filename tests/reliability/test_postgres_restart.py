"""Postgres restarted (immediate stop, crash recovery) in the middle of a rollout: every service waits it
out, none dies, the rollout completes, and every event stored before, during and after reaches the bus."""

from __future__ import annotations

from typing import Any

import pytest

from services.infra.embedded import EmbeddedServers
from tests.e2e.audit import fetch
from tests.e2e.cluster import Cluster, restart_count, seed_cloneset, with_image
from tests.e2e.test_audit_trail import NAME, all_on, assert_trail_consistent
from tests.plugins.stack import Stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

SERVICES = ("auditor", "watcher", "planner", "executor")
REPLICAS = 8


async def outcomes(database_url: str) -> int:
    rows = await fetch(database_url, "SELECT count(*) FROM events WHERE type = 'PodActionSucceeded'")
    return int(rows[0][0])


async def test_rollout_completes_through_a_postgres_restart(
    stack: Stack, cluster: Cluster, restartable_postgres: EmbeddedServers
) -> None:
    await stack.start(*SERVICES)
    strategy = {
        "type": "InPlaceIfPossible",
        "maxUnavailable": 2,
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 1},
    }
    seed = seed_cloneset("cloneset-sample-data.yaml", replicas=REPLICAS, updateStrategy=strategy)
    await cluster.create_cloneset(seed)
    await wait_for(lambda: all_on(cluster, "nginx:alpine", REPLICAS), within=90, what="ready pods")
    pods_before = await cluster.pods(NAME)
    database_url = stack.settings.database_url
    created = await outcomes(database_url)

    await cluster.patch_cloneset(NAME, with_image(seed, "nginx:mainline"))

    async def rollout_started() -> bool:
        return await outcomes(database_url) > created

    await wait_for(rollout_started, within=60, what="the first in-place update")
    await restartable_postgres.stop_postgres(immediate=True)

    async def relay_waiting() -> Any:
        readiness = await _readyz(stack, "auditor")
        return (readiness.get("details") or {}).get("relay", {}).get("retrying")

    await wait_for(relay_waiting, within=30, what="the auditor's relay noticed Postgres is gone")
    await restartable_postgres.start_postgres()

    await wait_for(
        lambda: all_on(cluster, "nginx:mainline", REPLICAS), within=120, what="rollout done after the restart"
    )
    after = await cluster.pods(NAME)
    # In place, once each: same pods, each restarted exactly once more.
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == {
        n: p["metadata"]["uid"] for n, p in pods_before.items()
    }
    assert {n: restart_count(p) for n, p in after.items()} == {
        n: restart_count(p) + 1 for n, p in pods_before.items()
    }
    await assert_trail_consistent(stack, database_url)  # incl. every stored event published once
    assert stack.dead() == []
    for service in SERVICES:
        assert (await stack.get_json(service, "/healthz"))["status"] == "ok"
    assert (await _readyz(stack, "auditor"))["details"]["relay"]["retrying"] is None


async def _readyz(stack: Stack, service: str) -> dict[str, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.get(stack.children[service].base_url + "/readyz") as response:
            body: dict[str, Any] = await response.json()
            return body
