from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from services.simcluster import SimCluster
from tests.e2e.cluster import Cluster
from tests.plugins.simcluster import api_client_for

pytestmark = pytest.mark.e2e


@pytest_asyncio.fixture(loop_scope="session")
async def cluster(simcluster: SimCluster) -> AsyncIterator[Cluster]:
    api = await api_client_for(simcluster)
    async with api:
        yield Cluster(api)


@pytest_asyncio.fixture(loop_scope="session")
async def shared_cluster(module_simcluster: SimCluster, namespace: str) -> AsyncIterator[Cluster]:
    """The module's simcluster (beside its `shared_stack`), in this test's own namespace."""
    api = await api_client_for(module_simcluster)
    async with api:
        yield Cluster(api, namespace)
