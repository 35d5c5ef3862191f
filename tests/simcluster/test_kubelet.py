"""The simulated scheduler and kubelet as a controller sees them through the API."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from services.simcluster import NodeConfig, SimCluster, SimConfig, Timing

from ..plugins.simcluster import MakeSimCluster, api_client_for
from .helpers import is_ready, pod_manifest, ready_pod, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_pod_becomes_running_and_ready_on_a_node(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", pod_manifest("life"))
    pod = await ready_pod(core, "life")
    assert pod.status.phase == "Running" and pod.spec.node_name.startswith("sim-node-")
    assert pod.status.pod_ip.startswith("10.244.")
    conditions = {c.type: c.status for c in pod.status.conditions}
    assert conditions == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    assert all(c.ready and c.state.running and c.image_id for c in pod.status.container_statuses)


async def test_image_change_restarts_only_that_container_in_place(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", pod_manifest("inplace"))
    before = await ready_pod(core, "inplace")
    old = {c.name: c for c in before.status.container_statuses}
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        "default",
        field_selector="metadata.name=inplace",
        resource_version=before.metadata.resource_version,
        timeout_seconds=5,
    )
    await core.patch_namespaced_pod(
        "inplace", "default", {"spec": {"containers": [{"name": "app", "image": "nginx:1.26"}]}}
    )
    saw_rebuilding = saw_not_ready = False
    async for event in stream:
        pod = event["object"]
        app = next(c for c in pod.status.container_statuses if c.name == "app")
        if app.state.waiting and app.state.waiting.reason == "ContainerRebuilding":
            saw_rebuilding = True
        if not is_ready(pod):
            saw_not_ready = True
        if app.image == "nginx:1.26" and app.state.running and is_ready(pod):
            break
    await stream.close()
    after = await core.read_namespaced_pod("inplace", "default")
    new = {c.name: c for c in after.status.container_statuses}
    assert saw_rebuilding and saw_not_ready
    assert (after.metadata.uid, after.status.pod_ip, after.spec.node_name) == (
        before.metadata.uid,
        before.status.pod_ip,
        before.spec.node_name,
    )
    assert new["app"].restart_count == old["app"].restart_count + 1
    assert new["app"].image_id != old["app"].image_id
    assert new["app"].last_state.terminated is not None
    assert new["log"].restart_count == 0 and new["log"].container_id == old["log"].container_id


async def test_readiness_gate_holds_ready_until_condition_true(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    gate = "apps.kruise.io/in-place-update-ready"
    await core.create_namespaced_pod(
        "default", pod_manifest("gated", readinessGates=[{"conditionType": gate}])
    )
    pod = await wait_until(
        lambda: core.read_namespaced_pod("gated", "default"),
        lambda p: any(c.type == "ContainersReady" and c.status == "True" for c in p.status.conditions or []),
    )
    # The status that reports the containers ready reports the pod not ready: the gate holds it.
    ready = next(c for c in pod.status.conditions if c.type == "Ready")
    assert ready.status == "False" and ready.reason == "ReadinessGatesNotReady"
    await core.patch_namespaced_pod_status(
        "gated", "default", {"status": {"conditions": [{"type": gate, "status": "True"}]}}
    )
    pod = await ready_pod(core, "gated")
    assert any(c.type == gate and c.status == "True" for c in pod.status.conditions)


async def test_failing_readiness_probe_makes_the_pod_not_ready_then_ready_again(
    simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", pod_manifest("flaps"))
    before = await ready_pod(core, "flaps")
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        "default",
        field_selector="metadata.name=flaps",
        resource_version=before.metadata.resource_version,
        timeout_seconds=5,
    )
    simcluster.fail_readiness("default", "flaps")
    readiness: list[tuple[bool, bool, bool]] = []  # (Ready, ContainersReady, every container ready)
    async for event in stream:
        pod = event["object"]
        conditions = {c.type: c.status == "True" for c in pod.status.conditions}
        readiness.append(
            (
                conditions["Ready"],
                conditions["ContainersReady"],
                all(c.ready for c in pod.status.container_statuses),
            )
        )
        if readiness[-1] == (False, False, False):
            # The probe passes again: the same containers (nothing restarted) report ready.
            simcluster.fail_readiness("default", "flaps", failing=False)
        elif len(readiness) > 1 and all(readiness[-1]):
            break
    assert readiness == [(False, False, False), (True, True, True)]  # one write per change, none idle
    assert all(c.restart_count == 0 for c in pod.status.container_statuses)
    assert [c.container_id for c in pod.status.container_statuses] == [
        c.container_id for c in before.status.container_statuses
    ]
    assert int(pod.metadata.resource_version) > int(before.metadata.resource_version)
    with pytest.raises(KeyError):
        simcluster.fail_readiness("default", "no-such-pod")


async def test_env_change_refused_by_default(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", pod_manifest("envstock"))
    with pytest.raises(ApiException) as caught:
        await core.patch_namespaced_pod(
            "envstock",
            "default",
            {"spec": {"containers": [{"name": "app", "env": [{"name": "A", "value": "1"}]}]}},
        )
    assert caught.value.status == 422
    assert json.loads(caught.value.body)["details"]["causes"][0]["field"] == "spec"


async def test_extended_inplace_accepts_env_and_restarts_container(make_simcluster: MakeSimCluster) -> None:
    sim = await make_simcluster(SimConfig(extended_inplace=True))
    async with await api_client_for(sim) as api_client:
        core = client.CoreV1Api(api_client)
        manifest = pod_manifest("envext", volumes=[{"name": "cfg", "configMap": {"name": "v1"}}])
        manifest["spec"]["containers"][0]["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/cfg"}]
        await core.create_namespaced_pod("default", manifest)
        before = await ready_pod(core, "envext")
        await core.patch_namespaced_pod(
            "envext",
            "default",
            {"spec": {"containers": [{"name": "app", "env": [{"name": "A", "value": "1"}]}]}},
        )
        after = await wait_until(
            lambda: core.read_namespaced_pod("envext", "default"),
            lambda p: is_ready(p) and p.status.container_statuses[0].restart_count == 1,
        )
        assert after.metadata.uid == before.metadata.uid and after.status.pod_ip == before.status.pod_ip
        # A volume change restarts the container that mounts it.
        await core.patch_namespaced_pod(
            "envext", "default", {"spec": {"volumes": [{"name": "cfg", "configMap": {"name": "v2"}}]}}
        )
        after = await wait_until(
            lambda: core.read_namespaced_pod("envext", "default"),
            lambda p: is_ready(p) and p.status.container_statuses[0].restart_count == 2,
        )
        # A probe change applies without a restart (the seed's "Dynamic").
        await core.patch_namespaced_pod(
            "envext",
            "default",
            {
                "spec": {
                    "containers": [
                        {"name": "app", "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 3}}
                    ]
                }
            },
        )
        # A correct kubelet writes nothing for it (an unchanged status is not written), so there is no
        # event to wait for. Instead a second change that must show: the other container's image. The
        # kubelet decides restarts from the pod as it is when it looks, so once the "log" container has
        # restarted, the kubelet has weighed the probe change too; a restart of "app" for it would be done.
        await core.patch_namespaced_pod(
            "envext", "default", {"spec": {"containers": [{"name": "log", "image": "fluentd:1.1"}]}}
        )
        probed = await wait_until(
            lambda: core.read_namespaced_pod("envext", "default"),
            lambda p: is_ready(p) and p.status.container_statuses[1].restart_count == 1,
        )
        assert probed.status.container_statuses[0].restart_count == 2
        assert probed.spec.containers[0].readiness_probe.period_seconds == 3
        # Resources are still immutable (the seed's "Static": needs a new pod).
        with pytest.raises(ApiException) as caught:
            await core.patch_namespaced_pod(
                "envext",
                "default",
                {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "2"}}}]}},
            )
        assert caught.value.status == 422


async def test_scheduler_spreads_and_respects_capacity(make_simcluster: MakeSimCluster) -> None:
    nodes = (NodeConfig("n1", max_pods=2), NodeConfig("n2", max_pods=2))
    sim = await make_simcluster(SimConfig(nodes=nodes))
    async with await api_client_for(sim) as api_client:
        core = client.CoreV1Api(api_client)
        for i in range(5):
            await core.create_namespaced_pod("default", pod_manifest(f"s{i}"))
        pods = await wait_until(
            lambda: core.list_namespaced_pod("default"),
            lambda lst: (
                sum(1 for p in lst.items if p.spec.node_name) == 4
                and any(
                    c.type == "PodScheduled" and c.status == "False"
                    for p in lst.items
                    for c in p.status.conditions or []
                )
            ),
        )
        placement = sorted(p.spec.node_name for p in pods.items if p.spec.node_name)
        assert placement == ["n1", "n1", "n2", "n2"]
        pending = next(p for p in pods.items if not p.spec.node_name)
        assert pending.status.phase == "Pending"
        assert (
            next(c for c in pending.status.conditions if c.type == "PodScheduled").reason == "Unschedulable"
        )
        await core.delete_namespaced_pod("s0", "default", grace_period_seconds=0)
        await wait_until(
            lambda: core.read_namespaced_pod(pending.metadata.name, "default"),
            lambda p: bool(p.spec.node_name),
        )


async def test_graceful_pod_deletion_shows_terminating_then_goes(make_simcluster: MakeSimCluster) -> None:
    sim = await make_simcluster(SimConfig(timing=Timing(terminate=0.2)))
    async with await api_client_for(sim) as api_client:
        core = client.CoreV1Api(api_client)
        await core.create_namespaced_pod("default", pod_manifest("bye"))
        await ready_pod(core, "bye")
        await core.delete_namespaced_pod("bye", "default")
        terminating = await core.read_namespaced_pod("bye", "default")
        assert terminating.metadata.deletion_timestamp is not None
        # Writes to a terminating pod do not cut its termination short.
        await core.patch_namespaced_pod("bye", "default", {"metadata": {"labels": {"leaving": "yes"}}})
        assert (await core.read_namespaced_pod("bye", "default")).metadata.labels["leaving"] == "yes"
        await wait_until(lambda: core.list_namespaced_pod("default"), lambda lst: not lst.items)


async def test_first_pull_on_a_node_is_slower_than_cached(make_simcluster: MakeSimCluster) -> None:
    timing = Timing(pull_cold=0.4, pull_cached=0.0)
    sim = await make_simcluster(SimConfig(nodes=(NodeConfig("only"),), timing=timing))
    async with await api_client_for(sim) as api_client:
        core = client.CoreV1Api(api_client)
        durations = []
        for name in ("cold", "warm"):
            started = time.monotonic()
            await core.create_namespaced_pod("default", pod_manifest(name))
            await ready_pod(core, name)
            durations.append(time.monotonic() - started)
        assert durations[0] >= 0.4 > durations[1]


async def test_pvc_goes_pending_then_bound(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    created = await core.create_namespaced_persistent_volume_claim(
        "default",
        {
            "metadata": {"name": "data"},
            "status": {"phase": "Bound"},  # a client cannot set status at create
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}},
        },
    )
    assert created.status.phase == "Pending"
    bound = await wait_until(
        lambda: core.read_namespaced_persistent_volume_claim("data", "default"),
        lambda p: p.status.phase == "Bound",
    )
    assert bound.spec.volume_name and bound.status.capacity == {"storage": "2Gi"}


async def test_kubelet_records_events_for_the_pod(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", pod_manifest("noisy"))
    await ready_pod(core, "noisy")
    await core.patch_namespaced_pod(
        "noisy", "default", {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}
    )
    await wait_until(
        lambda: core.read_namespaced_pod("noisy", "default"),
        lambda p: is_ready(p) and p.status.container_statuses[0].restart_count == 1,
    )
    events = await core.list_namespaced_event("default", field_selector="involvedObject.name=noisy")
    reasons = [e.reason for e in events.items]  # names end in a timestamp: listed in time order
    assert reasons[:1] == ["Scheduled"]
    assert {"Pulling", "Pulled", "Created", "Started", "Killing"} <= set(reasons)
    killing = next(e for e in events.items if e.reason == "Killing")
    assert killing.message == "Container app definition changed, will be restarted"
    assert all(e.involved_object.uid == events.items[0].involved_object.uid for e in events.items)


async def test_pvc_in_use_stays_terminating_until_its_pod_is_gone(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    claim = await core.create_namespaced_persistent_volume_claim(
        "default",
        {
            "metadata": {"name": "used"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    assert claim.metadata.finalizers == ["kubernetes.io/pvc-protection"]
    await core.create_namespaced_pod(
        "default",
        pod_manifest("user", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "used"}}]),
    )
    await ready_pod(core, "user")
    await core.delete_namespaced_persistent_volume_claim("used", "default")
    terminating = await core.read_namespaced_persistent_volume_claim("used", "default")
    assert terminating.metadata.deletion_timestamp is not None
    await core.delete_namespaced_pod("user", "default")
    await wait_until(
        lambda: core.list_namespaced_persistent_volume_claim("default"), lambda claims: not claims.items
    )


async def test_failing_and_crashing_images(make_simcluster: MakeSimCluster) -> None:
    sim = await make_simcluster(SimConfig(failing_images=("*:missing",), crashing_images=("*:crash",)))
    async with await api_client_for(sim) as api_client:
        core = client.CoreV1Api(api_client)
        await core.create_namespaced_pod(
            "default", pod_manifest("badpull", containers=[{"name": "app", "image": "nginx:missing"}])
        )
        stuck = await wait_until(
            lambda: core.read_namespaced_pod("badpull", "default"),
            lambda p: (
                bool(p.status.container_statuses)
                and (p.status.container_statuses[0].state.waiting or client.V1ContainerStateWaiting()).reason
                == "ImagePullBackOff"
            ),
        )
        assert stuck.status.phase == "Pending" and not is_ready(stuck)
        # Fixing the image lets the same pod start (no restart: the container never ran).
        await core.patch_namespaced_pod(
            "badpull", "default", {"spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]}}
        )
        fixed = await ready_pod(core, "badpull")
        assert fixed.status.container_statuses[0].restart_count == 0

        await core.create_namespaced_pod(
            "default", pod_manifest("crasher", containers=[{"name": "app", "image": "nginx:crash"}])
        )
        crashing = await wait_until(
            lambda: core.read_namespaced_pod("crasher", "default"),
            lambda p: bool(p.status.container_statuses) and p.status.container_statuses[0].restart_count >= 2,
        )
        status = crashing.status.container_statuses[0]
        assert not is_ready(crashing) and crashing.status.phase == "Running"
        assert status.last_state.terminated.exit_code == 1
        events = await core.list_namespaced_event("default", field_selector="involvedObject.name=crasher")
        assert "BackOff" in {e.reason for e in events.items}
        await core.delete_namespaced_pod("crasher", "default", grace_period_seconds=0)
