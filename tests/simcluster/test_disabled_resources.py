"""SimConfig.disabled_resources: a cluster without a CRD (e.g. no Kruise SidecarSets) answers 404 for it
and leaves it out of discovery, while everything else is served."""

from __future__ import annotations

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.simcluster import SimCluster, SimConfig
from tests.plugins.simcluster import MakeSimCluster, api_client_for

from .test_rest import cloneset_manifest


async def test_disabled_resource_is_404_and_not_discovered(make_simcluster: MakeSimCluster) -> None:
    sim: SimCluster = await make_simcluster(SimConfig(disabled_resources=("sidecarsets.apps.kruise.io",)))
    async with await api_client_for(sim) as api:
        custom = client.CustomObjectsApi(api)
        with pytest.raises(ApiException) as raised:
            await custom.list_cluster_custom_object("apps.kruise.io", "v1alpha1", "sidecarsets")
        assert raised.value.status == 404
        with pytest.raises(ApiException) as raised:
            await custom.get_cluster_custom_object("apps.kruise.io", "v1alpha1", "sidecarsets", "any")
        assert raised.value.status == 404

        listed = await client.ApisApi(api).get_api_versions()
        assert "apps.kruise.io" in {g.name for g in listed.groups}  # CloneSets still served
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{sim.url}/apis/apps.kruise.io/v1alpha1") as response,
        ):
            resources = await response.json()
        assert {r["name"] for r in resources["resources"]} == {
            "clonesets",
            "clonesets/scale",
            "clonesets/status",
        }
        await custom.create_namespaced_custom_object(
            "apps.kruise.io", "v1alpha1", "default", "clonesets", cloneset_manifest("still-served")
        )


def test_unknown_disabled_resource_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown resource.*sidecarset"):
        SimCluster(SimConfig(disabled_resources=("sidecarset",)))
