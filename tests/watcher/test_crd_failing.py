"""CloneSets the API server cannot convert (rollbook's CRD stores v1beta1, the watcher reads v1alpha1, and
the conversion webhook is unreachable): the watcher says so by name with the API server's reason (log,
/readyz details) and is not ready; once the webhook answers it lists again and is ready."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio
import yaml
from kubernetes_asyncio import client

from services.infra.settings import Settings
from services.simcluster import SimCluster, SimConfig
from tests.plugins.servers import ServerUrls
from tests.plugins.simcluster import MakeSimCluster, api_client_for
from tests.plugins.stack import Stack, e2e_database, wait_for
from tests.simcluster.rollbook_webhook import rollbook_webhook

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "deploy" / "base" / "crds" / "clonesets.yaml"


@pytest_asyncio.fixture
async def cluster(make_simcluster: MakeSimCluster) -> SimCluster:
    return await make_simcluster(SimConfig())


@pytest_asyncio.fixture
async def watcher_stack(server_urls: ServerUrls, cluster: SimCluster, tmp_path: Path) -> AsyncIterator[Stack]:
    async with e2e_database(server_urls.database_url) as database_url:
        settings = Settings(
            database_url=database_url,
            nats_url=server_urls.nats_url,  # unused by the watcher
            kubeconfig=str(cluster.kubeconfig_path),
            log_level="INFO",
        )
        running = Stack(settings, tmp_path)
        try:
            yield running
        finally:
            await running.stop_all()


async def readyz(stack: Stack) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.get(stack.children["watcher"].base_url + "/readyz") as response:
            return response.status, await response.json()


async def test_watcher_reports_clonesets_it_cannot_convert_and_recovers(
    watcher_stack: Stack, cluster: SimCluster, tmp_path: Path
) -> None:
    await watcher_stack.start("watcher", ready_timeout=20.0)
    async with await api_client_for(cluster) as api:
        await client.ApiextensionsV1Api(api).create_custom_resource_definition(
            yaml.safe_load(CRD.read_text())
        )
        cloneset = {
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "CloneSet",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "main", "image": "nginx:1.25"}]},
                },
            },
        }
        # Stored at v1beta1: the watcher's v1alpha1 watch and list need the webhook, which has no Service.
        await client.CustomObjectsApi(api).create_namespaced_custom_object(
            "apps.kruise.io", "v1beta1", "default", "clonesets", cloneset
        )

    async def failing() -> Any:
        status, body = await readyz(watcher_stack)
        return body if status == 503 and body["details"]["kinds_failing"] else None

    body = await wait_for(failing, within=20, what="the watcher reporting CloneSets as failing")
    reason = body["details"]["kinds_failing"]["CloneSet"]
    assert "conversion webhook for apps.kruise.io/v1alpha1, Kind=CloneSet failed" in reason
    assert 'service "rollbook-webhook" not found' in reason
    assert body["reason"].startswith("cannot observe CloneSet: HTTP 500")
    assert "resource_failing" in watcher_stack.tail("watcher", 200)

    async with rollbook_webhook(cluster, tmp_path / "tls"):

        async def recovered() -> Any:
            status, body = await readyz(watcher_stack)
            return body if status == 200 else None

        body = await wait_for(recovered, within=30, what="the watcher ready again")
        assert body["details"]["kinds_failing"] == {}
        assert "resource_recovered" in watcher_stack.tail("watcher", 200)
