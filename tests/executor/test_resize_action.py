"""The executor's ``resize`` action against simcluster: written through pods/resize when the cluster lists
it, reported already applied when the pod has the resources, refused with the reason when the cluster
does not serve the subresource."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from services.executor.pods import ActionFailed
from services.executor.resize import ResizeDiscovery, apply_resize
from services.kinds.cloneset.actions import ResizePod
from services.kinds.registry import requested_action
from services.model.events import PodActionRequested
from services.simcluster import SimConfig
from tests.plugins.simcluster import MakeSimCluster, api_client_for
from tests.simcluster.helpers import pod_manifest, ready_pod

pytestmark = pytest.mark.asyncio(loop_scope="session")

TARGET = {"app": {"requests": {"cpu": "300m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}}}


def _pod(name: str) -> dict[str, Any]:
    resources = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}}
    return pod_manifest(name, containers=[{"name": "app", "image": "nginx:1", "resources": resources}])


def _typed(request: PodActionRequested) -> tuple[PodActionRequested, ResizePod]:
    action = requested_action(request)
    assert isinstance(action, ResizePod)
    return request, action


def _request(pod: str, uid: str) -> PodActionRequested:
    details = {"action": "resize", "uid": uid, "resources": TARGET}
    return PodActionRequested(
        action_id=f"resize-{pod}", action="resize", namespace="default", pod=pod, details=details
    )


async def test_resize_written_then_already_applied(make_simcluster: MakeSimCluster) -> None:
    sim = await make_simcluster(SimConfig())
    async with await api_client_for(sim) as api:
        core = client.CoreV1Api(api)
        await core.create_namespaced_pod("default", _pod("grow"))
        pod = await ready_pod(core, "grow")
        discovery = ResizeDiscovery()
        uid, already = await apply_resize(core, discovery, *_typed(_request("grow", pod.metadata.uid)))
        assert (uid, already) == (pod.metadata.uid, False)
        resized = await core.read_namespaced_pod("grow", "default")
        assert resized.spec.containers[0].resources.requests["cpu"] == "300m"
        # Delivered again: nothing to write.
        assert await apply_resize(core, discovery, *_typed(_request("grow", pod.metadata.uid))) == (
            pod.metadata.uid,
            True,
        )


async def test_a_cluster_without_pods_resize_fails_the_action(make_simcluster: MakeSimCluster) -> None:
    sim = await make_simcluster(SimConfig(disabled_resources=("pods/resize",)))
    async with await api_client_for(sim) as api:
        core = client.CoreV1Api(api)
        await core.create_namespaced_pod("default", _pod("old"))
        pod = await ready_pod(core, "old")
        with pytest.raises(ActionFailed) as failed:
            await apply_resize(core, ResizeDiscovery(), *_typed(_request("old", pod.metadata.uid)))
        assert "does not serve pods/resize" in failed.value.reason and not failed.value.retryable
        unchanged = await core.read_namespaced_pod("old", "default")
        assert unchanged.spec.containers[0].resources.requests["cpu"] == "100m"
