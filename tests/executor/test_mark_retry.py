"""A mark action (markNotReady/markReady) is two writes: the InPlaceUpdateReady condition through the
status subresource, then the pod's metadata. When the second answers 429 or 500, the retry writes only
what failed: the condition is already on the pod, and writing it again would be one more write exposed to
the same errors (with 30% of writes failing, a mark's tries ran out and it went back to the bus)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.executor.pods import has_condition
from services.executor.service import Executor
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.model.events import PodActionFailed, PodActionRequested, PodActionSucceeded
from services.model.streams import ACTION_ID_ANNOTATION, actions_stream
from services.simcluster import SimCluster
from tests.executor.test_concurrency import planned_round

CONDITION = {"type": "InPlaceUpdateReady", "status": "False", "reason": "StartInPlaceUpdate"}


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], False),
        ([{**CONDITION, "lastTransitionTime": "2026-01-01T00:00:00Z"}], True),  # the time may differ
        ([{**CONDITION, "status": "True"}], False),
        ([{**CONDITION, "reason": "Other"}], False),
        ([{"type": "Ready", "status": "False", "reason": "StartInPlaceUpdate"}], False),
    ],
)
def test_has_condition(conditions: list[dict[str, Any]], expected: bool) -> None:
    pod = {"status": {"conditions": conditions}}
    assert has_condition(pod, {**CONDITION, "lastTransitionTime": "2026-12-01T00:00:00Z"}) is expected


@pytest.mark.asyncio(loop_scope="session")
async def test_a_mark_whose_metadata_write_failed_writes_its_condition_once(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    pod_name = f"{workload}-0"
    core = client.CoreV1Api(k8s_client)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": "default", "labels": {"app": workload}},
        "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
    }
    await core.create_namespaced_pod("default", pod)
    round_events = planned_round(workload, [pod_name])  # markNotReady, then updateInPlace
    await event_store.append(round_events, expected_version=0)
    envelope = round_events[1]
    request = envelope.payload
    assert isinstance(request, PodActionRequested) and request.action == "markNotReady"
    executor = Executor(settings, event_store, k8s_client)
    status_writes: list[str] = []
    patch_status, patch = executor.core.patch_namespaced_pod_status, executor.core.patch_namespaced_pod
    refused: list[int] = []

    async def counting_patch_status(*args: Any, **kwargs: Any) -> Any:
        status_writes.append(args[0])
        return await patch_status(*args, **kwargs)

    async def refusing_once(*args: Any, **kwargs: Any) -> Any:
        if not refused:  # the API server sheds the metadata write once, asking for no wait
            refused.append(429)
            error = ApiException(status=429, reason="TooManyRequests")
            error.headers = {"Retry-After": "0"}  # type: ignore[assignment]
            raise error
        return await patch(*args, **kwargs)

    executor.core.patch_namespaced_pod_status = counting_patch_status  # type: ignore[method-assign]
    executor.core.patch_namespaced_pod = refusing_once  # type: ignore[method-assign]

    await executor.execute(envelope, request)

    assert refused == [429]
    assert status_writes == [pod_name]  # the retry did not write the condition again
    after = await core.read_namespaced_pod(pod_name, "default")
    assert after.metadata.annotations[ACTION_ID_ANNOTATION] == request.action_id
    assert [(c.type, c.status) for c in after.status.conditions if c.type == "InPlaceUpdateReady"] == [
        ("InPlaceUpdateReady", "False")
    ]
    [outcome] = [
        s.envelope.payload for s in await event_store.read_stream(actions_stream("default", workload))
    ][-1:]
    assert isinstance(outcome, PodActionSucceeded) and not outcome.already_applied


async def ready_pod_with_gate(core: client.CoreV1Api, workload: str) -> str:
    """A running pod whose readiness gate InPlaceUpdateReady is True, so the kubelet answers a mark's
    condition with a status write of its own (Ready follows the gate)."""
    pod_name = f"{workload}-0"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": "default", "labels": {"app": workload}},
        "spec": {
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
            "containers": [{"name": "app", "image": "nginx:alpine"}],
        },
    }
    await core.create_namespaced_pod("default", pod)
    gate = {"type": "InPlaceUpdateReady", "status": "True", "reason": ""}
    await core.patch_namespaced_pod_status(pod_name, "default", {"status": {"conditions": [gate]}})
    await wait_for_ready(core, pod_name, "True")
    return pod_name


async def wait_for_ready(core: client.CoreV1Api, pod_name: str, status: str) -> None:
    for _ in range(500):
        pod = await core.read_namespaced_pod(pod_name, "default")
        if any(c.type == "Ready" and c.status == status for c in pod.status.conditions or []):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"pod {pod_name} never Ready={status}")


@pytest.mark.asyncio(loop_scope="session")
async def test_a_mark_writes_the_pods_metadata_once_although_the_kubelet_wrote_its_status_meanwhile(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    # Each write of a mark is one more exposed to the API's errors. The kubelet answers the condition by
    # writing Ready=False; a metadata patch carrying the resourceVersion read before that conflicted
    # every time and was written again.
    workload = f"web{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_client)
    pod_name = await ready_pod_with_gate(core, workload)
    round_events = planned_round(workload, [pod_name])
    await event_store.append(round_events, expected_version=0)
    envelope = round_events[1]
    request = envelope.payload
    assert isinstance(request, PodActionRequested) and request.action == "markNotReady"
    executor = Executor(settings, event_store, k8s_client)
    patch_status, patch = executor.core.patch_namespaced_pod_status, executor.core.patch_namespaced_pod
    metadata_writes: list[int] = []

    async def status_then_kubelet(*args: Any, **kwargs: Any) -> Any:
        answer = await patch_status(*args, **kwargs)
        await wait_for_ready(core, pod_name, "False")  # the kubelet has written the pod's status
        return answer

    async def counting_patch(*args: Any, **kwargs: Any) -> Any:
        answer = await patch(*args, **kwargs)
        metadata_writes.append(1)
        return answer

    executor.core.patch_namespaced_pod_status = status_then_kubelet  # type: ignore[method-assign]
    executor.core.patch_namespaced_pod = counting_patch  # type: ignore[method-assign]

    await executor.execute(envelope, request)

    assert len(metadata_writes) == 1
    after = await core.read_namespaced_pod(pod_name, "default")
    assert after.metadata.annotations[ACTION_ID_ANNOTATION] == request.action_id
    [outcome] = [
        s.envelope.payload for s in await event_store.read_stream(actions_stream("default", workload))
    ][-1:]
    assert isinstance(outcome, PodActionSucceeded) and not outcome.already_applied


@pytest.mark.asyncio(loop_scope="session")
async def test_a_mark_does_not_land_on_a_pod_replaced_since_it_was_read(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    # Without a resourceVersion precondition, the pod's uid in the patch keeps the mark off a new pod
    # of the same name (created between the executor's read and its write).
    workload = f"web{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_client)
    pod_name = await ready_pod_with_gate(core, workload)
    round_events = planned_round(workload, [pod_name])
    await event_store.append(round_events, expected_version=0)
    envelope = round_events[1]
    request = envelope.payload
    assert isinstance(request, PodActionRequested)
    executor = Executor(settings, event_store, k8s_client)
    patch = executor.core.patch_namespaced_pod
    old = await core.read_namespaced_pod(pod_name, "default")

    async def replaced_first(*args: Any, **kwargs: Any) -> Any:
        await core.delete_namespaced_pod(pod_name, "default", grace_period_seconds=0)
        await core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": pod_name, "labels": {"app": workload}},
                "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
            },
        )
        return await patch(*args, **kwargs)

    executor.core.patch_namespaced_pod = replaced_first  # type: ignore[method-assign]

    await executor.execute(envelope, request)

    new = await core.read_namespaced_pod(pod_name, "default")
    assert new.metadata.uid != old.metadata.uid
    assert ACTION_ID_ANNOTATION not in (new.metadata.annotations or {})
    [outcome] = [
        s.envelope.payload for s in await event_store.read_stream(actions_stream("default", workload))
    ][-1:]
    assert isinstance(outcome, PodActionFailed) and not outcome.retryable
