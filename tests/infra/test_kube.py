"""services.infra.kube.raw_json over HTTP (simcluster): an error answer is an ApiException, as for a
preloaded call, never a Status body mistaken for an object or an empty list."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.infra import kube
from services.simcluster import SimCluster, SimConfig
from tests.plugins.simcluster import MakeSimCluster, api_client_for


async def test_error_answers_raise(make_simcluster: MakeSimCluster) -> None:
    sim: SimCluster = await make_simcluster(SimConfig(disabled_resources=("sidecarsets",)))
    async with await api_client_for(sim) as api:
        core = client.CoreV1Api(api)
        with pytest.raises(ApiException) as raised:
            await kube.raw_json(await core.read_namespaced_pod("missing", "default", _preload_content=False))
        assert raised.value.status == 404 and "NotFound" in str(raised.value.body)
        with pytest.raises(ApiException) as raised:
            await kube.raw_json(
                await client.CustomObjectsApi(api).list_cluster_custom_object(
                    "apps.kruise.io", "v1alpha1", "sidecarsets", _preload_content=False
                )
            )
        assert raised.value.status == 404

        listing = await kube.raw_json(await core.list_namespace(_preload_content=False))
        assert {n["metadata"]["name"] for n in listing["items"]} >= {"default", "kube-system"}
