"""An in-place update with no grace period is one action: the executor reads the pod once, writes the
InPlaceUpdateReady=False condition alone through pods/status (uid precondition, no action id), then the
spec patch with the action id as a JSON patch computed from the pod that write returned, testing each
value it changes (the action id among them): the kubelet's status write in between does not conflict
with it, a change to a field it writes does (422, re-read). A crash between the two writes
leaves the action not applied: its redelivery finds the condition in place and writes the spec once. The
action counts as applied by its id or by the in-place update state its patch writes, which stays after
markReady replaces the id, on the pod as read and as the condition write returned it."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client

from services.executor.pods import patch_applied
from services.executor.service import Executor
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.kinds.registry import CLONESET
from services.model.cloneset import INPLACE_STATE_ANNOTATION
from services.model.events import (
    Envelope,
    PodActionFailed,
    PodActionRequested,
    PodActionSucceeded,
    RoundPlanned,
    new_event,
)
from services.model.streams import ACTION_ID_ANNOTATION, derived_id
from services.simcluster import SimCluster
from tests.executor.test_mark_retry import ready_pod_with_gate, wait_for_ready

NOT_READY = {
    "type": "InPlaceUpdateReady",
    "status": "False",
    "reason": "StartInPlaceUpdate",
    "lastTransitionTime": "2026-12-01T00:00:00Z",
}
# The in-place update state the planner writes with the spec (this round's revision and updateTimestamp).
STATE = (
    '{"revision":"web-222","updateTimestamp":"2026-12-01T00:00:00Z","lastContainerStatuses":{"app":{}},'
    '"updateImages":true,"containerBatchesRecord":[{"timestamp":"2026-12-01T00:00:00Z","containers":["app"]}]}'
)
IMAGE_PATCH = {
    "metadata": {"annotations": {INPLACE_STATE_ANNOTATION: STATE}},
    "spec": {"containers": [{"name": "app", "image": "nginx:mainline"}]},
}
READY = {
    "type": "InPlaceUpdateReady",
    "status": "True",
    "reason": "",
    "lastTransitionTime": "2026-12-01T00:00:09Z",
}


async def update_request(event_store: EventStore, workload: str, pod_name: str, uid: str) -> Envelope:
    """A round with the one updateInPlace the planner plans for a restart with no grace period, stored."""
    details = {"patch": IMAGE_PATCH, "notReady": NOT_READY, "uid": uid, "change": "Rebuild"}
    return await planned(event_store, workload, "updateInPlace", pod_name, details)


async def planned(
    event_store: EventStore, workload: str, action: str, pod_name: str, details: dict[str, Any]
) -> Envelope:
    """A round planning one action, stored after the workload's earlier rounds."""
    stream = CLONESET.decisions_stream("default", workload)
    version = await event_store.stream_version(stream)
    round_id = uuid.uuid4()
    now = datetime.now(UTC)
    request = PodActionRequested(
        action_id=str(derived_id("decision", round_id, 0)),
        action=action,
        namespace="default",
        pod=pod_name,
        details=details,
    )
    envelopes = [
        new_event(
            RoundPlanned(through={}, now=now, input_sha256="0" * 64, rules=10),
            stream=stream,
            stream_version=version + 1,
            occurred_at=now,
            event_id=round_id,
        ),
        new_event(
            request,
            stream=stream,
            stream_version=version + 2,
            occurred_at=now,
            event_id=derived_id("decision", round_id, 0),
            causation_id=round_id,
        ),
    ]
    await event_store.append(envelopes, expected_version=version)
    return envelopes[1]


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, False),
        ({ACTION_ID_ANNOTATION: "this"}, True),
        ({ACTION_ID_ANNOTATION: "markReady-after", INPLACE_STATE_ANNOTATION: STATE}, True),  # markReady since
        (
            {ACTION_ID_ANNOTATION: "other", INPLACE_STATE_ANNOTATION: STATE.replace("web-222", "web-111")},
            False,
        ),
        ({INPLACE_STATE_ANNOTATION: STATE.replace("00:00:00Z", "00:00:05Z")}, False),  # another round's
    ],
)
def test_an_update_counts_as_applied_by_its_id_or_the_in_place_state_it_writes(
    annotations: dict[str, str], expected: bool
) -> None:
    pod = {"metadata": {"annotations": annotations}}
    assert patch_applied(pod, "this", IMAGE_PATCH) is expected
    # A patch writing no in-place state (recreate, lifecycle move) is applied by its id alone.
    without_state = {"metadata": {"labels": {"x": "y"}}}
    assert patch_applied(pod, "this", without_state) is (annotations.get(ACTION_ID_ANNOTATION) == "this")


class PodCalls:
    """The executor's pod requests, in order ("GET", "PATCH", "PATCH status") with their bodies;
    ``before_spec`` runs before each spec patch is sent (a crash, or another writer), ``before_status``
    before each status write (another executor)."""

    def __init__(
        self,
        executor: Executor,
        before_spec: Callable[[Any], Awaitable[None]] | None = None,
        before_status: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.calls: list[tuple[str, Any]] = []
        self._test_calling = False  # the test's own requests go through the same client
        send = executor.api.request

        async def recording(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if self._test_calling or "/pods/" not in url:
                return await send(method, url, *args, **kwargs)
            kind = f"{method} status" if url.endswith("/status") else method
            self.calls.append((kind, kwargs.get("body")))
            if kind == "PATCH" and before_spec is not None:
                self._test_calling = True
                try:
                    await before_spec(kwargs.get("body") or {})
                finally:
                    self._test_calling = False
            if kind == "PATCH status" and before_status is not None:
                self._test_calling = True
                try:
                    await before_status()
                finally:
                    self._test_calling = False
            return await send(method, url, *args, **kwargs)

        executor.api.request = recording  # type: ignore[method-assign]
        self._detach = lambda: setattr(executor.api, "request", send)

    def detach(self) -> None:
        """Stop recording (the executors of a test share one client)."""
        self._detach()

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.calls]


async def outcomes(event_store: EventStore, workload: str) -> list[Any]:
    stored = await event_store.read_stream(CLONESET.actions_stream("default", workload))
    return [
        s.envelope.payload
        for s in stored
        if isinstance(s.envelope.payload, PodActionSucceeded | PodActionFailed)
    ]


async def gated_pod(core: client.CoreV1Api, workload: str) -> tuple[str, str]:
    """A running pod with the InPlaceUpdateReady readiness gate: the kubelet answers the condition with a
    status write of its own (Ready False), which may land between the executor's two writes."""
    pod_name = await ready_pod_with_gate(core, workload)
    pod = await core.read_namespaced_pod(pod_name, "default")
    return pod_name, pod.metadata.uid


async def ungated_pod(core: client.CoreV1Api, workload: str) -> tuple[str, str]:
    """A pod without the gate: nobody else writes it, so the executor's requests are all there is."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{workload}-0", "namespace": "default", "labels": {"app": workload}},
        "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
    }
    created = await core.create_namespaced_pod("default", pod)
    return created.metadata.name, created.metadata.uid


def in_place_ready(pod: Any) -> list[str]:
    return [c.status for c in pod.status.conditions or [] if c.type == "InPlaceUpdateReady"]


def values_tested(operations: list[dict[str, Any]]) -> dict[str, Any]:
    """The values a JSON patch tests, by path."""
    return {op["path"]: op["value"] for op in operations if op["op"] == "test"}


@pytest.mark.asyncio(loop_scope="session")
async def test_one_read_the_condition_alone_then_the_spec_computed_from_what_it_returned(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_client)
    pod_name, uid = await ungated_pod(core, workload)
    envelope = await update_request(event_store, workload, pod_name, uid)
    executor = Executor(settings, event_store, k8s_client)
    seen_before_spec: list[Any] = []

    async def look(body: Any) -> None:
        # What the spec patch is computed from: the pod as the status write left it.
        pod = await core.read_namespaced_pod(pod_name, "default")
        seen_before_spec.append(
            (in_place_ready(pod), (pod.metadata.annotations or {}).get(ACTION_ID_ANNOTATION))
        )

    calls = PodCalls(executor, before_spec=look)
    assert isinstance(envelope.payload, PodActionRequested)

    await executor.execute(envelope, envelope.payload)

    assert calls.kinds() == ["GET", "PATCH status", "PATCH"]  # one read, no second GET
    status_body = calls.calls[1][1]
    assert status_body == {"metadata": {"uid": uid}, "status": {"conditions": [NOT_READY]}}  # no action id
    tested = values_tested(calls.calls[2][1])
    # The same incarnation, no action applied since (the pod had no annotations), the image it replaces:
    # no resourceVersion.
    assert tested["/metadata/uid"] == uid
    assert tested["/metadata/annotations"] is None
    assert tested["/spec/containers/0/image"] == "nginx:alpine"
    ((condition, annotated),) = seen_before_spec
    assert condition == ["False"] and annotated is None  # condition written, action not yet applied
    after = await core.read_namespaced_pod(pod_name, "default")
    assert after.spec.containers[0].image == "nginx:mainline"
    assert after.metadata.annotations[ACTION_ID_ANNOTATION] == envelope.payload.action_id
    assert in_place_ready(after) == ["False"]
    (outcome,) = await outcomes(event_store, workload)
    assert isinstance(outcome, PodActionSucceeded) and not outcome.already_applied


class Crash(Exception):
    """The executor dies between the two writes (nothing reports it; the bus redelivers the action)."""


@pytest.mark.asyncio(loop_scope="session")
async def test_a_crash_between_the_two_writes_is_redelivered_and_applies_the_spec_once(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_client)
    pod_name, uid = await gated_pod(core, workload)
    envelope = await update_request(event_store, workload, pod_name, uid)
    assert isinstance(envelope.payload, PodActionRequested)
    first = Executor(settings, event_store, k8s_client)

    async def crash(_: dict[str, Any]) -> None:
        raise Crash

    crashing = PodCalls(first, before_spec=crash)
    with pytest.raises(Crash):
        await first.execute(envelope, envelope.payload)
    crashing.detach()

    halfway = await core.read_namespaced_pod(pod_name, "default")
    assert in_place_ready(halfway) == ["False"]  # the condition landed ...
    assert ACTION_ID_ANNOTATION not in (halfway.metadata.annotations or {})  # ... the action did not
    assert halfway.spec.containers[0].image == "nginx:alpine"
    assert await outcomes(event_store, workload) == []

    # The redelivery, on a fresh executor (the first one died).
    second = Executor(settings, event_store, k8s_client)
    calls = PodCalls(second)
    await second.execute(envelope, envelope.payload)
    calls.detach()

    # The condition is in place: nothing to write again (its lastTransitionTime stays); the spec once.
    assert calls.kinds() == ["GET", "PATCH"]
    after = await core.read_namespaced_pod(pod_name, "default")
    assert after.spec.containers[0].image == "nginx:mainline"
    assert after.metadata.annotations[ACTION_ID_ANNOTATION] == envelope.payload.action_id
    assert in_place_ready(after) == ["False"]
    await wait_for_ready(core, pod_name, "False")  # out of service (its readiness gate) until markReady
    (outcome,) = await outcomes(event_store, workload)  # one terminal event
    assert isinstance(outcome, PodActionSucceeded) and not outcome.already_applied

    # Delivered once more (an ack lost): already applied, nothing written, no second outcome.
    third = Executor(settings, event_store, k8s_client)
    again = PodCalls(third)
    await third.execute(envelope, envelope.payload)
    assert "PATCH" not in again.kinds()
    assert len(await outcomes(event_store, workload)) == 1


@pytest.mark.asyncio(loop_scope="session")
async def test_another_writer_between_the_writes_conflicts_only_on_a_field_the_patch_writes(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_client)
    pod_name, uid = await ungated_pod(core, workload)
    envelope = await update_request(event_store, workload, pod_name, uid)
    assert isinstance(envelope.payload, PodActionRequested)
    executor = Executor(settings, event_store, k8s_client)

    async def label_elsewhere(_: Any) -> None:
        await core.patch_namespaced_pod(pod_name, "default", {"metadata": {"labels": {"other": "x"}}})

    calls = PodCalls(executor, before_spec=label_elsewhere)
    await executor.execute(envelope, envelope.payload)
    calls.detach()

    # A label the patch does not write: no conflict, both kept.
    assert calls.kinds() == ["GET", "PATCH status", "PATCH"]
    after = await core.read_namespaced_pod(pod_name, "default")
    assert after.metadata.labels["other"] == "x"
    assert after.spec.containers[0].image == "nginx:mainline"
    assert after.metadata.annotations[ACTION_ID_ANNOTATION] == envelope.payload.action_id

    # The next update, while someone changes the image it replaces between its two writes.
    second_pod, second_uid = await ungated_pod(core, f"{workload}b")
    second = await update_request(event_store, f"{workload}b", second_pod, second_uid)
    assert isinstance(second.payload, PodActionRequested)
    others = 0

    async def image_elsewhere(_: Any) -> None:
        nonlocal others
        if others == 0:
            others += 1
            image = {"spec": {"containers": [{"name": "app", "image": "nginx:perl"}]}}
            await core.patch_namespaced_pod(second_pod, "default", image)

    calls = PodCalls(executor, before_spec=image_elsewhere)
    await executor.execute(second, second.payload)
    calls.detach()

    # The test of the image refused the patch (422): re-read, condition already there, patched again.
    assert calls.kinds() == ["GET", "PATCH status", "PATCH", "GET", "PATCH"]
    assert values_tested(calls.calls[4][1])["/spec/containers/0/image"] == "nginx:perl"
    after = await core.read_namespaced_pod(second_pod, "default")
    assert after.spec.containers[0].image == "nginx:mainline"
    assert after.metadata.annotations[ACTION_ID_ANNOTATION] == second.payload.action_id
    (outcome,) = await outcomes(event_store, f"{workload}b")
    assert isinstance(outcome, PodActionSucceeded) and not outcome.already_applied


@pytest.mark.asyncio(loop_scope="session")
async def test_a_redelivery_after_mark_ready_leaves_the_pod_in_service(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    # The executor dies after both writes, before reporting. The watcher sees the action id, so the planner
    # counts the update done and, the containers restarted, plans markReady, which puts its own id on the
    # pod. Then the update is redelivered: its id is gone and its condition is True again.
    workload = f"web{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_client)
    pod_name, uid = await gated_pod(core, workload)
    update = await update_request(event_store, workload, pod_name, uid)
    assert isinstance(update.payload, PodActionRequested)
    died = Executor(settings, event_store, k8s_client)
    await died.apply(update.payload)  # both writes landed; no outcome reported
    ready = await planned(event_store, workload, "markReady", pod_name, {"condition": READY, "uid": uid})
    assert isinstance(ready.payload, PodActionRequested)
    await Executor(settings, event_store, k8s_client).execute(ready, ready.payload)
    await wait_for_ready(core, pod_name, "True")
    back = await core.read_namespaced_pod(pod_name, "default")
    assert back.metadata.annotations[ACTION_ID_ANNOTATION] == ready.payload.action_id

    redelivered = Executor(settings, event_store, k8s_client)
    calls = PodCalls(redelivered)
    await redelivered.execute(update, update.payload)
    calls.detach()

    assert calls.kinds() == ["GET"]  # no condition write, no second patch
    after = await core.read_namespaced_pod(pod_name, "default")
    assert in_place_ready(after) == ["True"]  # still in service
    assert after.metadata.annotations[ACTION_ID_ANNOTATION] == ready.payload.action_id
    assert after.metadata.resource_version == back.metadata.resource_version
    update_outcomes = [
        o for o in await outcomes(event_store, workload) if o.action_id == update.payload.action_id
    ]
    (outcome,) = update_outcomes
    assert isinstance(outcome, PodActionSucceeded) and outcome.already_applied


@pytest.mark.asyncio(loop_scope="session")
async def test_two_executors_at_once_apply_the_update_once(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    # Delivered twice at once (an ack deadline passed): both executors read the pod before either wrote it,
    # and the first applies the whole action between the second one's read and its condition write.
    workload = f"web{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_client)
    pod_name, uid = await ungated_pod(core, workload)
    envelope = await update_request(event_store, workload, pod_name, uid)
    assert isinstance(envelope.payload, PodActionRequested)
    first = Executor(settings, event_store, k8s_client)
    second = Executor(settings, event_store, k8s_client)
    applied_by_first: list[str] = []

    async def first_applies() -> None:
        if not applied_by_first:
            await first.execute(envelope, envelope.payload)
            pod = await core.read_namespaced_pod(pod_name, "default")
            applied_by_first.append(pod.metadata.resource_version)

    calls = PodCalls(second, before_status=first_applies)
    await second.execute(envelope, envelope.payload)
    calls.detach()

    assert calls.kinds() == ["GET", "PATCH status"]  # the condition (a no-op now), then no spec patch
    after = await core.read_namespaced_pod(pod_name, "default")
    assert after.spec.containers[0].image == "nginx:mainline"
    assert after.metadata.annotations[ACTION_ID_ANNOTATION] == envelope.payload.action_id
    (outcome,) = await outcomes(event_store, workload)  # the first executor's
    assert isinstance(outcome, PodActionSucceeded) and not outcome.already_applied
