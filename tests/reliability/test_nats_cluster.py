"""A 3-node NATS JetStream cluster, streams with 3 replicas: SIGKILL the node leading rollbook's stream
in the middle of a rollout, and the rollout completes with every stored event published once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import nats.errors
import pytest
import pytest_asyncio

from services.infra.bus import Bus
from services.infra.nats_cluster import EmbeddedNatsCluster
from services.infra.settings import Settings
from services.simcluster import SimCluster
from tests.e2e.cluster import Cluster, restart_count, seed_cloneset, with_image
from tests.e2e.test_audit_trail import NAME, all_on, assert_trail_consistent
from tests.plugins.servers import ServerUrls
from tests.plugins.stack import Stack, e2e_database, settings_for_stack, wait_for
from tests.reliability.test_postgres_restart import outcomes

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

SERVICES = ("auditor", "watcher", "planner", "executor")
REPLICAS = 8


@pytest_asyncio.fixture(loop_scope="session")
async def nats_cluster(server_data_dir: object) -> AsyncIterator[EmbeddedNatsCluster]:
    from pathlib import Path

    async with EmbeddedNatsCluster(Path(str(server_data_dir)), size=3) as cluster:
        yield cluster


@pytest_asyncio.fixture(loop_scope="session")
async def stack_settings(
    nats_cluster: EmbeddedNatsCluster, server_urls: ServerUrls, simcluster: SimCluster
) -> AsyncIterator[Settings]:
    async with e2e_database(server_urls.database_url) as database_url:
        async with settings_for_stack(
            database_url, nats_cluster.url, str(simcluster.kubeconfig_path)
        ) as base:
            yield msgspec.structs.replace(base, bus_replicas=3)


async def stream_leader(settings: Settings) -> str:
    bus = await Bus.connect(settings, name="rollbook-test-leader")
    try:
        info = await bus.js.stream_info(settings.stream_name)
        assert info.config.num_replicas == 3
        assert info.cluster is not None and info.cluster.leader
        return str(info.cluster.leader)
    finally:
        await bus.close()


async def test_rollout_completes_when_the_stream_leader_node_is_killed(
    stack: Stack, cluster: Cluster, nats_cluster: EmbeddedNatsCluster
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
    leader = await stream_leader(stack.settings)
    await nats_cluster.kill(nats_cluster.index_of(leader))

    async def new_leader() -> str | None:
        try:
            current = await stream_leader(stack.settings)
        except (nats.errors.Error, TimeoutError):
            return None  # the election is under way: JetStream's API may time out meanwhile
        return current if current != leader else None

    await wait_for(new_leader, within=30, what="another node leading the stream")
    await wait_for(
        lambda: all_on(cluster, "nginx:mainline", REPLICAS), within=120, what="rollout done without the node"
    )
    after = await cluster.pods(NAME)
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == {
        n: p["metadata"]["uid"] for n, p in pods_before.items()
    }
    assert {n: restart_count(p) for n, p in after.items()} == {
        n: restart_count(p) + 1 for n, p in pods_before.items()
    }
    await assert_trail_consistent(stack, database_url)  # every stored event published once, none lost
    assert stack.dead() == []
    for service in SERVICES:
        assert (await stack.get_json(service, "/healthz"))["status"] == "ok"
