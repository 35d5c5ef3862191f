from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from services.simcluster import SimCluster
from tests.e2e.cluster import Cluster
from tests.plugins.simcluster import api_client_for


@pytest_asyncio.fixture(loop_scope="session")
async def cluster(simcluster: SimCluster) -> AsyncIterator[Cluster]:
    api = await api_client_for(simcluster)
    async with api:
        yield Cluster(api)
