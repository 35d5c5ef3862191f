"""An action naming the resourceVersion the planner computed it from (``details.resourceVersion``, CloneSet
rules 13) makes its first write at that version with no read of the pod before it: an in-place update is
two requests (the condition, then the spec at the version the condition write returned), a mark or a
patchPod one. A pod changed since (another writer, or this action applied by an earlier delivery) answers
409, and the executor reads the pod and goes on as for an action without a version: applied once, or
reported already applied with no second write (services/model/pod_writes.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes_asyncio import client

from services.executor.service import Executor
from services.infra.settings import Settings
from services.infra.store import EventStore
from services.model.events import Envelope, PodActionRequested, PodActionSucceeded
from services.model.streams import ACTION_ID_ANNOTATION
from services.simcluster import SimCluster
from tests.executor.test_inplace_not_ready import (
    IMAGE_PATCH,
    NOT_READY,
    READY,
    PodCalls,
    in_place_ready,
    outcomes,
    planned,
    ungated_pod,
)
from tests.executor.test_mark_retry import ready_pod_with_gate, wait_for_ready


async def settled_pod(core: client.CoreV1Api, workload: str) -> tuple[str, str, str]:
    """A running, ready pod without the readiness gate (the kubelet has nothing more to write to it): its
    name, uid and resourceVersion, as the planner would have observed it."""
    pod_name, uid = await ungated_pod(core, workload)
    await wait_for_ready(core, pod_name, "True")
    pod = await core.read_namespaced_pod(pod_name, "default")
    return pod_name, uid, pod.metadata.resource_version


async def observed_update(
    event_store: EventStore, workload: str, pod_name: str, uid: str, version: str
) -> Envelope:
    details = {"patch": IMAGE_PATCH, "notReady": NOT_READY, "uid": uid, "change": "Rebuild"}
    return await planned(
        event_store, workload, "updateInPlace", pod_name, {**details, "resourceVersion": version}
    )


async def version_of(core: client.CoreV1Api, pod_name: str) -> str:
    return str((await core.read_namespaced_pod(pod_name, "default")).metadata.resource_version)


async def an_observed_update(
    event_store: EventStore, core: client.CoreV1Api
) -> tuple[str, str, str, str, Envelope]:
    """A settled pod and an in-place update of it planned at its current version: the workload, the pod's
    name, uid and resourceVersion, and the planned action."""
    workload = f"web{uuid.uuid4().hex[:8]}"
    pod_name, uid, version = await settled_pod(core, workload)
    envelope = await observed_update(event_store, workload, pod_name, uid, version)
    assert isinstance(envelope.payload, PodActionRequested)
    return workload, pod_name, uid, version, envelope


async def executed(executor: Executor, envelope: Envelope) -> PodCalls:
    """The pod requests ``executor`` made to execute ``envelope``'s action."""
    calls = PodCalls(executor)
    assert isinstance(envelope.payload, PodActionRequested)
    try:
        await executor.execute(envelope, envelope.payload)
    finally:
        calls.detach()
    return calls


async def assert_updated_once(
    core: client.CoreV1Api, event_store: EventStore, workload: str, pod_name: str, envelope: Envelope
) -> None:
    """The pod carries the update, its action id and InPlaceUpdateReady False; one outcome, applied now."""
    assert isinstance(envelope.payload, PodActionRequested)
    after = await core.read_namespaced_pod(pod_name, "default")
    assert after.spec.containers[0].image == "nginx:mainline"
    assert after.metadata.annotations[ACTION_ID_ANNOTATION] == envelope.payload.action_id
    assert in_place_ready(after) == ["False"]
    (outcome,) = await outcomes(event_store, workload)
    assert isinstance(outcome, PodActionSucceeded) and not outcome.already_applied


@pytest.mark.asyncio(loop_scope="session")
async def test_an_update_at_the_current_version_writes_without_reading(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(k8s_client)
    workload, pod_name, uid, version, envelope = await an_observed_update(event_store, core)

    calls = await executed(Executor(settings, event_store, k8s_client), envelope)

    assert calls.kinds() == ["PATCH status", "PATCH"]  # no GET
    status_body = calls.calls[0][1]
    assert status_body == {
        "metadata": {"uid": uid, "resourceVersion": version},
        "status": {"conditions": [NOT_READY]},
    }
    await assert_updated_once(core, event_store, workload, pod_name, envelope)


@pytest.mark.asyncio(loop_scope="session")
async def test_the_kubelets_status_write_between_the_two_writes_costs_no_request(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    # A pod behind the InPlaceUpdateReady readiness gate: the kubelet answers the condition with a status
    # write of its own (Ready False), here always before the spec patch is sent.
    workload = f"web{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_client)
    pod_name = await ready_pod_with_gate(core, workload)
    pod = await core.read_namespaced_pod(pod_name, "default")
    envelope = await observed_update(
        event_store, workload, pod_name, pod.metadata.uid, pod.metadata.resource_version
    )
    assert isinstance(envelope.payload, PodActionRequested)
    executor = Executor(settings, event_store, k8s_client)
    versions: list[str] = []

    async def kubelet_first(_: Any) -> None:
        await wait_for_ready(core, pod_name, "False")
        versions.append(await version_of(core, pod_name))

    calls = PodCalls(executor, before_spec=kubelet_first)
    await executor.execute(envelope, envelope.payload)
    calls.detach()

    # The condition at the planner's version, then the spec: no 409, no read, no second patch.
    assert calls.kinds() == ["PATCH status", "PATCH"]
    (between,) = versions
    assert between != pod.metadata.resource_version  # the kubelet did write in between
    await assert_updated_once(core, event_store, workload, pod_name, envelope)


@pytest.mark.asyncio(loop_scope="session")
async def test_a_stale_version_reads_the_pod_and_applies_the_update_once(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(k8s_client)
    workload, pod_name, _, _, envelope = await an_observed_update(event_store, core)
    # Someone writes the pod after the planner saw it.
    await core.patch_namespaced_pod(pod_name, "default", {"metadata": {"labels": {"other": "x"}}})

    calls = await executed(Executor(settings, event_store, k8s_client), envelope)

    # The condition at the planner's version is refused (409); then the read, and the writes as without it.
    assert calls.kinds() == ["PATCH status", "GET", "PATCH status", "PATCH"]
    assert "resourceVersion" not in calls.calls[2][1]["metadata"]
    assert (await core.read_namespaced_pod(pod_name, "default")).metadata.labels["other"] == "x"
    await assert_updated_once(core, event_store, workload, pod_name, envelope)


@pytest.mark.asyncio(loop_scope="session")
async def test_a_redelivered_update_is_refused_at_its_version_and_reported_already_applied(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(k8s_client)
    workload, pod_name, _, _, envelope = await an_observed_update(event_store, core)
    assert isinstance(envelope.payload, PodActionRequested)
    # The first delivery applied it and died before reporting.
    await Executor(settings, event_store, k8s_client).apply(envelope.payload)
    applied = await version_of(core, pod_name)

    calls = await executed(Executor(settings, event_store, k8s_client), envelope)

    assert calls.kinds() == ["PATCH status", "GET"]  # refused at the planner's version, then found applied
    assert await version_of(core, pod_name) == applied  # no second write
    (outcome,) = await outcomes(event_store, workload)
    assert isinstance(outcome, PodActionSucceeded) and outcome.already_applied


@pytest.mark.asyncio(loop_scope="session")
async def test_a_patch_without_a_condition_is_one_request(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_client)
    pod_name, uid, version = await settled_pod(core, workload)
    move = {"metadata": {"labels": {"lifecycle.apps.kruise.io/state": "Normal"}}}
    details = {"patch": move, "uid": uid, "resourceVersion": version}
    envelope = await planned(event_store, workload, "patchPod", pod_name, details)
    assert isinstance(envelope.payload, PodActionRequested)
    calls = await executed(Executor(settings, event_store, k8s_client), envelope)

    assert calls.kinds() == ["PATCH"]
    assert calls.calls[0][1]["metadata"]["resourceVersion"] == version
    after = await core.read_namespaced_pod(pod_name, "default")
    assert after.metadata.labels["lifecycle.apps.kruise.io/state"] == "Normal"
    assert after.metadata.annotations[ACTION_ID_ANNOTATION] == envelope.payload.action_id


async def gated_not_ready_pod(core: client.CoreV1Api, workload: str) -> tuple[str, str, str]:
    """A pod whose in-place update has finished (InPlaceUpdateReady False, so not Ready), settled: what a
    markReady is planned from."""
    pod_name = await ready_pod_with_gate(core, workload)
    await core.patch_namespaced_pod_status(pod_name, "default", {"status": {"conditions": [NOT_READY]}})
    await wait_for_ready(core, pod_name, "False")
    pod = await core.read_namespaced_pod(pod_name, "default")
    return pod_name, pod.metadata.uid, pod.metadata.resource_version


@pytest.mark.asyncio(loop_scope="session")
async def test_a_mark_at_the_current_version_is_one_write_and_its_redelivery_none(
    settings: Settings, event_store: EventStore, simcluster: SimCluster, k8s_client: client.ApiClient
) -> None:
    workload = f"web{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_client)
    pod_name, uid, version = await gated_not_ready_pod(core, workload)
    details: dict[str, Any] = {"condition": READY, "uid": uid, "resourceVersion": version}
    envelope = await planned(event_store, workload, "markReady", pod_name, details)
    assert isinstance(envelope.payload, PodActionRequested)
    first = Executor(settings, event_store, k8s_client)
    calls = PodCalls(first)
    assert await first.apply(envelope.payload) == (uid, False)  # applied; dies before reporting
    calls.detach()

    assert calls.kinds() == ["PATCH status"]  # no GET
    body = calls.calls[0][1]
    assert body["metadata"]["resourceVersion"] == version
    assert body["status"] == {"conditions": [READY]}
    await wait_for_ready(core, pod_name, "True")  # the kubelet answered the condition
    marked = await version_of(core, pod_name)

    again = await executed(Executor(settings, event_store, k8s_client), envelope)

    assert again.kinds() == ["PATCH status", "GET"]  # refused at the planner's version, found applied
    assert await version_of(core, pod_name) == marked  # no second write
    (outcome,) = await outcomes(event_store, workload)
    assert isinstance(outcome, PodActionSucceeded) and outcome.already_applied


# The lifecycle move the markReady ending an in-place update carries
# (services/kinds/cloneset/rules/update.py, refresh).
LIFECYCLE_MOVE = {
    "metadata": {
        "labels": {"lifecycle.apps.kruise.io/state": "Normal"},
        "annotations": {"lifecycle.apps.kruise.io/timestamp": "2026-01-01T00:00:00Z"},
    }
}


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("patch", [None, LIFECYCLE_MOVE], ids=["condition", "with-lifecycle-move"])
async def test_a_mark_after_this_executors_update_is_one_write_though_the_kubelet_wrote_since(
    settings: Settings,
    event_store: EventStore,
    simcluster: SimCluster,
    k8s_client: client.ApiClient,
    patch: dict[str, Any] | None,
) -> None:
    # The in-place update, then the markReady the planner computes from the pod as the update left it,
    # while the kubelet still writes the restarted container's status (here: always before the mark).
    core = client.CoreV1Api(k8s_client)
    workload = f"web{uuid.uuid4().hex[:8]}"
    pod_name = await ready_pod_with_gate(core, workload)
    pod = await core.read_namespaced_pod(pod_name, "default")
    uid = pod.metadata.uid
    update = await observed_update(event_store, workload, pod_name, uid, pod.metadata.resource_version)
    executor = Executor(settings, event_store, k8s_client)
    assert await executed(executor, update)
    seen_by_planner = await version_of(core, pod_name)
    details: dict[str, Any] = {"condition": READY, "uid": uid, "resourceVersion": seen_by_planner}
    if patch is not None:
        details["patch"] = patch
    mark = await planned(event_store, workload, "markReady", pod_name, details)
    assert isinstance(mark.payload, PodActionRequested)
    other = {"type": "example.com/Probe", "status": "True"}  # a status write after the planner saw it
    await core.patch_namespaced_pod_status(pod_name, "default", {"status": {"conditions": [other]}})
    assert await version_of(core, pod_name) != seen_by_planner

    calls = await executed(executor, mark)

    assert calls.kinds() == ["PATCH status"]  # no 409, no read
    await wait_for_ready(core, pod_name, "True")
    after = await core.read_namespaced_pod(pod_name, "default")
    assert after.metadata.annotations[ACTION_ID_ANNOTATION] == mark.payload.action_id
    assert in_place_ready(after) == ["True"]
    if patch is not None:
        assert after.metadata.labels["lifecycle.apps.kruise.io/state"] == "Normal"
    marked = await version_of(core, pod_name)

    # Delivered again, its outcome lost with another executor: found applied, nothing written.
    redelivered = Executor(settings, event_store, k8s_client)
    again = PodCalls(redelivered)
    assert await redelivered.apply(mark.payload) == (uid, True)
    again.detach()
    assert again.kinds() == ["PATCH status", "GET"]
    assert await version_of(core, pod_name) == marked
