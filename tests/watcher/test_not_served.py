"""A cluster without the Kruise SidecarSet CRD: the watcher process still becomes ready, says SidecarSets
are not served (log, /readyz details, rollbook_kind_served 0) and keeps observing CloneSets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from kubernetes_asyncio import client

from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.simcluster import SimCluster, SimConfig
from tests.plugins.servers import ServerUrls
from tests.plugins.simcluster import MakeSimCluster, api_client_for
from tests.plugins.stack import Stack, e2e_database, wait_for


@pytest_asyncio.fixture
async def no_sidecarset_cluster(make_simcluster: MakeSimCluster) -> SimCluster:
    return await make_simcluster(SimConfig(disabled_resources=("sidecarsets.apps.kruise.io",)))


@pytest_asyncio.fixture
async def watcher_stack(
    server_urls: ServerUrls, no_sidecarset_cluster: SimCluster, tmp_path: Path
) -> AsyncIterator[Stack]:
    async with e2e_database(server_urls.database_url) as database_url:
        settings = Settings(
            database_url=database_url,
            nats_url=server_urls.nats_url,  # unused by the watcher, which only appends to the store
            kubeconfig=str(no_sidecarset_cluster.kubeconfig_path),
            log_level="INFO",
        )
        running = Stack(settings, tmp_path)
        try:
            yield running
        finally:
            await running.stop_all()


async def test_watcher_ready_without_sidecarset_crd(
    watcher_stack: Stack, no_sidecarset_cluster: SimCluster
) -> None:
    await watcher_stack.start("watcher", ready_timeout=20.0)  # fails here if SidecarSets held readiness

    ready = await watcher_stack.get_json("watcher", "/readyz")
    assert ready["status"] == "ready"
    assert ready["details"]["kinds_not_served"] == ["SidecarSet"]
    metrics = await watcher_stack.get_text("watcher", "/metrics")
    assert 'rollbook_kind_served{kind="SidecarSet",service="watcher"} 0.0' in metrics
    assert 'rollbook_kind_served{kind="CloneSet",service="watcher"} 1.0' in metrics
    assert "resource_not_served" in watcher_stack.tail("watcher", 200)

    # The other kinds are watched as usual.
    async with await api_client_for(no_sidecarset_cluster) as api:
        await client.CustomObjectsApi(api).create_namespaced_custom_object(
            "apps.kruise.io",
            "v1alpha1",
            "default",
            "clonesets",
            {
                "apiVersion": "apps.kruise.io/v1alpha1",
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
            },
        )
    store = await EventStore.connect(watcher_stack.settings.database_url)
    try:
        observed = await wait_for(
            lambda: store.read_stream(CLONESET.observed_stream("default", "web")),
            what="the CloneSet observed",
        )
    finally:
        await store.close()
    assert observed[0].envelope.payload.kind == "CloneSet"  # type: ignore[union-attr]
