"""``pods/resize``: served and discoverable, validated as kube-apiserver 1.35 validates it, and actuated by
the simulated kubelet against node allocatable (Deferred, Infeasible, restarts per resizePolicy)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.simcluster import NodeConfig, SimConfig

from ..plugins.simcluster import MakeSimCluster, api_client_for
from .helpers import pod_manifest, ready_pod, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _resources(cpu: str, memory: str, cpu_limit: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
    if cpu_limit is not None:
        out["limits"] = {"cpu": cpu_limit}
    return out


def _sized(name: str, app_policy: list[dict[str, str]] | None = None) -> dict[str, Any]:
    app: dict[str, Any] = {"name": "app", "image": "nginx:1.25", "resources": _resources("100m", "64Mi", "1")}
    if app_policy is not None:
        app["resizePolicy"] = app_policy
    sidecar = {"name": "log", "image": "fluentd:1.0", "resources": _resources("50m", "32Mi", "1")}
    return pod_manifest(name, containers=[app, sidecar])


def _resize_body(**by_container: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": n, "resources": r} for n, r in by_container.items()]}}


def _condition(pod: client.V1Pod, kind: str) -> client.V1PodCondition | None:
    return next((c for c in pod.status.conditions or [] if c.type == kind), None)


def _actuated(pod: client.V1Pod, container: str, cpu: str) -> bool:
    status = next(s for s in pod.status.container_statuses or [] if s.name == container)
    return (
        (status.resources.requests or {}).get("cpu") == cpu
        and (status.allocated_resources or {}).get("cpu") == cpu
        and _condition(pod, "PodResizeInProgress") is None
        and _condition(pod, "PodResizePending") is None
    )


async def test_discovery_lists_pods_resize(k8s_client: client.ApiClient) -> None:
    resources = await client.CoreV1Api(k8s_client).get_api_resources()
    resize = next(r for r in resources.resources if r.name == "pods/resize")
    assert resize.kind == "Pod" and set(resize.verbs) == {"get", "patch", "update"}


async def test_cpu_resize_not_required_is_actuated_without_restart(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", _sized("grow"))
    before = await ready_pod(core, "grow")
    assert all(s.resources is not None for s in before.status.container_statuses)
    body = _resize_body(app=_resources("200m", "64Mi", "1"))
    await core.patch_namespaced_pod_resize("grow", "default", body)
    after = await wait_until(
        lambda: core.read_namespaced_pod("grow", "default"), lambda p: _actuated(p, "app", "200m")
    )
    assert after.spec.containers[0].resources.requests["cpu"] == "200m"
    assert after.metadata.uid == before.metadata.uid
    assert [s.restart_count for s in after.status.container_statuses] == [0, 0]
    assert after.status.qos_class == before.status.qos_class == "Burstable"


async def test_memory_resize_restarts_only_the_container_whose_policy_says_so(
    k8s_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(k8s_client)
    policy = [
        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
        {"resourceName": "memory", "restartPolicy": "RestartContainer"},
    ]
    await core.create_namespaced_pod("default", _sized("mem", policy))
    await ready_pod(core, "mem")
    body = _resize_body(app=_resources("100m", "128Mi", "1"), log=_resources("50m", "48Mi", "1"))
    await core.patch_namespaced_pod_resize("mem", "default", body)

    def done(pod: client.V1Pod) -> bool:
        statuses = {s.name: s for s in pod.status.container_statuses}
        return (
            statuses["app"].resources.requests.get("memory") == "128Mi"
            and statuses["log"].resources.requests.get("memory") == "48Mi"
            and all(s.ready for s in statuses.values())
            and _condition(pod, "PodResizeInProgress") is None
        )

    after = await wait_until(lambda: core.read_namespaced_pod("mem", "default"), done)
    restarts = {s.name: s.restart_count for s in after.status.container_statuses}
    assert restarts == {"app": 1, "log": 0}


async def test_resize_keeps_only_resources_of_the_write(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", _sized("only"))
    await ready_pod(core, "only")
    body = {
        "metadata": {"labels": {"sneaked": "in"}},
        "spec": {
            "containers": [{"name": "app", "image": "nginx:9", "resources": _resources("150m", "64Mi", "1")}]
        },
    }
    written = await core.patch_namespaced_pod_resize("only", "default", body)
    assert written.spec.containers[0].image == "nginx:1.25"
    assert written.spec.containers[0].resources.requests["cpu"] == "150m"
    assert "sneaked" not in (written.metadata.labels or {})


@pytest.mark.parametrize(
    ("resources", "field", "message"),
    [
        # Guaranteed -> Burstable is a QoS change.
        (
            {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "2", "memory": "64Mi"}},
            "spec",
            "QOS Class",
        ),
        # A strategic merge patch removes a map key with null.
        (
            {"limits": {"memory": None}},
            "limits",
            "cannot be removed",
        ),
        (
            {"requests": {"cpu": "1", "memory": "32Mi"}, "limits": {"cpu": "1", "memory": "32Mi"}},
            "limits[memory]",
            "cannot be decreased",
        ),
        (
            {
                "requests": {"cpu": "1", "memory": "64Mi", "ephemeral-storage": "1Gi"},
                "limits": {"cpu": "1", "memory": "64Mi"},
            },
            "spec",
            "only cpu and memory",
        ),
    ],
)
async def test_invalid_resizes_are_refused(
    k8s_client: client.ApiClient, resources: dict[str, Any], field: str, message: str
) -> None:
    core = client.CoreV1Api(k8s_client)
    name = "guaranteed-" + message.split()[-1].lower().replace(" ", "-")
    fixed = {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}
    await core.create_namespaced_pod(
        "default", pod_manifest(name, containers=[{"name": "app", "image": "nginx:1.25", "resources": fixed}])
    )
    await ready_pod(core, name)
    with pytest.raises(ApiException) as refused:
        await core.patch_namespaced_pod_resize(name, "default", _resize_body(app=resources))
    assert refused.value.status == 422
    assert message in refused.value.body and field in refused.value.body
    unchanged = await core.read_namespaced_pod(name, "default")
    assert unchanged.spec.containers[0].resources.requests == fixed["requests"]


async def test_resources_may_not_change_through_a_pod_update(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", _sized("plain"))
    await ready_pod(core, "plain")
    with pytest.raises(ApiException) as refused:
        await core.patch_namespaced_pod("plain", "default", _resize_body(app=_resources("300m", "64Mi", "1")))
    assert refused.value.status == 422


async def test_kubelet_defers_then_admits_and_refuses_what_exceeds_the_node(
    make_simcluster: MakeSimCluster,
) -> None:
    sim = await make_simcluster(SimConfig(nodes=(NodeConfig(name="small", cpu_millis=1000),)))
    async with await api_client_for(sim) as api:
        core = client.CoreV1Api(api)
        await core.create_namespaced_pod("default", _sized("a"))
        filler = pod_manifest(
            "filler",
            containers=[{"name": "app", "image": "nginx:1.25", "resources": _resources("700m", "1Mi")}],
        )
        await core.create_namespaced_pod("default", filler)
        await ready_pod(core, "a")
        await ready_pod(core, "filler")
        # 850m + 700m > 1000m now: Deferred.
        await core.patch_namespaced_pod_resize(
            "a", "default", _resize_body(app=_resources("400m", "64Mi", "1"))
        )
        deferred = await wait_until(
            lambda: core.read_namespaced_pod("a", "default"),
            lambda p: _condition(p, "PodResizePending") is not None,
        )
        pending = _condition(deferred, "PodResizePending")
        assert (pending.status, pending.reason) == ("True", "Deferred")
        # The filler goes: capacity frees and the deferred resize is actuated.
        await core.delete_namespaced_pod("filler", "default", grace_period_seconds=0)
        await wait_until(
            lambda: core.read_namespaced_pod("a", "default"), lambda p: _actuated(p, "app", "400m")
        )
        # More than the node has at all: Infeasible, and the old resources stay actuated.
        await core.patch_namespaced_pod_resize("a", "default", _resize_body(app=_resources("2", "64Mi", "2")))
        infeasible = await wait_until(
            lambda: core.read_namespaced_pod("a", "default"),
            lambda p: getattr(_condition(p, "PodResizePending"), "reason", None) == "Infeasible",
        )
        app = next(s for s in infeasible.status.container_statuses if s.name == "app")
        assert app.resources.requests["cpu"] == "400m"


async def test_an_older_cluster_serves_no_resize(make_simcluster: MakeSimCluster) -> None:
    sim = await make_simcluster(SimConfig(disabled_resources=("pods/resize",)))
    async with await api_client_for(sim) as api:
        core = client.CoreV1Api(api)
        names = {r.name for r in (await core.get_api_resources()).resources}
        assert "pods/resize" not in names and "pods/status" in names
        await core.create_namespaced_pod("default", _sized("old"))
        pod = await ready_pod(core, "old")
        assert all(s.resources is None for s in pod.status.container_statuses)
        with pytest.raises(ApiException) as missing:
            await core.patch_namespaced_pod_resize("old", "default", _resize_body(app=_resources("1", "1Mi")))
        assert missing.value.status == 404
