"""Native sidecars (init containers with ``restartPolicy: Always``) on simcluster's kubelet, as Kubernetes
runs them: started before the app containers and kept running, restarted in place on their own when their
image changes; the API server accepts that image change and refuses any other init container change."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from .helpers import is_ready, pod_manifest, ready_pod

pytestmark = pytest.mark.asyncio(loop_scope="session")


def with_sidecar(name: str) -> dict[str, Any]:
    return pod_manifest(
        name,
        initContainers=[
            {"name": "setup", "image": "busybox:1.36"},
            {"name": "proxy", "image": "envoy:1.30", "restartPolicy": "Always"},
        ],
    )


def statuses(pod: client.V1Pod) -> dict[str, client.V1ContainerStatus]:
    return {
        s.name: s
        for s in [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]
    }


async def test_native_sidecar_starts_before_the_app_containers_and_keeps_running(
    k8s_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(k8s_client)
    created = await core.create_namespaced_pod("default", with_sidecar("native-start"))
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        "default",
        field_selector="metadata.name=native-start",
        resource_version=created.metadata.resource_version,
        timeout_seconds=5,
    )
    saw_initializing = False
    async for event in stream:
        pod = event["object"]
        seen = statuses(pod)
        if "app" in seen:
            # No app container is created before the native sidecar runs.
            assert seen["proxy"].state.running is not None, seen["proxy"]
        elif seen.get("proxy") is not None:
            conditions = {c.type: c.status for c in pod.status.conditions or []}
            saw_initializing = saw_initializing or conditions.get("Initialized") == "False"
        if is_ready(pod):
            break
    await stream.close()
    pod = await ready_pod(core, "native-start")
    seen = statuses(pod)
    assert saw_initializing
    assert seen["proxy"].state.running and seen["proxy"].ready and seen["proxy"].started
    assert seen["proxy"].image_id and seen["proxy"].restart_count == 0
    assert seen["setup"].state.terminated.reason == "Completed"
    assert seen["app"].state.running and seen["log"].state.running


async def test_native_sidecar_image_change_restarts_it_in_place(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", with_sidecar("native-upgrade"))
    before = await ready_pod(core, "native-upgrade")
    old = statuses(before)
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        "default",
        field_selector="metadata.name=native-upgrade",
        resource_version=before.metadata.resource_version,
        timeout_seconds=5,
    )
    # The API server lets a running pod's init container image change (ValidatePodUpdate).
    await core.patch_namespaced_pod(
        "native-upgrade", "default", {"spec": {"initContainers": [{"name": "proxy", "image": "envoy:1.31"}]}}
    )
    saw_not_ready = False
    async for event in stream:
        pod = event["object"]
        proxy = statuses(pod)["proxy"]
        if not is_ready(pod):
            saw_not_ready = True
            assert not proxy.ready  # the pod is out of service because its sidecar is
        if proxy.image == "envoy:1.31" and proxy.state.running and is_ready(pod):
            break
    await stream.close()
    after = await core.read_namespaced_pod("native-upgrade", "default")
    new = statuses(after)
    assert saw_not_ready
    assert (after.metadata.uid, after.status.pod_ip) == (before.metadata.uid, before.status.pod_ip)
    assert new["proxy"].restart_count == old["proxy"].restart_count + 1
    assert new["proxy"].image_id != old["proxy"].image_id and new["proxy"].ready
    assert new["proxy"].last_state.terminated is not None
    # The app containers and the completed init container are untouched.
    for name in ("app", "log", "setup"):
        assert new[name].restart_count == old[name].restart_count
        assert new[name].container_id == old[name].container_id
    assert new["setup"].image == "busybox:1.36"


async def test_other_init_container_changes_are_refused(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    await core.create_namespaced_pod("default", with_sidecar("native-args"))
    with pytest.raises(ApiException) as caught:
        await core.patch_namespaced_pod(
            "native-args", "default", {"spec": {"initContainers": [{"name": "proxy", "args": ["--debug"]}]}}
        )
    assert caught.value.status == 422
    assert json.loads(caught.value.body)["details"]["causes"][0]["field"] == "spec"
