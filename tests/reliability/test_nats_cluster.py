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
from tests.plugins.servers import ServerUrls
from tests.plugins.stack import e2e_database, settings_for_stack, wait_for
from tests.reliability.conftest import RolloutUnderWay

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]


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
    rollout_under_way: RolloutUnderWay, nats_cluster: EmbeddedNatsCluster
) -> None:
    settings = rollout_under_way.stack.settings
    leader = await stream_leader(settings)
    await nats_cluster.kill(nats_cluster.index_of(leader))

    async def new_leader() -> str | None:
        try:
            current = await stream_leader(settings)
        except (nats.errors.Error, TimeoutError):
            return None  # the election is under way: JetStream's API may time out meanwhile
        return current if current != leader else None

    await wait_for(new_leader, within=30, what="another node leading the stream")
    # Every stored event published once, none lost, though the node that led the stream is gone.
    await rollout_under_way.assert_finished_in_place_once()
