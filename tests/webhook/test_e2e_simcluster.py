"""End to end: SidecarSets and pods created through the Kubernetes API (simcluster over HTTP), the API server
calling the webhook over HTTPS at pod creation, injection events in the real event store."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from services.infra.settings import Settings
from services.infra.store import EventStore
from services.model import sidecarset as ss
from services.simcluster import SimCluster
from services.webhook.service import RunningWebhook, WebhookOptions, run_webhook
from services.webhook.sinks import EventStoreSink
from tests.webhook.test_injection_rules import container, make_sidecarset, seed_pod, seed_sidecarset

GROUP, VERSION, PLURAL = "apps.kruise.io", "v1alpha1", "sidecarsets"


@pytest.fixture
async def webhook(simcluster: SimCluster, database_url: str, tmp_path: Path) -> AsyncIterator[RunningWebhook]:
    settings = Settings(kubeconfig=str(simcluster.kubeconfig_path), data_dir=str(tmp_path))
    sink = EventStoreSink(lambda: EventStore.connect(database_url))
    try:
        async with run_webhook(settings, WebhookOptions(cert_dir=tmp_path / "tls"), sink) as running:
            yield running
    finally:
        await sink.close()


async def apply_sidecarset(api: client.ApiClient, running: RunningWebhook, obj: dict[str, Any]) -> None:
    """Create it through the API and wait until the webhook's watch has seen it."""
    await client.CustomObjectsApi(api).create_cluster_custom_object(GROUP, VERSION, PLURAL, body=obj)
    name = obj["metadata"]["name"]
    for _ in range(1000):  # up to 10 s on a loaded machine
        if any(s.name == name for s in running.state.sidecarsets.snapshot()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the webhook never saw SidecarSet {name}")


async def create_pod(api: client.ApiClient, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod(namespace, body=cast(Any, obj))  # dicts are sent as is
    result: dict[str, Any] = api.sanitize_for_serialization(created)
    return result


def names(items: list[dict[str, Any]] | None) -> list[str]:
    return [c["name"] for c in items or []]


async def test_seed_pod_created_through_the_api_gets_the_sidecar(
    webhook: RunningWebhook, k8s_client: client.ApiClient, event_store: EventStore
) -> None:
    await apply_sidecarset(k8s_client, webhook, seed_sidecarset())
    pod = seed_pod()
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "html", "mountPath": "/usr/share/nginx/html"}]
    pod["spec"]["volumes"] = [{"name": "html", "emptyDir": {}}]
    created = await create_pod(k8s_client, "default", pod)

    containers = created["spec"]["containers"]
    assert names(containers) == ["tools", "app"]
    assert {"name": "html", "mountPath": "/usr/share/nginx/html"} in containers[0]["volumeMounts"]
    annotations = created["metadata"]["annotations"]
    revision = ss.parse_sidecarset(seed_sidecarset()).hash
    assert json.loads(annotations[ss.HASH_ANNOTATION])["test-sidecarset"]["hash"] == revision
    stored_sidecarset = await client.CustomObjectsApi(k8s_client).get_cluster_custom_object(
        GROUP, VERSION, PLURAL, "test-sidecarset"
    )
    assert (
        stored_sidecarset["metadata"]["annotations"][ss.HASH_ANNOTATION] == revision
    )  # as OpenKruise writes it
    # The pod stored in the cluster is the injected one, not only the create response.
    stored = await client.CoreV1Api(k8s_client).read_namespaced_pod("test-pod", "default")
    assert [c.name for c in stored.spec.containers] == ["tools", "app"]

    assert await webhook.state.recorder.flush(10.0)
    events = await event_store.read_stream("SidecarSet//test-sidecarset")
    [event] = [
        e.envelope for e in events if e.envelope.correlation_id == annotations[ss.INJECTION_ID_ANNOTATION]
    ]
    assert event.payload.pod == "test-pod" and event.payload.revision == revision  # type: ignore[union-attr]


async def test_injection_rules_end_to_end(webhook: RunningWebhook, k8s_client: client.ApiClient) -> None:
    suffix = uuid.uuid4().hex[:6]
    core = client.CoreV1Api(k8s_client)
    await core.create_namespace(body=cast(Any, {"metadata": {"name": f"team-{suffix}"}}))
    label = {"matchLabels": {"e2e": suffix}}
    await apply_sidecarset(
        k8s_client,
        webhook,
        make_sidecarset(
            f"after-{suffix}",
            selector=label,
            initContainers=[container("init-b"), container("init-a")],
            containers=[
                container(
                    "log-agent",
                    podInjectPolicy=ss.AFTER_APP,
                    transferEnv=[{"sourceContainerName": "app", "envName": "TZ"}],
                )
            ],
        ),
    )
    await apply_sidecarset(
        k8s_client,
        webhook,
        make_sidecarset(
            f"scoped-{suffix}", selector=label, namespace="default", containers=[container("only-default")]
        ),
    )

    def app_pod() -> dict[str, Any]:
        return {
            "metadata": {"generateName": "e2e-", "labels": {"e2e": suffix}},
            "spec": {
                "initContainers": [container("init-0")],
                "containers": [container("app", env=[{"name": "TZ", "value": "Asia/Shanghai"}])],
            },
        }

    in_default = await create_pod(k8s_client, "default", app_pod())
    assert names(in_default["spec"]["containers"]) == ["only-default", "app", "log-agent"]
    assert names(in_default["spec"]["initContainers"]) == ["init-0", "init-a", "init-b"]
    agent = in_default["spec"]["containers"][2]
    assert {"name": "TZ", "value": "Asia/Shanghai"} in agent["env"]

    in_team = await create_pod(k8s_client, f"team-{suffix}", app_pod())
    assert names(in_team["spec"]["containers"]) == ["app", "log-agent"]  # the scoped one stays in default

    in_system = await create_pod(k8s_client, "kube-system", app_pod())
    assert names(in_system["spec"]["containers"]) == ["app"]  # cluster-wide skips kube-system

    other = app_pod()
    other["metadata"]["labels"] = {"e2e": "someone-else"}
    assert names((await create_pod(k8s_client, "default", other))["spec"]["containers"]) == ["app"]


async def test_deleted_sidecarset_stops_injecting(
    webhook: RunningWebhook, k8s_client: client.ApiClient
) -> None:
    suffix = uuid.uuid4().hex[:6]
    name = f"gone-{suffix}"
    await apply_sidecarset(
        k8s_client,
        webhook,
        make_sidecarset(name, selector={"matchLabels": {"e2e": suffix}}, containers=[container("x")]),
    )
    await client.CustomObjectsApi(k8s_client).delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    for _ in range(1000):  # up to 10 s on a loaded machine
        if not any(s.name == name for s in webhook.state.sidecarsets.snapshot()):
            break
        await asyncio.sleep(0.01)
    pod = {
        "metadata": {"generateName": "e2e-", "labels": {"e2e": suffix}},
        "spec": {"containers": [container("app")]},
    }
    assert names((await create_pod(k8s_client, "default", pod))["spec"]["containers"]) == ["app"]


async def test_cache_follows_after_dropped_watches_and_expired_versions(
    simcluster: SimCluster, webhook: RunningWebhook, k8s_client: client.ApiClient
) -> None:
    suffix = uuid.uuid4().hex[:6]
    simcluster.compact()  # every resourceVersion the webhook holds is now 410 Gone
    simcluster.cut_watches()  # and its watches drop, so it must relist
    await apply_sidecarset(
        k8s_client,
        webhook,
        make_sidecarset(
            f"late-{suffix}", selector={"matchLabels": {"e2e": suffix}}, containers=[container("late")]
        ),
    )
    pod = {
        "metadata": {"generateName": "e2e-", "labels": {"e2e": suffix}},
        "spec": {"containers": [container("app")]},
    }
    assert names((await create_pod(k8s_client, "default", pod))["spec"]["containers"]) == ["late", "app"]


async def run_cli(*args: str, kubeconfig: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        *args,
        env={**os.environ, "ROLLBOOK_KUBECONFIG": kubeconfig},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    return process.returncode or 0, out.decode(), err.decode()


async def test_inject_from_cluster_previews_with_the_clusters_sidecarsets(
    simcluster: SimCluster, webhook: RunningWebhook, k8s_client: client.ApiClient, tmp_path: Path
) -> None:
    await apply_sidecarset(k8s_client, webhook, seed_sidecarset())
    pod_file = Path(__file__).parents[1] / "fixtures" / "seed" / "pod-test-pod.yaml"
    kubeconfig = str(simcluster.kubeconfig_path)
    code, out, err = await run_cli("inject", "-f", str(pod_file), "--from-cluster", kubeconfig=kubeconfig)
    assert code == 0, err
    assert names(json.loads(out)["spec"]["containers"]) == ["tools", "app"]

    # Preview an apply: the file's SidecarSet replaces the cluster's one of the same name.
    changed = seed_sidecarset()
    changed["spec"]["containers"][0]["podInjectPolicy"] = ss.AFTER_APP
    changed_file = tmp_path / "changed.yaml"
    changed_file.write_text(json.dumps(changed))
    code, out, err = await run_cli(
        "inject",
        "-f",
        str(pod_file),
        "--from-cluster",
        "--sidecarset",
        str(changed_file),
        kubeconfig=kubeconfig,
    )
    assert code == 0, err
    assert names(json.loads(out)["spec"]["containers"]) == ["app", "tools"]

    # A new SidecarSet that would clash with the cluster's is refused, naming both.
    clash = make_sidecarset("more-tools", namespace="default", containers=[container("tools")])
    clash_file = tmp_path / "clash.yaml"
    clash_file.write_text(json.dumps(clash))
    code, _, err = await run_cli(
        "inject",
        "-f",
        str(pod_file),
        "--from-cluster",
        "--sidecarset",
        str(clash_file),
        kubeconfig=kubeconfig,
    )
    assert code == 2 and "'more-tools'" in err and "'test-sidecarset'" in err
