"""A mark action (markNotReady/markReady) is two writes: the InPlaceUpdateReady condition through the
status subresource, then the pod's metadata. When the second answers 429 or 500, the retry writes only
what failed: the condition is already on the pod, and writing it again would be one more write exposed to
the same errors (with 30% of writes failing, a mark's tries ran out and it went back to the bus)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.executor.pods import has_condition
from services.executor.service import Executor
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.model.events import PodActionRequested, PodActionSucceeded
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
    refused: list[int] = []
    send = executor.api.request
    pod_url = f"{k8s_client.configuration.host}/api/v1/namespaces/default/pods/{pod_name}"

    async def counting_and_refusing_once(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method == "PATCH" and url == f"{pod_url}/status":
            status_writes.append(pod_name)
        if method == "PATCH" and url == pod_url and not refused:
            # the API server sheds the metadata write once, asking for no wait
            refused.append(429)
            error = ApiException(status=429, reason="TooManyRequests")
            error.headers = {"Retry-After": "0"}  # type: ignore[assignment]
            raise error
        return await send(method, url, *args, **kwargs)

    executor.api.request = counting_and_refusing_once  # type: ignore[method-assign]

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
