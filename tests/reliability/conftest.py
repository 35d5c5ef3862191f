"""What the reliability tests share: the simcluster and API client, the stack's settings on a Postgres of
the test's own (which a test may restart), and ``rollout_under_way``: every service started, an in-place
rollout of 8 pods begun (its first update landed), and the checks every fault must pass at the end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from services.infra.embedded import EmbeddedServers
from services.infra.settings import Settings
from services.simcluster import SimCluster, SimConfig, Timing
from tests.e2e.audit import fetch
from tests.e2e.cluster import Cluster, restart_count, seed_cloneset, with_image
from tests.e2e.test_audit_trail import NAME, all_on, assert_trail_consistent
from tests.plugins.servers import ServerUrls
from tests.plugins.simcluster import MakeSimCluster, api_client_for
from tests.plugins.stack import Stack, settings_for_stack, wait_for

pytestmark = pytest.mark.e2e

SERVICES = ("auditor", "watcher", "planner", "executor")
REPLICAS = 8


@pytest_asyncio.fixture(loop_scope="session")
async def simcluster(make_simcluster: MakeSimCluster) -> SimCluster:
    # Readiness lags a container restart a little, as on a real node: the rollout takes a few seconds,
    # long enough to restart a server in the middle of it.
    return await make_simcluster(SimConfig(timing=Timing(ready=0.3)))


@pytest_asyncio.fixture(loop_scope="session")
async def cluster(simcluster: SimCluster) -> AsyncIterator[Cluster]:
    api = await api_client_for(simcluster)
    async with api:
        yield Cluster(api)


@pytest_asyncio.fixture(loop_scope="session")
async def stack_settings(
    restartable_postgres: EmbeddedServers, server_urls: ServerUrls, simcluster: SimCluster
) -> AsyncIterator[Settings]:
    assert restartable_postgres.resolved is not None
    async with settings_for_stack(
        restartable_postgres.resolved.database_url, server_urls.nats_url, str(simcluster.kubeconfig_path)
    ) as settings:
        yield settings


async def outcomes(database_url: str) -> int:
    """Pod actions reported done so far (in the whole store)."""
    rows = await fetch(database_url, "SELECT count(*) FROM events WHERE type = 'PodActionSucceeded'")
    return int(rows[0][0])


async def assert_services_healthy(stack: Stack) -> None:
    """No service died, and each answers /healthz ok."""
    assert stack.dead() == []
    for service in SERVICES:
        assert (await stack.get_json(service, "/healthz"))["status"] == "ok"


@dataclass
class RolloutUnderWay:
    """An in-place rollout of ``NAME`` (``REPLICAS`` pods, maxUnavailable 2) whose first update landed."""

    stack: Stack
    cluster: Cluster
    pods_before: dict[str, Any]

    @property
    def database_url(self) -> str:
        return self.stack.settings.database_url

    async def assert_finished_in_place_once(self, within: float = 120) -> None:
        """The rollout completes; the same pods, each restarted exactly once more; every stored event
        published once; every service alive and healthy."""
        await wait_for(
            lambda: all_on(self.cluster, "nginx:mainline", REPLICAS), within=within, what="the rollout done"
        )
        after = await self.cluster.pods(NAME)
        assert {n: p["metadata"]["uid"] for n, p in after.items()} == {
            n: p["metadata"]["uid"] for n, p in self.pods_before.items()
        }
        assert {n: restart_count(p) for n, p in after.items()} == {
            n: restart_count(p) + 1 for n, p in self.pods_before.items()
        }
        await assert_trail_consistent(self.stack, self.database_url)
        await assert_services_healthy(self.stack)


@pytest_asyncio.fixture(loop_scope="session")
async def rollout_under_way(stack: Stack, cluster: Cluster) -> RolloutUnderWay:
    """Every service started, 8 ready pods, the image changed, and the first in-place update done: the
    moment a test strikes."""
    await stack.start(*SERVICES)
    strategy = {
        "type": "InPlaceIfPossible",
        "maxUnavailable": 2,
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 1},
    }
    seed = seed_cloneset("cloneset-sample-data.yaml", replicas=REPLICAS, updateStrategy=strategy)
    await cluster.create_cloneset(seed)
    await wait_for(lambda: all_on(cluster, "nginx:alpine", REPLICAS), within=90, what="ready pods")
    rollout = RolloutUnderWay(stack, cluster, await cluster.pods(NAME))
    created = await outcomes(rollout.database_url)
    await cluster.patch_cloneset(NAME, with_image(seed, "nginx:mainline"))

    async def rollout_started() -> bool:
        return await outcomes(rollout.database_url) > created

    await wait_for(rollout_started, within=60, what="the first in-place update")
    return rollout
