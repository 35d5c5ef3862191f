"""`simcluster` fixtures: a running simcluster (zero delays) reached only over HTTP via kubernetes-asyncio.

- `simcluster`: a fresh SimCluster per test (function scope; starting one takes a few milliseconds).
- `k8s_client`: a kubernetes-asyncio ApiClient loaded from the simcluster's kubeconfig.
- `make_simcluster`: factory for tests that need their own SimConfig (extended in-place, faults, timing).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack

import pytest
import pytest_asyncio
from kubernetes_asyncio import client, config

from services.simcluster import SimCluster, SimConfig

MakeSimCluster = Callable[[SimConfig | None], Awaitable[SimCluster]]


@pytest_asyncio.fixture(loop_scope="session")
async def make_simcluster() -> AsyncIterator[MakeSimCluster]:
    async with AsyncExitStack() as stack:

        async def make(sim_config: SimConfig | None = None) -> SimCluster:
            return await stack.enter_async_context(SimCluster(sim_config or SimConfig()))

        yield make


@pytest_asyncio.fixture(loop_scope="session")
async def simcluster(make_simcluster: MakeSimCluster) -> SimCluster:
    return await make_simcluster(SimConfig())


async def api_client_for(sim: SimCluster) -> client.ApiClient:
    """An ApiClient built by the standard kubeconfig loader, exactly as the services build theirs."""
    return await config.new_client_from_config(config_file=str(sim.kubeconfig_path))


@pytest_asyncio.fixture(loop_scope="session")
async def k8s_client(simcluster: SimCluster) -> AsyncIterator[client.ApiClient]:
    api_client = await api_client_for(simcluster)
    async with api_client:
        yield api_client


@pytest.fixture
def simcluster_kubeconfig(simcluster: SimCluster) -> str:
    return str(simcluster.kubeconfig_path)
