"""The workload controllers as kubectl drives them (Debian's kubectl, from this folder's conftest):
`kubectl rollout status/undo/restart/pause/resume/history`, `kubectl wait --for=condition=complete`,
`kubectl scale`, `kubectl drain`-style eviction and the columns of `kubectl get`."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client

from services.simcluster import SimConfig, Timing
from services.simcluster.resources import PODS
from services.simcluster.store import WatchEvent

from ..plugins.simcluster import MakeSimCluster, api_client_for
from .helpers import Kubectl, rows, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def images(apps: client.AppsV1Api, name: str) -> list[str]:
    d = await apps.read_namespaced_deployment(name, "default")
    return [c.image for c in d.spec.template.spec.containers]


async def test_kubectl_rollout_of_a_deployment(kubectl: Kubectl, k8s_client: client.ApiClient) -> None:
    apps = client.AppsV1Api(k8s_client)
    await kubectl("create", "deployment", "web", "--image=nginx:1.25", "--replicas=3")
    out = await kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    assert 'deployment "web" successfully rolled out' in out
    table = rows(await kubectl("get", "deployment", "web"))
    assert table[0][:4] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE"] and table[1][:4] == [
        "web",
        "3/3",
        "3",
        "3",
    ]

    await kubectl("set", "image", "deployment/web", "nginx=nginx:1.26")
    assert "successfully rolled out" in await kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    history = await kubectl("rollout", "history", "deployment/web")
    assert [r[0] for r in rows(history)[2:]] == ["1", "2"]

    await kubectl("rollout", "undo", "deployment/web")
    assert "successfully rolled out" in await kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    assert await images(apps, "web") == ["nginx:1.25"]
    d = await apps.read_namespaced_deployment("web", "default")
    assert d.metadata.annotations["deployment.kubernetes.io/revision"] == "3"
    rs = (await apps.list_namespaced_replica_set("default", label_selector="app=web")).items
    assert len(rs) == 2  # the undo made the first ReplicaSet current again

    await kubectl("rollout", "restart", "deployment/web")
    assert "successfully rolled out" in await kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    d = await apps.read_namespaced_deployment("web", "default")
    assert "kubectl.kubernetes.io/restartedAt" in d.spec.template.metadata.annotations
    assert d.metadata.annotations["deployment.kubernetes.io/revision"] == "4"

    await kubectl("rollout", "pause", "deployment/web")
    await kubectl("set", "image", "deployment/web", "nginx=nginx:1.27")
    await kubectl("scale", "deployment/web", "--replicas=2")
    assert "successfully rolled out" not in await kubectl(
        "rollout", "status", "deployment/web", "--timeout=2s", check=False
    )
    await kubectl("rollout", "resume", "deployment/web")
    assert "successfully rolled out" in await kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    pods = (await client.CoreV1Api(k8s_client).list_namespaced_pod("default", label_selector="app=web")).items
    live = [p for p in pods if not p.metadata.deletion_timestamp]
    assert len(live) == 2 and {p.spec.containers[0].image for p in live} == {"nginx:1.27"}


async def test_kubectl_waits_for_a_job_to_complete(kubectl: Kubectl) -> None:
    await kubectl("create", "job", "migrate", "--image=busybox:1.36")
    out = await kubectl("wait", "job/migrate", "--for=condition=complete", "--timeout=60s")
    assert "job.batch/migrate condition met" in out
    logs = await kubectl("logs", "job/migrate")
    assert "container migrate ran image busybox:1.36 and exited with code 0" in logs
    table = rows(await kubectl("get", "job", "migrate"))
    assert table[0][:2] == ["NAME", "COMPLETIONS"] and table[1][:2] == ["migrate", "1/1"]


async def test_kubectl_rollout_status_of_a_statefulset(
    kubectl: Kubectl, k8s_client: client.ApiClient
) -> None:
    apps = client.AppsV1Api(k8s_client)
    body = {
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 2,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "db", "image": "postgres:16"}]},
            },
        },
    }
    await apps.create_namespaced_stateful_set("default", body)
    out = await kubectl("rollout", "status", "statefulset/db", "--timeout=60s")
    # The defaulted partition (0) makes kubectl report a partitioned roll-out, as against any cluster.
    assert "partitioned roll out complete: 2 new pods have been updated" in out
    await kubectl("set", "image", "statefulset/db", "db=postgres:17")
    out = await kubectl("rollout", "status", "statefulset/db", "--timeout=60s")
    assert "partitioned roll out complete: 2 new pods have been updated" in out
    pods = (await client.CoreV1Api(k8s_client).list_namespaced_pod("default", label_selector="app=db")).items
    assert {p.spec.containers[0].image for p in pods if not p.metadata.deletion_timestamp} == {"postgres:17"}
    assert [r[0] for r in rows(await kubectl("rollout", "history", "statefulset/db"))[2:]] == ["1", "2"]
    await kubectl("rollout", "undo", "statefulset/db")
    out = await kubectl("rollout", "status", "statefulset/db", "--timeout=60s")
    sts = await client.AppsV1Api(k8s_client).read_namespaced_stateful_set("db", "default")
    assert sts.spec.template.spec.containers[0].image == "postgres:16"
    assert sts.status.update_revision == sts.status.current_revision
    revisions = (await client.AppsV1Api(k8s_client).list_namespaced_controller_revision("default")).items
    assert sorted(r.revision for r in revisions if r.metadata.owner_references[0].name == "db") == [2, 3]
    assert [r[:2] for r in rows(await kubectl("get", "statefulset", "db"))] == [
        ["NAME", "READY"],
        ["db", "2/2"],
    ]


async def test_kubectl_drain_evicts_within_the_disruption_budget(
    make_simcluster: MakeSimCluster, kubectl_binary: Path, tmp_path: Path
) -> None:
    """kubectl drain cordons the node and evicts (pods/eviction, found in discovery) rather than deletes:
    with minAvailable 5 of 6 (two pods per node) the second eviction is refused (429) and kubectl retries
    it until the first pod's replacement, on another node, is ready: whenever a pod starts terminating,
    the five others are ready."""
    # Pods take a second to become ready, so a replacement is not ready when kubectl evicts the next pod.
    sim = await make_simcluster(SimConfig(timing=Timing(ready=1.0)))
    kubectl = Kubectl(kubectl_binary, sim, tmp_path / "cache")
    healthy_when_evicted: list[int] = []

    def on_event(event: WatchEvent) -> None:
        meta, before = event.obj["metadata"], ((event.prev or {}).get("metadata") or {})
        if event.resource is PODS and meta.get("deletionTimestamp") and not before.get("deletionTimestamp"):
            others = [
                p
                for p in sim.store.objects[PODS].values()
                if (p["metadata"].get("labels") or {}).get("app") == "drained"
                and p["metadata"]["name"] != meta["name"]
                and not p["metadata"].get("deletionTimestamp")
                and any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in p["status"].get("conditions") or []
                )
            ]
            healthy_when_evicted.append(len(others))

    sim.store.listeners.append(on_event)
    async with await api_client_for(sim) as k8s_client:
        await _drain(kubectl, k8s_client)
    assert healthy_when_evicted == [5, 5]


async def _drain(kubectl: Kubectl, k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await kubectl("create", "deployment", "drained", "--image=nginx:1.25", "--replicas=6")
    await kubectl("rollout", "status", "deployment/drained", "--timeout=60s")
    await client.PolicyV1Api(k8s_client).create_namespaced_pod_disruption_budget(
        "default",
        {
            "metadata": {"name": "drained"},
            "spec": {"minAvailable": 5, "selector": {"matchLabels": {"app": "drained"}}},
        },
    )
    await wait_until(
        lambda: client.PolicyV1Api(k8s_client).read_namespaced_pod_disruption_budget("drained", "default"),
        lambda p: p.status is not None and p.status.disruptions_allowed == 1,
    )
    out = await kubectl("drain", "sim-node-0", "--ignore-daemonsets", "--timeout=60s")
    assert "node/sim-node-0 cordoned" in out and "evicting pod default/drained-" in out, out
    assert "node/sim-node-0 evicted" in out or "node/sim-node-0 drained" in out, out  # kubectl 1.20 / newer
    pods = (await core.list_namespaced_pod("default", label_selector="app=drained")).items
    live = [p for p in pods if not p.metadata.deletion_timestamp]
    assert len(live) == 6 and all(p.spec.node_name != "sim-node-0" for p in live)
    node = await core.read_node("sim-node-0")
    assert node.spec.unschedulable
    await kubectl("uncordon", "sim-node-0")
