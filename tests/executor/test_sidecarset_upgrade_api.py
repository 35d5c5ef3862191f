"""The executor's in-place sidecar upgrade against a Kubernetes API over HTTP (simcluster): it applies once,
a redelivery is recognised by the action id, a replaced pod is refused, and the kubelet restarts only the
sidecar."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from services.executor.pods import ActionFailed
from services.executor.sidecarset import apply_sidecar_upgrade
from services.kinds.registry import requested_action
from services.kinds.sidecarset.actions import UpdateSidecarInPlace
from services.kinds.sidecarset.rules.upgrade import plan_sidecarset
from services.model import sidecarset as ss
from services.model.events import PodActionRequested
from services.model.sidecarset_streams import SIDECARSET_ACTION_ANNOTATION, UPDATE_SIDECAR_ACTION
from tests.kinds.sidecarset.test_upgrade import NEW, OLD, sidecarset

pytestmark = pytest.mark.asyncio(loop_scope="session")


def typed(request: PodActionRequested) -> UpdateSidecarInPlace:
    action = requested_action(request)
    assert isinstance(action, UpdateSidecarInPlace)
    return action


async def read(core: client.CoreV1Api, name: str) -> dict[str, Any]:
    response: Any = await core.read_namespaced_pod(name, "default", _preload_content=False)
    return cast(dict[str, Any], json.loads(await response.read()))


async def running(core: client.CoreV1Api, name: str, image: str) -> dict[str, Any]:
    for _ in range(500):
        pod = await read(core, name)
        statuses = {c["name"]: c for c in (pod.get("status") or {}).get("containerStatuses") or []}
        if statuses.get("tools", {}).get("image") == image and all(c.get("ready") for c in statuses.values()):
            return pod
        await asyncio.sleep(0.02)
    raise AssertionError(f"{name} never ran {image}")


async def test_applied_once_and_only_the_sidecar_restarts(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    base = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "nginx"}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.15.1"}]},
    }
    injected, _ = ss.inject(base, [ss.parse_sidecarset(sidecarset(OLD))], now=datetime.now(UTC))
    await core.create_namespaced_pod("default", body=cast(Any, injected))
    before = await running(core, "web", OLD)

    upgrade = plan_sidecarset(sidecarset(NEW), [before], datetime.now(UTC)).upgrades[0]
    request = PodActionRequested(
        action_id="a-1",
        action=UPDATE_SIDECAR_ACTION,
        namespace="default",
        pod="web",
        details={"uid": upgrade.uid, "sidecarSet": "test-sidecarset", "patch": upgrade.patch},
    )
    assert await apply_sidecar_upgrade(core, request, typed(request)) == (upgrade.uid, False)
    assert await apply_sidecar_upgrade(core, request, typed(request)) == (
        upgrade.uid,
        True,
    )  # a redelivery changes nothing
    after = await running(core, "web", NEW)
    statuses = {c["name"]: c for c in after["status"]["containerStatuses"]}
    assert statuses["tools"]["restartCount"] == 1 and statuses["app"]["restartCount"] == 0
    assert [c["image"] for c in after["spec"]["containers"]] == [NEW, "nginx:1.15.1"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["status"]["podIP"] == before["status"]["podIP"]
    annotations = after["metadata"]["annotations"]
    assert annotations[SIDECARSET_ACTION_ANNOTATION] == "a-1"
    assert (
        ss.pod_sidecar_revisions(after)["test-sidecarset"].hash == ss.parse_sidecarset(sidecarset(NEW)).hash
    )

    replaced = PodActionRequested(
        action_id="a-2",
        action=UPDATE_SIDECAR_ACTION,
        namespace="default",
        pod="web",
        details={"uid": "an-older-incarnation", "sidecarSet": "test-sidecarset", "patch": upgrade.patch},
    )
    with pytest.raises(ActionFailed, match="was replaced"):
        await apply_sidecar_upgrade(core, replaced, typed(replaced))
