"""A cluster without the Kruise SidecarSet CRD (simcluster with sidecarsets disabled): the webhook still
starts, reports SidecarSets as not served (/readyz, rollbook_webhook_kind_served 0) and admits pods
unchanged, instead of failing its start after the sync timeout."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from kubernetes_asyncio import client

from services.infra.settings import Settings
from services.simcluster import SimCluster, SimConfig
from services.webhook.recorder import LogSink
from services.webhook.service import WebhookOptions, run_webhook
from tests.plugins.simcluster import MakeSimCluster, api_client_for
from tests.webhook.test_injection_rules import seed_pod, seed_sidecarset


async def test_webhook_starts_without_sidecarset_crd(make_simcluster: MakeSimCluster, tmp_path: Path) -> None:
    sim: SimCluster = await make_simcluster(SimConfig(disabled_resources=("sidecarsets",)))
    settings = Settings(kubeconfig=str(sim.kubeconfig_path), data_dir=str(tmp_path))
    options = WebhookOptions(cert_dir=tmp_path / "tls", sync_timeout_seconds=10.0)
    async with run_webhook(settings, options, LogSink()) as running:
        assert running.state.served() == {"SidecarSet": False, "Namespace": True}
        connector = aiohttp.TCPConnector(ssl=running.certificate.client_context())
        async with aiohttp.ClientSession(connector=connector) as http:
            async with http.get(running.base_url + "/readyz") as ready:
                assert ready.status == 200
                assert "not served by the API server: SidecarSet" in await ready.text()
            async with http.get(running.base_url + "/metrics") as metrics:
                text = await metrics.text()
            assert 'rollbook_webhook_kind_served{kind="SidecarSet"} 0.0' in text
            assert 'rollbook_webhook_kind_served{kind="Namespace"} 1.0' in text

        async with await api_client_for(sim) as api:  # the pod webhook is registered and answers
            created = await client.CoreV1Api(api).create_namespaced_pod("default", body=seed_pod())
        assert [c.name for c in created.spec.containers] == ["app"]


async def test_webhook_starts_where_validating_configurations_are_not_served(
    make_simcluster: MakeSimCluster, tmp_path: Path
) -> None:
    """Registration tolerates an API server without ValidatingWebhookConfigurations (404): the mutating
    configuration is still registered and pods are still injected."""
    sim: SimCluster = await make_simcluster(
        SimConfig(disabled_resources=("validatingwebhookconfigurations",))
    )
    settings = Settings(kubeconfig=str(sim.kubeconfig_path), data_dir=str(tmp_path))
    options = WebhookOptions(cert_dir=tmp_path / "tls", sync_timeout_seconds=10.0)
    async with run_webhook(settings, options, LogSink()), await api_client_for(sim) as api:
        await client.CustomObjectsApi(api).create_cluster_custom_object(
            "apps.kruise.io", "v1alpha1", "sidecarsets", body=seed_sidecarset()
        )
        for _ in range(
            1000
        ):  # the webhook's watch sees the SidecarSet within a few ms; 10 s on a loaded host
            created = await client.CoreV1Api(api).create_namespaced_pod(
                "default", body={**seed_pod(), "metadata": {"generateName": "p-", "labels": {"app": "x"}}}
            )
            if len(created.spec.containers) > 1:
                break
            await asyncio.sleep(0.01)
        assert [c.name for c in created.spec.containers] == ["tools", "app"]
