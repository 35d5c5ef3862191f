"""The stack of tests/reliability runs on a Postgres of the test's own, which the test restarts."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from services.infra.embedded import EmbeddedServers
from services.infra.settings import Settings
from services.simcluster import SimCluster, SimConfig, Timing
from tests.e2e.cluster import Cluster
from tests.plugins.servers import ServerUrls
from tests.plugins.simcluster import MakeSimCluster, api_client_for
from tests.plugins.stack import settings_for_stack

pytestmark = pytest.mark.e2e


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
