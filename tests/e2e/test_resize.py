"""Resources resized in place end to end (pods/resize on simcluster): a cpu change with resizePolicy
NotRequired restarts and recreates nothing; a memory change under RestartContainer restarts exactly the
container whose policy says so."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.cluster import Cluster, is_ready
from tests.plugins.stack import Stack, wait_for

# One stack for the module (each test in a namespace of its own): none stops or restarts a service.
pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="session")]

SERVICES = ("auditor", "watcher", "planner", "executor")
NAME = "sized"
RESTART_MEMORY = [
    {"resourceName": "cpu", "restartPolicy": "NotRequired"},
    {"resourceName": "memory", "restartPolicy": "RestartContainer"},
]


def _containers(cpu: str, memory: str, log_cpu: str = "50m", policy: Any = None) -> list[dict[str, Any]]:
    app: dict[str, Any] = {
        "name": "nginx",
        "image": "nginx:alpine",
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}},
    }
    if policy is not None:
        app["resizePolicy"] = policy
    log = {"name": "log", "image": "fluentd:1", "resources": {"requests": {"cpu": log_cpu, "memory": "32Mi"}}}
    return [app, log]


def _cloneset(containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": NAME, "labels": {"app": NAME}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {"metadata": {"labels": {"app": NAME}}, "spec": {"containers": containers}},
            "updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": 1},
        },
    }


def _status_requests(pod: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {
        s["name"]: ((s.get("resources") or {}).get("requests") or {})
        for s in (pod.get("status") or {}).get("containerStatuses") or []
    }


def _restarts(pod: dict[str, Any]) -> dict[str, int]:
    return {s["name"]: int(s.get("restartCount") or 0) for s in pod["status"]["containerStatuses"]}


async def _rolled(cluster: Cluster, wanted: dict[str, dict[str, str]]) -> dict[str, Any] | None:
    """The pods once all 3 are ready with ``wanted`` (container -> requests) actuated, and the status says
    all 3 are updated."""
    pods = await cluster.pods(NAME)
    if len(pods) != 3 or not all(is_ready(p) for p in pods.values()):
        return None
    for pod in pods.values():
        actual = _status_requests(pod)
        if any(actual.get(c) != r for c, r in wanted.items()):
            return None
    status = (await cluster.cloneset(NAME)).get("status") or {}
    if status.get("updatedReplicas") != 3 or status.get("updatedReadyReplicas", 3) != 3:
        return None
    return pods


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


@pytest.fixture
def cluster(shared_cluster: Cluster) -> Cluster:
    return shared_cluster


async def _start(stack: Stack, cluster: Cluster, containers: list[dict[str, Any]]) -> dict[str, Any]:
    await stack.ensure(*SERVICES)
    await cluster.create_cloneset(_cloneset(containers))
    first = {c["name"]: c["resources"]["requests"] for c in containers}
    pods: dict[str, Any] = await wait_for(lambda: _rolled(cluster, first), within=60, what="3 ready pods")
    return pods


async def test_cpu_resize_not_required_restarts_and_recreates_nothing(stack: Stack, cluster: Cluster) -> None:
    before = await _start(stack, cluster, _containers("100m", "64Mi"))
    await cluster.patch_cloneset(
        NAME, {"spec": {"template": {"spec": {"containers": _containers("200m", "64Mi")}}}}
    )
    wanted = {"nginx": {"cpu": "200m", "memory": "64Mi"}}
    after = await wait_for(lambda: _rolled(cluster, wanted), within=60, what="3 pods resized in place")
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == {
        n: p["metadata"]["uid"] for n, p in before.items()
    }
    assert all(_restarts(p) == {"nginx": 0, "log": 0} for p in after.values())
    assert stack.dead() == []


async def test_memory_resize_restarts_exactly_the_container_whose_policy_says_so(
    stack: Stack, cluster: Cluster
) -> None:
    before = await _start(stack, cluster, _containers("100m", "64Mi", policy=RESTART_MEMORY))
    changed = _containers("100m", "128Mi", log_cpu="80m", policy=RESTART_MEMORY)
    await cluster.patch_cloneset(NAME, {"spec": {"template": {"spec": {"containers": changed}}}})
    wanted = {"nginx": {"cpu": "100m", "memory": "128Mi"}, "log": {"cpu": "80m", "memory": "32Mi"}}
    after = await wait_for(lambda: _rolled(cluster, wanted), within=90, what="3 pods resized in place")
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == {
        n: p["metadata"]["uid"] for n, p in before.items()
    }
    assert all(_restarts(p) == {"nginx": 1, "log": 0} for p in after.values())
    assert stack.dead() == []
