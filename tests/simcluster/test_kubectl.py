"""A client no one here wrote: Debian's kubectl (kubernetes-client package) against simcluster (fetched
by the `kubectl_binary` fixture of this folder's conftest)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from .helpers import Kubectl, rows, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="session")

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed"


async def test_kubectl_applies_seed_cloneset_and_sidecarset(
    kubectl: Kubectl, k8s_client: client.ApiClient
) -> None:
    assert "cloneset.apps.kruise.io/sample created" in await kubectl(
        "apply", "-f", str(SEED / "cloneset-sample.yaml")
    )
    assert "created" in await kubectl("apply", "-f", str(SEED / "sidecarset-test-sidecarset.yaml"))
    await kubectl("create", "namespace", "ops")
    assert "created" in await kubectl("apply", "-f", str(SEED / "cloneset-sample-data.yaml"))
    custom = client.CustomObjectsApi(k8s_client)
    sample = await custom.get_namespaced_custom_object(
        "apps.kruise.io", "v1alpha1", "default", "clonesets", "sample"
    )
    assert sample["spec"]["replicas"] == 5 and sample["spec"]["template"]["spec"]["containers"][0][
        "image"
    ] == ("nginx:alpine")
    sidecarset = await custom.get_cluster_custom_object(
        "apps.kruise.io", "v1alpha1", "sidecarsets", "test-sidecarset"
    )
    assert sidecarset["spec"]["updateStrategy"] == {
        "maxUnavailable": 1,
        "partition": "0%",
        "paused": True,
        "type": "RollingUpdate",
    }
    table = rows(await kubectl("get", "clonesets"))
    assert table[0] == ["NAME", "DESIRED", "UPDATED", "UPDATED_READY", "READY", "TOTAL", "AGE"]
    assert table[1][:2] == ["sample", "5"]
    assert rows(await kubectl("get", "clonesets", "-n", "ops"))[1][0] == "sample-data"
    # Re-applying a changed manifest goes through kubectl's three-way merge patch.
    changed = (SEED / "cloneset-sample.yaml").read_text().replace("replicas: 5", "replicas: 3")
    process = await asyncio.create_subprocess_exec(
        *kubectl.base, "apply", "-f", "-", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate(changed.encode())
    assert b"configured" in out
    sample = await custom.get_namespaced_custom_object(
        "apps.kruise.io", "v1alpha1", "default", "clonesets", "sample"
    )
    assert sample["spec"]["replicas"] == 3 and sample["metadata"]["generation"] == 2
    assert "kubectl.kubernetes.io/last-applied-configuration" in sample["metadata"]["annotations"]
    await kubectl("patch", "cloneset", "sample", "--type", "merge", "-p", '{"spec":{"replicas":2}}')
    assert rows(await kubectl("get", "clonesets"))[1][:2] == ["sample", "2"]
    assert "scaled" in await kubectl("scale", "cloneset", "sample", "--replicas=4")
    assert rows(await kubectl("get", "clonesets"))[1][:2] == ["sample", "4"]
    assert 'cloneset.apps.kruise.io "sample" deleted' in await kubectl("delete", "cloneset", "sample")
    assert "No resources found" in await kubectl("get", "clonesets")


async def test_kubectl_get_pods_shows_ready_and_restarts(
    kubectl: Kubectl, k8s_client: client.ApiClient
) -> None:
    assert "pod/test-pod created" in await kubectl("apply", "-f", str(SEED / "pod-test-pod.yaml"))
    core = client.CoreV1Api(k8s_client)
    await wait_until(
        lambda: core.read_namespaced_pod("test-pod", "default"),
        lambda p: any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or []),
    )
    table = rows(await kubectl("get", "pods"))
    assert table[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert table[1][:4] == ["test-pod", "1/1", "Running", "0"]
    await kubectl(
        "patch", "pod", "test-pod", "-p", '{"spec":{"containers":[{"name":"app","image":"nginx:1.16"}]}}'
    )
    await wait_until(
        lambda: core.read_namespaced_pod("test-pod", "default"),
        lambda p: p.status.container_statuses[0].restart_count == 1 and p.status.container_statuses[0].ready,
    )
    assert rows(await kubectl("get", "pods"))[1][:4] == ["test-pod", "1/1", "Running", "1"]
    refused = await kubectl(
        "patch",
        "pod",
        "test-pod",
        "-p",
        '{"spec":{"containers":[{"name":"app","env":[{"name":"A","value":"1"}]}]}}',
        check=False,
    )
    assert "Forbidden: pod updates may not change fields" in refused
    assert "running image nginx:1.16 (restart 1)" in await kubectl("logs", "test-pod")
    events = rows(await kubectl("get", "events"))
    assert events[0] == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert ["Normal", "Killing", "pod/test-pod", "Container app definition changed, will be restarted"] in [
        row[1:] for row in events
    ]
    assert 'pod "test-pod" deleted' in await kubectl("delete", "pod", "test-pod")
    assert "No resources found" in await kubectl("get", "pods")
