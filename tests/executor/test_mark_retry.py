"""A mark action (markNotReady/markReady) is one write: the InPlaceUpdateReady condition, the pod's labels
and the action id together, through the pods/status subresource, with the pod's uid (not its
resourceVersion) as precondition. Each write is one more exposed to the API's errors (429 with
Retry-After, 500), and the kubelet answers the condition with a status write of its own, which a
resourceVersion precondition met as a conflict and paid with one more write."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.executor.service import Executor
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.events import Envelope, PodActionFailed, PodActionRequested, PodActionSucceeded
from services.model.pod_writes import has_condition
from services.model.streams import ACTION_ID_ANNOTATION
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


LIFECYCLE = {"metadata": {"labels": {"lifecycle.apps.kruise.io/state": "PreparingUpdate"}}}


async def mark_request(event_store: EventStore, workload: str, pod_name: str) -> Envelope:
    """The markNotReady of a round (then updateInPlace), stored; with a lifecycle label to write too."""
    round_events = planned_round(workload, [pod_name])
    mark = round_events[1]
    assert isinstance(mark.payload, PodActionRequested) and mark.payload.action == "markNotReady"
    details = {**mark.payload.details, "patch": LIFECYCLE}
    round_events[1] = msgspec.structs.replace(
        mark, payload=msgspec.structs.replace(mark.payload, details=details)
    )
    await event_store.append(round_events, expected_version=0)
    return round_events[1]


async def last_outcome(event_store: EventStore, workload: str) -> Any:
    return [
        s.envelope.payload
        for s in await event_store.read_stream(CLONESET.actions_stream("default", workload))
    ][-1]


class CountingWrites:
    """Counts the executor's pod writes (pods and pods/status) at the client's one request function;
    ``before_status`` runs before each status write (its own requests pass uncounted), ``refuse_status``
    answers that many status writes with 429 (Retry-After: 0) first."""

    def __init__(self, executor: Executor, before_status: Any = None, refuse_status: int = 0) -> None:
        self.pod_writes = 0
        self.status_writes = 0
        self._test_writing = False  # the test's own writes go through the same client
        send = executor.api.request

        async def counting(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if self._test_writing or method != "PATCH" or "/pods/" not in url:
                return await send(method, url, *args, **kwargs)
            if not url.endswith("/status"):
                self.pod_writes += 1
                return await send(method, url, *args, **kwargs)
            self.status_writes += 1
            if before_status is not None:
                self._test_writing = True
                try:
                    await before_status()
                finally:
                    self._test_writing = False
            if self.status_writes <= refuse_status:
                error = ApiException(status=429, reason="TooManyRequests")
                error.headers = {"Retry-After": "0"}  # type: ignore[assignment]
                raise error
            return await send(method, url, *args, **kwargs)

        executor.api.request = counting  # type: ignore[method-assign]


@pytest.mark.asyncio(loop_scope="session")
async def test_a_mark_is_one_write_though_the_kubelet_wrote_the_pod_since_it_was_read(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_client)
    pod_name = await ready_pod_with_gate(core, workload)
    envelope = await mark_request(event_store, workload, pod_name)
    executor = Executor(settings, event_store, k8s_client)

    async def kubelet_writes_first() -> None:
        # The pod changes under the executor between its read and its write (the kubelet's status write).
        await core.patch_namespaced_pod_status(
            pod_name, "default", {"status": {"conditions": [{"type": "Example", "status": "True"}]}}
        )

    writes = CountingWrites(executor, before_status=kubelet_writes_first)
    assert isinstance(envelope.payload, PodActionRequested)

    await executor.execute(envelope, envelope.payload)

    assert (writes.status_writes, writes.pod_writes) == (1, 0)
    after = await core.read_namespaced_pod(pod_name, "default")
    assert after.metadata.annotations[ACTION_ID_ANNOTATION] == envelope.payload.action_id
    assert after.metadata.labels["lifecycle.apps.kruise.io/state"] == "PreparingUpdate"
    assert [c.status for c in after.status.conditions if c.type == "InPlaceUpdateReady"] == ["False"]
    await wait_for_ready(core, pod_name, "False")  # the kubelet follows the readiness gate
    outcome = await last_outcome(event_store, workload)
    assert isinstance(outcome, PodActionSucceeded) and not outcome.already_applied


@pytest.mark.asyncio(loop_scope="session")
async def test_a_mark_refused_with_429_is_written_again_whole_once(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_client)
    pod_name = await ready_pod_with_gate(core, workload)
    envelope = await mark_request(event_store, workload, pod_name)
    executor = Executor(settings, event_store, k8s_client)
    writes = CountingWrites(executor, refuse_status=1)
    assert isinstance(envelope.payload, PodActionRequested)

    await executor.execute(envelope, envelope.payload)

    assert (writes.status_writes, writes.pod_writes) == (2, 0)  # the refused one, then the one that landed
    after = await core.read_namespaced_pod(pod_name, "default")
    assert after.metadata.annotations[ACTION_ID_ANNOTATION] == envelope.payload.action_id
    assert [c.status for c in after.status.conditions if c.type == "InPlaceUpdateReady"] == ["False"]
    outcome = await last_outcome(event_store, workload)
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
    envelope = await mark_request(event_store, workload, pod_name)
    executor = Executor(settings, event_store, k8s_client)
    old = await core.read_namespaced_pod(pod_name, "default")

    async def replaced() -> None:
        await core.delete_namespaced_pod(pod_name, "default", grace_period_seconds=0)
        await core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": pod_name, "labels": {"app": workload}},
                "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
            },
        )

    CountingWrites(executor, before_status=replaced)
    assert isinstance(envelope.payload, PodActionRequested)

    await executor.execute(envelope, envelope.payload)

    new = await core.read_namespaced_pod(pod_name, "default")
    assert new.metadata.uid != old.metadata.uid
    assert ACTION_ID_ANNOTATION not in (new.metadata.annotations or {})
    outcome = await last_outcome(event_store, workload)
    assert isinstance(outcome, PodActionFailed) and not outcome.retryable
